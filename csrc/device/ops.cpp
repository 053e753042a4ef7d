// The ATen kernels a PrivateUse1 device must have natively: factories, views (which can never
// fall back: the CPU fallback would return a copy, not an alias), resize_, set_, copies, fill_,
// zero_ and _local_scalar_dense. Everything else reaches the counted CPU fallback.
//
// Device memory is never dereferenced by the host: every byte moves through the runtime's
// memcpy entries, so a runtime whose device addresses are not host addresses works.
#include "tv_device.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>

namespace torchvendor {
namespace {

using at::Tensor;
constexpr auto kPU1 = c10::DeviceType::PrivateUse1;
const c10::DispatchKeySet kKeys(c10::DispatchKey::PrivateUse1);

void check_factory_args(std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                        std::optional<bool> pin_memory) {
  TORCH_CHECK_NOT_IMPLEMENTED(c10::layout_or_default(layout) == c10::Layout::Strided,
                              backend_name(), " tensors support only the strided layout, got ",
                              c10::layout_or_default(layout), ".");
  TORCH_CHECK_VALUE(!c10::pinned_memory_or_default(pin_memory),
                    "pin_memory=True applies to CPU tensors only; create the tensor on the CPU "
                    "with pin_memory=True and copy it to ", backend_name(), ".");
  auto d = c10::device_or_default(device);
  TORCH_CHECK(d.type() == kPU1, "expected a ", backend_name(), " device, got ", d);
  if (d.has_index()) check_device_index(d.index());
}

Tensor empty_memory_format(c10::IntArrayRef size, std::optional<c10::ScalarType> dtype,
                           std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                           std::optional<bool> pin_memory,
                           std::optional<c10::MemoryFormat> memory_format) {
  check_factory_args(layout, device, pin_memory);
  const c10::OptionalDeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_generic(size, device_allocator(), kKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                     std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
                     std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  check_factory_args(layout, device, pin_memory);
  const c10::OptionalDeviceGuard guard(c10::device_or_default(device));
  return at::detail::empty_strided_generic(size, stride, device_allocator(), kKeys,
                                           c10::dtype_or_default(dtype));
}

// ---- storage and metadata ------------------------------------------------------------------

void ensure_storage(const Tensor& self) {
  auto* impl = self.unsafeGetTensorImpl();
  if (self.numel() == 0) return;
  size_t needed = at::detail::computeStorageNbytes(self.sizes(), self.strides(),
                                                   self.dtype().itemsize(),
                                                   self.storage_offset());
  auto* storage = impl->unsafe_storage().unsafeGetStorageImpl();
  if (needed > storage->nbytes()) resize_storage_bytes(storage, needed);
}

const Tensor& resize_(const Tensor& self, c10::IntArrayRef size,
                      std::optional<c10::MemoryFormat> memory_format) {
  for (int64_t s : size)
    TORCH_CHECK_VALUE(s >= 0, "resize_: sizes must be non-negative, got ", size);
  auto* impl = self.unsafeGetTensorImpl();
  if (self.sizes() != size) impl->set_sizes_contiguous(size);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "resize_: unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  ensure_storage(self);
  return self;
}

Tensor& set_storage_offset(Tensor& self, c10::Storage storage, int64_t storage_offset,
                           c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(storage.device_type() == kPU1, "set_: expected a ", backend_name(),
              " storage, got one on ", storage.device());
  TORCH_CHECK_VALUE(storage_offset >= 0, "set_: storage offset must be >= 0, got ",
                    storage_offset);
  TORCH_CHECK_VALUE(stride.empty() || stride.size() == size.size(), "set_: got ", size.size(),
                    " sizes and ", stride.size(), " strides");
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(storage)) impl->set_storage_keep_dtype(std::move(storage));
  impl->set_storage_offset(storage_offset);
  if (stride.empty())
    impl->set_sizes_contiguous(size);
  else
    impl->set_sizes_and_strides(size, stride);
  ensure_storage(self);
  return self;
}

Tensor& set_storage(Tensor& self, c10::Storage source) {
  int64_t n = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage_offset(self, std::move(source), 0, {n}, {});
}

Tensor& set_tensor(Tensor& self, const Tensor& source) {
  if (self.is_same(source)) return self;
  return set_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(),
                            source.strides());
}

Tensor& set_empty(Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
  return set_storage_offset(self, std::move(storage), 0, {0}, {});
}

// ---- copies --------------------------------------------------------------------------------

// Elements between the first and one past the last element a strided tensor touches.
int64_t extent(const Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t e = 1;
  for (int64_t i = 0; i < t.dim(); ++i) e += (t.size(i) - 1) * t.stride(i);
  return e;
}

bool dense(const Tensor& t) { return t.is_non_overlapping_and_dense(); }

bool same_layout(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.is_conj() == b.is_conj() && a.is_neg() == b.is_neg() && dense(a) && dense(b);
}

// Gives a tensor over raw memory the conjugate/negative bits of `like`.
Tensor with_bits_of(Tensor phys, const Tensor& like) {
  if (like.is_conj()) phys = phys._conj();
  if (like.is_neg()) phys = phys._neg_view();
  return phys;
}

c10::Stream stream_of(const Tensor& device_tensor) {
  return current_stream(device_tensor.device().index());
}

// Device -> CPU of a dense tensor, in its own strides: one runtime copy. Every Tensor.cpu() and
// each input of the CPU fallback lands here; the composite _to_copy took three more dispatches
// (empty, copy_, _copy_from) for the same bytes, about a third of a 16-element add's fallback.
// Anything else (a dtype change, another target, pinned output, conj/neg bits, gaps between the
// elements) goes the composite way.
Tensor to_copy(const Tensor& self, std::optional<c10::ScalarType> dtype,
               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
               std::optional<bool> pin_memory, bool non_blocking,
               std::optional<c10::MemoryFormat> memory_format) {
  const bool simple =
      device && device->is_cpu() && (!dtype || *dtype == self.scalar_type()) &&
      c10::layout_or_default(layout) == c10::Layout::Strided &&
      !c10::pinned_memory_or_default(pin_memory) &&
      memory_format.value_or(c10::MemoryFormat::Preserve) == c10::MemoryFormat::Preserve &&
      self.layout() == c10::Layout::Strided && !self.is_conj() && !self.is_neg() &&
      self.is_non_overlapping_and_dense();
  if (!simple)
    return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking,
                                memory_format);
  Tensor out = at::empty_strided(self.sizes(), self.strides(), self.options().device(c10::kCPU));
  copy_bytes(out.mutable_data_ptr(), self.const_data_ptr(), self.nbytes(),
             TV_MEMCPY_DEVICE_TO_HOST, current_stream(self.device().index()), false);
  return out;
}

