// The host side of the kernel template: ATen kernels for the device on PyTorch's LibTorch stable
// ABI. Each kernel checks its inputs, works out broadcasting and type promotion, allocates its
// output through torch (which lands in torchvendor's caching allocator), and launches the
// device code (device_kernels.c) through the runtime's module and launch entries on the runtime
// stream behind torch's current stream. No unstable torch header is included: the library is
// built with TORCH_TARGET_VERSION (CMake: TORCH_TARGET 2.11) and loads on later torch releases.
// What a kernel does not handle (complex and other untemplated dtypes, a CPU `self`, operands on
// two devices, more than 8 dimensions, arguments the CPU kernel refuses) it hands back to the
// device's counted CPU fallback (tv::fallback), so the device answers as it does without the
// library, errors included, worded by the CPU kernel. mm and sum accumulate floating values in
// double and round once to the output dtype, integers in int64. The CPU's float32 BLAS and
// vectorized cascade sums use an order no simple kernel reproduces; a float accumulator in
// another order is as far from the CPU as from the truth (10 backward cases of the device profile
// failed so), a double one is within half an ulp of the truth, so it differs from the CPU only by
// the CPU's own rounding, which the suite's float64 rule accepts (docs/conformance.md).
//
//   aten::mul.Tensor, aten::relu, aten::mm, aten::sum, aten::sum.dim_IntList
//   torchvendor::add.Tensor (served as aten::add.Tensor: the stable ABI cannot pass its Scalar)
#include <torchvendor/stable_kernels.h>

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "kernels_abi.h"

TV_KERNEL_LIBRARY(TV_KERNELS_TORCH_TARGET);
TV_KERNELS_INIT()

namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

// ---- device code: one module per device, loaded on first use --------------------------------

struct DeviceFunctions {
  std::atomic<bool> ready{false};  // set once the three functions below are loaded
  tv_function elementwise = nullptr, mm = nullptr, sum = nullptr;
};

// The device module's file name: CMake defines it from the module's target (CMakeLists.txt).
#ifndef DEVICE_KERNELS_FILE
#error "build with CMakeLists.txt, which defines DEVICE_KERNELS_FILE (the device module's file name)"
#endif

std::string device_module_path() {  // beside this library
  Dl_info info{};
  dladdr(reinterpret_cast<void*>(&device_module_path), &info);
  std::string self = info.dli_fname ? info.dli_fname : "";
  return self.substr(0, self.rfind('/') + 1) + DEVICE_KERNELS_FILE;
}

// Loaded on a device's first call; later calls read them without taking the lock.
const DeviceFunctions& functions(int32_t device) {
  static std::mutex mutex;
  static std::array<DeviceFunctions, 64> table;
  STD_TORCH_CHECK(device >= 0 && device < static_cast<int32_t>(table.size()), "device index ", device);
  DeviceFunctions& f = table[device];
  if (f.ready.load(std::memory_order_acquire)) return f;
  std::lock_guard<std::mutex> lock(mutex);
  if (!f.ready.load(std::memory_order_relaxed)) {
    const tv_runtime& rt = *tv::api().runtime;
    tv_module module = nullptr;
    tv::check(rt.module_load_file(device, device_module_path().c_str(), &module),
              "module_load_file(" DEVICE_KERNELS_FILE ")");
    tv::check(rt.module_get_function(module, "tv_tpl_elementwise", &f.elementwise), "get tv_tpl_elementwise");
    tv::check(rt.module_get_function(module, "tv_tpl_mm", &f.mm), "get tv_tpl_mm");
    tv::check(rt.module_get_function(module, "tv_tpl_sum", &f.sum), "get tv_tpl_sum");
    f.ready.store(true, std::memory_order_release);
  }
  return f;
}

template <typename Args, size_t N>
void launch(int32_t device, tv_function fn, const Args& args, const std::array<size_t, N>& ptrs) {
  uint32_t offsets[N];
  for (size_t i = 0; i < N; ++i) offsets[i] = static_cast<uint32_t>(ptrs[i]);
  tv_launch_config config{};
  config.grid[0] = config.grid[1] = config.grid[2] = 1;
  config.block[0] = config.block[1] = config.block[2] = 1;
  config.pointer_offsets = offsets;
  config.num_pointer_offsets = N;
  tv::check(tv::api().runtime->launch(fn, &config, &args, sizeof args, tv::current_stream(device)),
            "launch");
}

// ---- dtypes, devices, shapes ----------------------------------------------------------------

// The template's dtype code of `t`, or -1 for a dtype it does not handle.
int32_t code_of(ScalarType t) {
  switch (t) {
    case ScalarType::Bool: return TV_TPL_BOOL;
    case ScalarType::Byte: return TV_TPL_U8;
    case ScalarType::Char: return TV_TPL_I8;
    case ScalarType::Short: return TV_TPL_I16;
    case ScalarType::Int: return TV_TPL_I32;
    case ScalarType::Long: return TV_TPL_I64;
    case ScalarType::Float: return TV_TPL_F32;
    case ScalarType::Double: return TV_TPL_F64;
    case ScalarType::Half: return TV_TPL_F16;
    case ScalarType::BFloat16: return TV_TPL_BF16;
    default: return -1;  // complex, quantized, float8, unsigned wider than 8 bits
  }
}

bool is_floating(ScalarType t) { return code_of(t) >= TV_TPL_F32; }

// torch's own type promotion (wrapped Python numbers and 0-dim tensors included).
ScalarType result_type(const Tensor& a, const Tensor& b) {
  if (a.scalar_type() == b.scalar_type()) return a.scalar_type();
  std::array<StableIValue, 2> stack{torch::stable::detail::from(a), torch::stable::detail::from(b)};
  TORCH_ERROR_CODE_CHECK(aoti_torch_call_dispatcher("aten::result_type", "Tensor", stack.data()));
  return torch::stable::detail::to<ScalarType>(stack[0]);
}

// Sizes and strides of an operand, read once (each accessor is a call into torch's C shim).
struct Layout {
  torch::headeronly::IntHeaderOnlyArrayRef sizes, strides;
  int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
};

// The broadcast shape of a and b into `out` (fixed-size: no allocation per call); its rank.
int64_t broadcast(const Layout& a, const Layout& b, int64_t* out) {
  const int64_t n = std::max(a.dim(), b.dim());
  STD_TORCH_CHECK(n <= TV_TPL_MAX_DIMS, "at most ", TV_TPL_MAX_DIMS, " dimensions");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t da = i - (n - a.dim()), db = i - (n - b.dim());
    const int64_t sa = da >= 0 ? a.sizes[da] : 1, sb = db >= 0 ? b.sizes[db] : 1;
    STD_TORCH_CHECK(sa == sb || sa == 1 || sb == 1, "The size of tensor a (", sa,
                    ") must match the size of tensor b (", sb, ") at non-singleton dimension ", i);
    out[i] = sa == 1 ? sb : sa;
  }
  return n;
}

// Element strides of `t` broadcast to `shape` (0 along broadcast dimensions).
void broadcast_strides(const Layout& t, const int64_t* shape, int64_t n, int64_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = i - (n - t.dim());
    out[i] = d >= 0 && t.sizes[d] != 1 ? t.strides[d] : 0;
  }
}

// Outputs come from the SDK's caching allocator without a dispatcher round trip (tv::empty).
Tensor new_output(torch::headeronly::IntHeaderOnlyArrayRef shape, ScalarType dtype, int32_t device) {
  return tv::empty(shape, dtype, device);
}

// A CPU 0-dim operand is read on the host (its memory is host memory).
bool host_scalar_dtype(ScalarType t) {
  return t == ScalarType::Bool || t == ScalarType::Long || t == ScalarType::Int ||
         t == ScalarType::Double || t == ScalarType::Float;
}

double host_scalar(const Tensor& t) {
  const void* p = t.const_data_ptr();
  switch (t.scalar_type()) {
    case ScalarType::Bool: return *static_cast<const bool*>(p);
    case ScalarType::Long: return static_cast<double>(*static_cast<const int64_t*>(p));
    case ScalarType::Int: return *static_cast<const int32_t*>(p);
    case ScalarType::Double: return *static_cast<const double*>(p);
    default: return *static_cast<const float*>(p);
  }
}

// Whether elementwise() handles op(a, b) (b null: unary): `a` on the device, `b` on the same
// device or a CPU 0-dim scalar of a dtype read on the host, templated dtypes in and out,
// shapes that broadcast within TV_TPL_MAX_DIMS. Everything else goes to the CPU fallback.
bool elementwise_handles(const Tensor& a, const Tensor* b) {
  if (a.is_cpu() || code_of(a.scalar_type()) < 0 || a.dim() > TV_TPL_MAX_DIMS) return false;
  if (b == nullptr) return true;
  if (code_of(b->scalar_type()) < 0 || b->dim() > TV_TPL_MAX_DIMS) return false;
  if (b->is_cpu()) {
    if (b->dim() != 0 || !host_scalar_dtype(b->scalar_type())) return false;
  } else if (b->get_device_index() != a.get_device_index()) {
    return false;
  }
  const auto sa = a.sizes(), sb = b->sizes();
  const size_t n = std::max(sa.size(), sb.size());
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i + sa.size() >= n ? sa[i + sa.size() - n] : 1;
    const int64_t y = i + sb.size() >= n ? sb[i + sb.size() - n] : 1;
    if (x != y && x != 1 && y != 1) return false;  // the CPU kernel words the error
  }
  return a.scalar_type() == b->scalar_type() || code_of(result_type(a, *b)) >= 0;
}