// A CPU tensor holding `src`'s values (same sizes, strides and bits): the storage span is
// copied to the host, then viewed.
Tensor read_to_cpu(const Tensor& src) {
  auto buffer = at::empty({extent(src)}, src.options().device(c10::kCPU));
  copy_bytes(buffer.mutable_data_ptr(), src.const_data_ptr(),
             buffer.numel() * src.dtype().itemsize(), TV_MEMCPY_DEVICE_TO_HOST,
             stream_of(src), false);
  return with_bits_of(buffer.as_strided(src.sizes(), src.strides(), 0), src);
}

// Writes CPU values (broadcastable to dst) into a device tensor of any layout.
void write_from_cpu(const Tensor& dst, const Tensor& src, bool non_blocking) {
  if (dst.numel() == 0) return;
  const size_t item = dst.dtype().itemsize();
  if (dense(dst)) {
    if (same_layout(src, dst)) {
      const bool async = non_blocking && is_pinned_ptr(src.const_data_ptr());
      copy_bytes(dst.mutable_data_ptr(), src.const_data_ptr(), dst.numel() * item,
                 TV_MEMCPY_HOST_TO_DEVICE, stream_of(dst), async);
      if (async) record_pinned_use(src.const_data_ptr(), stream_of(dst));
      return;
    }
    auto staging = at::empty_strided(dst.sizes(), dst.strides(),
                                     dst.options().device(c10::kCPU));
    with_bits_of(staging, dst).copy_(src);
    copy_bytes(dst.mutable_data_ptr(), staging.const_data_ptr(), dst.numel() * item,
               TV_MEMCPY_HOST_TO_DEVICE, stream_of(dst), false);
    return;
  }
  // A view with gaps: read the span, update it on the host, write it back.
  auto buffer = at::empty({extent(dst)}, dst.options().device(c10::kCPU));
  copy_bytes(buffer.mutable_data_ptr(), dst.const_data_ptr(), buffer.numel() * item,
             TV_MEMCPY_DEVICE_TO_HOST, stream_of(dst), false);
  with_bits_of(buffer.as_strided(dst.sizes(), dst.strides(), 0), dst).copy_(src);
  copy_bytes(dst.mutable_data_ptr(), buffer.const_data_ptr(), buffer.numel() * item,
             TV_MEMCPY_HOST_TO_DEVICE, stream_of(dst), false);
}