// ---- kernels ----------------------------------------------------------------------------------

int64_t product(const int64_t* sizes, int64_t n) {
  int64_t p = 1;
  for (int64_t i = 0; i < n; ++i) p *= sizes[i];
  return p;
}

// out = op(a, b) elementwise with broadcasting and type promotion; `b` is null for a unary op.
// Every property of a tensor is one call into torch's C shim, so each is read once.
// The caller checked elementwise_handles(a, b).
Tensor elementwise(const Tensor& a, const Tensor* b, int32_t op, double alpha) {
  const bool b_dev = b != nullptr && !b->is_cpu();
  const int32_t device = a.get_device_index();
  tv::DeviceGuard guard(device);
  const ScalarType ta = a.scalar_type(), tb = b ? b->scalar_type() : ta;
  const ScalarType dtype = ta == tb ? ta : result_type(a, *b);
  const Layout la{a.sizes(), a.strides()};
  const Layout lb = b ? Layout{b->sizes(), b->strides()} : la;
  int64_t shape[TV_TPL_MAX_DIMS];
  const int64_t ndim = broadcast(la, lb, shape);
  Tensor out = new_output({shape, static_cast<size_t>(ndim)}, dtype, device);
  const int64_t numel = product(shape, ndim);
  if (numel == 0) return out;
  tv_tpl_elementwise_args args{};
  args.op = op;
  args.ndim = static_cast<int32_t>(ndim);
  args.numel = numel;
  args.alpha = alpha;
  args.a = a.const_data_ptr();
  args.out = out.mutable_data_ptr();
  args.dtype_a = code_of(ta);
  args.dtype_out = code_of(dtype);
  args.dtype_b = b_dev ? code_of(tb) : args.dtype_a;
  if (b_dev) args.b = b->const_data_ptr();
  else if (b) args.scalar_b = host_scalar(*b);
  std::copy(shape, shape + ndim, args.sizes);
  broadcast_strides(la, shape, ndim, args.stride_a);
  if (b_dev) broadcast_strides(lb, shape, ndim, args.stride_b);
  args.contiguous = la.dim() == ndim && product(la.sizes.data(), ndim) == numel && a.is_contiguous() &&
                    (!b_dev || (lb.dim() == ndim && product(lb.sizes.data(), ndim) == numel &&
                                b->is_contiguous()));
  launch(device, functions(device).elementwise, args, std::array<size_t, 3>TV_TPL_ELEMENTWISE_POINTERS);
  return out;
}

// add's `self` must be on the device (a CPU scalar `self` goes to the fallback); mul is
// symmetric, so a CPU scalar may be either operand.
Tensor add(Tensor self, Tensor other, double alpha) {
  if (!elementwise_handles(self, &other))
    return tv::fallback<Tensor>("torchvendor::add.Tensor", self, other, alpha);
  return elementwise(self, &other, TV_TPL_ADD, alpha);
}

Tensor mul(Tensor self, Tensor other) {
  const bool swap = self.is_cpu();
  const Tensor& a = swap ? other : self;
  const Tensor& b = swap ? self : other;
  if (!elementwise_handles(a, &b)) return tv::fallback<Tensor>("aten::mul.Tensor", self, other);
  return elementwise(a, &b, TV_TPL_MUL, 1.0);
}

Tensor relu(Tensor self) {  // the CPU has no relu for bool: its fallback says so
  if (self.scalar_type() == ScalarType::Bool || !elementwise_handles(self, nullptr))
    return tv::fallback<Tensor>("aten::relu", self);
  return elementwise(self, nullptr, TV_TPL_RELU, 1.0);
}

// Two matrices of one real dtype on one device, as the CPU's mm takes them (it has no bool mm).
bool mm_handles(const Tensor& a, const Tensor& b) {
  if (a.is_cpu() || b.is_cpu() || a.get_device_index() != b.get_device_index()) return false;
  if (a.dim() != 2 || b.dim() != 2 || a.size(1) != b.size(0)) return false;
  const ScalarType t = a.scalar_type();
  return t == b.scalar_type() && code_of(t) >= 0 && t != ScalarType::Bool;
}

Tensor mm(Tensor a, Tensor b) {
  if (!mm_handles(a, b)) return tv::fallback<Tensor>("aten::mm", a, b);
  const int32_t device = a.get_device_index();
  tv::DeviceGuard guard(device);
  Tensor out = new_output({a.size(0), b.size(1)}, a.scalar_type(), device);
  tv_tpl_mm_args args{};
  args.a = a.const_data_ptr();
  args.b = b.const_data_ptr();
  args.out = out.mutable_data_ptr();
  args.dtype = code_of(a.scalar_type());
  args.m = a.size(0);
  args.n = b.size(1);
  args.k = a.size(1);
  args.stride_a[0] = a.stride(0), args.stride_a[1] = a.stride(1);
  args.stride_b[0] = b.stride(0), args.stride_b[1] = b.stride(1);
  // With k == 0 the kernel writes zeros, as torch does.
  if (out.numel() > 0) launch(device, functions(device).mm, args, std::array<size_t, 3>TV_TPL_MM_POINTERS);
  return out;
}

ScalarType sum_dtype(const Tensor& self, std::optional<ScalarType> dtype) {
  if (dtype) return *dtype;
  return is_floating(self.scalar_type()) ? self.scalar_type() : ScalarType::Long;
}

Tensor reduce(const Tensor& self, const std::vector<bool>& reduced, bool keepdim, ScalarType dtype) {
  const int32_t device = self.get_device_index();
  tv::DeviceGuard guard(device);
  std::vector<int64_t> shape;
  tv_tpl_sum_args args{};
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (reduced[d]) {
      args.red_sizes[args.red_ndim] = self.size(d);
      args.red_strides[args.red_ndim++] = self.stride(d);
      if (keepdim) shape.push_back(1);
    } else {
      args.out_sizes[args.out_ndim] = self.size(d);
      args.out_strides[args.out_ndim++] = self.stride(d);
      shape.push_back(self.size(d));
    }
  }
  Tensor out = new_output(shape, dtype, device);
  args.in = self.const_data_ptr();
  args.out = out.mutable_data_ptr();
  args.dtype_in = code_of(self.scalar_type());
  args.dtype_out = code_of(dtype);
  if (out.numel() > 0) launch(device, functions(device).sum, args, std::array<size_t, 2>TV_TPL_SUM_POINTERS);
  return out;
}

// A device tensor of a templated dtype, summed into a templated dtype.
bool sum_handles(const Tensor& self, std::optional<ScalarType> dtype) {
  return !self.is_cpu() && self.dim() <= TV_TPL_MAX_DIMS && code_of(self.scalar_type()) >= 0 &&
         code_of(sum_dtype(self, dtype)) >= 0;
}

Tensor sum(Tensor self, std::optional<ScalarType> dtype) {
  if (!sum_handles(self, dtype)) return tv::fallback<Tensor>("aten::sum", self, dtype);
  return reduce(self, std::vector<bool>(self.dim(), true), false, sum_dtype(self, dtype));
}

// Which dimensions `dim` reduces (none given or empty: all); nullopt for a dim out of range or
// named twice, which the CPU kernel reports.
std::optional<std::vector<bool>> reduced_dims(int64_t ndim, const std::optional<std::vector<int64_t>>& dim) {
  std::vector<bool> reduced(ndim, !dim || dim->empty());
  if (!dim) return reduced;
  const int64_t n = std::max<int64_t>(ndim, 1);
  for (int64_t d : *dim) {
    if (d < -n || d >= n) return std::nullopt;
    if (ndim == 0) continue;
    const int64_t w = d < 0 ? d + n : d;
    if (reduced[w]) return std::nullopt;
    reduced[w] = true;
  }
  return reduced;
}

Tensor sum_dim(Tensor self, std::optional<std::vector<int64_t>> dim, bool keepdim,
               std::optional<ScalarType> dtype) {
  const auto reduced = sum_handles(self, dtype) ? reduced_dims(self.dim(), dim) : std::nullopt;
  if (!reduced)
    return tv::fallback<Tensor>("aten::sum.dim_IntList", self, dim, keepdim, dtype);
  return reduce(self, *reduced, keepdim, sum_dtype(self, dtype));
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  TV_IMPL(m, aten, "mul.Tensor", &mul);
  TV_IMPL(m, aten, "relu", &relu);
  TV_IMPL(m, aten, "mm", &mm);
  TV_IMPL(m, aten, "sum", &sum);
  TV_IMPL(m, aten, "sum.dim_IntList", &sum_dim);
}

// aten::add.Tensor has a Scalar alpha, which a stable kernel cannot receive: the SDK serves it
// with this twin (torchvendor/kernel_api.h, TV_TWIN_OPS).
STABLE_TORCH_LIBRARY_IMPL(torchvendor, PrivateUse1, m) {
  TV_IMPL(m, torchvendor, "add.Tensor", &add);
}