Tensor copy_from(const Tensor& self, const Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "_copy_from: undefined tensor");
  if (dst.numel() == 0) return dst;
  const bool src_dev = self.device().type() == kPU1;
  const bool dst_dev = dst.device().type() == kPU1;
  if (src_dev && !dst_dev) {  // device -> host
    TORCH_CHECK(dst.is_cpu(), "cannot copy a ", backend_name(), " tensor to ", dst.device(),
                " directly; copy it to the CPU first.");
    if (same_layout(self, dst)) {
      const bool async = non_blocking && is_pinned_ptr(dst.const_data_ptr());
      copy_bytes(dst.mutable_data_ptr(), self.const_data_ptr(),
                 dst.numel() * dst.dtype().itemsize(), TV_MEMCPY_DEVICE_TO_HOST,
                 stream_of(self), async);
      if (async) record_pinned_use(dst.const_data_ptr(), stream_of(self));
    } else {
      const_cast<Tensor&>(dst).copy_(read_to_cpu(self));
    }
    return dst;
  }
  if (!src_dev && dst_dev) {  // host -> device
    TORCH_CHECK(self.is_cpu(), "cannot copy a tensor on ", self.device(), " to ",
                backend_name(), " directly; copy it to the CPU first.");
    write_from_cpu(dst, self, non_blocking);
    return dst;
  }
  TORCH_CHECK(src_dev && dst_dev, "_copy_from: neither tensor is on ", backend_name());
  if (same_layout(self, dst)) {  // device -> device, same or another device
    c10::Stream stream = stream_of(dst);
    if (self.device() != dst.device()) {
      // The destination stream cannot see the source device's work: finish it first.
      TV_CALL(stream_synchronize, native_stream(stream_of(self)));
    }
    copy_bytes(dst.mutable_data_ptr(), self.const_data_ptr(),
               dst.numel() * dst.dtype().itemsize(), TV_MEMCPY_DEVICE_TO_DEVICE, stream,
               non_blocking);
    return dst;
  }
  write_from_cpu(dst, read_to_cpu(self), false);  // conversion or layout change: via the host
  return dst;
}

Tensor copy_from_and_resize(const Tensor& self, const Tensor& dst) {
  resize_(dst, self.sizes(), std::nullopt);
  return copy_from(self, dst, false);
}

Tensor& fill_(Tensor& self, const c10::Scalar& value) {
  if (self.numel() == 0) return self;
  const bool zero = value.isBoolean() ? !value.toBool()
                    : value.isComplex() ? value.toComplexDouble() == c10::complex<double>(0, 0)
                    : value.isFloatingPoint() ? value.toDouble() == 0.0 &&
                                                    !std::signbit(value.toDouble())
                                              : value.toLong() == 0;
  if (zero && dense(self) && (rt().memset_async || rt().memset)) {
    size_t n = self.numel() * self.dtype().itemsize();
    c10::Stream stream = stream_of(self);
    if (rt().memset_async)
      TV_CALL(memset_async, self.mutable_data_ptr(), 0, n, native_stream(stream));
    else {
      TV_CALL(stream_synchronize, native_stream(stream));
      TV_CALL(memset, self.mutable_data_ptr(), 0, n);
    }
    return self;
  }
  write_from_cpu(self, at::scalar_tensor(value, self.options().device(c10::kCPU)), false);
  return self;
}

Tensor& zero_(Tensor& self) { return fill_(self, 0); }

c10::Scalar local_scalar_dense(const Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  return read_to_cpu(self).item();
}

// tensor.record_stream(s): the caching allocator keeps the block from being reused until the
// work now enqueued on `s` has run (no CPU fallback: the CPU has no record_stream kernel).
void record_stream(Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kPU1, "record_stream: expected a ", backend_name(),
              " stream, got one on ", stream.device());
  device_allocator()->recordStream(self.storage().data_ptr(), stream);
}

// Whether `self` (a Parameter's tensor) may take `from`'s data in place (`param.data = t`):
// torch's own rule names CPU, CUDA and a few more dense backends but not PrivateUse1, so
// `module.to(device)` made new Parameters and broke weight tying (GPT-2's lm_head and wte
// trained apart on the device). Dense strided tensors of the CPU and the device are compatible.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::kStrided && (t.device().is_cpu() || t.device().is_privateuseone());
  };
  return (dense(self) && dense(from)) || self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

}  // namespace

void resize_storage_bytes(c10::StorageImpl* storage, size_t nbytes) {
  TORCH_CHECK(storage->resizable(), "Trying to resize storage that is not resizable");
  const c10::Device device = storage->device();
  const c10::DeviceGuard guard(device);
  c10::Allocator* alloc = storage->allocator() ? storage->allocator() : device_allocator();
  c10::DataPtr fresh = alloc->allocate(nbytes);
  const size_t keep = std::min(nbytes, storage->nbytes());
  if (keep > 0)
    copy_bytes(fresh.get(), storage->data(), keep, TV_MEMCPY_DEVICE_TO_DEVICE,
               current_stream(device.index()), false);
  storage->set_data_ptr_noswap(std::move(fresh));
  storage->set_nbytes(nbytes);
}

void register_native_kernels(void* library) {
  auto& m = *static_cast<torch::Library*>(library);
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  // Views: never through the fallback, which would copy instead of aliasing.
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("unfold", TORCH_FN(at::native::unfold));
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real));
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  m.impl("resize_", TORCH_FN(resize_));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_to_copy", TORCH_FN(to_copy));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("fill_.Scalar", TORCH_FN(fill_));
  m.impl("zero_", TORCH_FN(zero_));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type));
}

}  // namespace torchvendor
