// C++ helpers for a vendor kernel library on PyTorch's stable ABI (torchvendor/kernel_api.h).
// Includes only torch's stable headers (torch/csrc/stable, torch/headeronly) and the SDK's C
// headers, so it compiles with TORCH_TARGET_VERSION set and the library survives releases.
//
//   TV_KERNELS_INIT()                  defines the exported torchvendor_kernels_init
//   TV_IMPL(m, aten, "mul.Tensor", &mul)  inside STABLE_TORCH_LIBRARY_IMPL(aten, PrivateUse1, m):
//                                      registers `mul` boxed (TORCH_BOX), counted as a native
//                                      call and checked in checked mode
//   tv::api()                          the SDK's table (runtime, streams, counters)
//   tv::current_stream(device)         the runtime stream behind torch's current stream
//   tv::empty(sizes, dtype, device)    a new contiguous device tensor from the caching allocator
//   tv::DeviceGuard guard(device)      torch's device guard, skipped when `device` is current
//   tv::fallback<Tensor>("aten::mm", a, b)  hands the call to the device's counted CPU fallback
//                                      (kernel API minor 2): for what a kernel does not handle
#pragma once

#include <torchvendor/kernel_api.h>

#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/tensor.h>

#include <array>
#include <optional>
#include <tuple>
#include <utility>

#include <stdexcept>
#include <string>

namespace tv {

inline const tv_kernel_api*& api_slot() {
  static const tv_kernel_api* api = nullptr;
  return api;
}

// The SDK's table; throws if the library was loaded without torchvendor.sdk.load_kernel_library.
inline const tv_kernel_api& api() {
  const tv_kernel_api* a = api_slot();
  if (a == nullptr)
    throw std::runtime_error(
        "this kernel library was loaded without torchvendor.sdk.load_kernel_library(path), "
        "so it has no runtime to launch on: load it through the SDK.");
  return *a;
}

// The runtime stream behind torch's current stream of `device`: the kernel API's
// current_stream (minor 1) in one call, else through torch's stable accelerator API (works from
// torch 2.9 on; Stream::nativeHandle() would need TORCH_FEATURE_VERSION >= 2.13).
inline tv_stream current_stream(int32_t device) {
  const tv_kernel_api& a = api();
  tv_stream s = nullptr;
  if (TV_KERNEL_API_HAS(&a, current_stream)) {
    if (a.current_stream(device, &s) != TV_SUCCESS)
      throw std::runtime_error(std::string("torchvendor: ") + a.last_error_message());
    return s;
  }
  const auto stream = torch::stable::accelerator::getCurrentStream(device);
  if (a.native_stream(device, stream.id(), &s) != TV_SUCCESS)
    throw std::runtime_error("torchvendor: no runtime stream for stream id " +
                             std::to_string(stream.id()) + " of device " +
                             std::to_string(device));
  return s;
}

// A new contiguous tensor on `device`, from the SDK's caching allocator: the kernel API's
// empty_strided (minor 1), else torch's C shim. Not torch::stable::empty, which looks the
// operator up by name and dispatches on every call (0.8 us of a 16-element op, measured in
// docs/bench_device.md).
inline torch::stable::Tensor empty(torch::headeronly::IntHeaderOnlyArrayRef sizes,
                                   torch::headeronly::ScalarType dtype, int32_t device) {
  constexpr size_t kMaxDims = 16;
  const int64_t ndim = static_cast<int64_t>(sizes.size());
  if (ndim > static_cast<int64_t>(kMaxDims))
    throw std::runtime_error("tv::empty: at most 16 dimensions");
  int64_t strides[kMaxDims];
  for (int64_t d = ndim - 1, step = 1; d >= 0; --d) {
    strides[d] = step;
    step *= sizes[d] > 1 ? sizes[d] : 1;
  }
  const tv_kernel_api& a = api();
  const int32_t code = static_cast<int32_t>(dtype);  // the shim's dtype codes are ScalarType's
  if (TV_KERNEL_API_HAS(&a, empty_strided)) {
    void* handle = nullptr;
    if (a.empty_strided(ndim, sizes.data(), strides, code, device, &handle) != TV_SUCCESS)
      throw std::runtime_error(std::string("torchvendor: ") + a.last_error_message());
    return torch::stable::Tensor(static_cast<AtenTensorHandle>(handle));
  }
  AtenTensorHandle handle = nullptr;
  TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(ndim, sizes.data(), strides, code,
                                                  aoti_torch_device_type_privateuse1(), device,
                                                  &handle));
  return torch::stable::Tensor(handle);
}

// torch::stable::accelerator::DeviceGuard, made only when `device` is not the current device
// (the common case needs no guard, and making one costs a heap allocation and two device
// switches through torch).
class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t device) {
    if (torch::stable::accelerator::getCurrentDeviceIndex() != device) guard_.emplace(device);
  }

 private:
  std::optional<torch::stable::accelerator::DeviceGuard> guard_;
};

// Throws with the runtime's message when a runtime call failed.
inline void check(tv_status status, const char* what) {
  if (status == TV_SUCCESS) return;
  const tv_runtime* rt = api().runtime;
  std::string detail = rt->last_error_message ? rt->last_error_message() : "";
  throw std::runtime_error(std::string(what) + " failed with status " + std::to_string(status) +
                           (detail.empty() ? "" : ": " + detail));
}

namespace detail {

// Set by tv::fallback on the calling thread: the kernel that is running handed its call back, so
// it is not counted as a native call.
inline bool& fell_back() {
  thread_local bool flag = false;
  return flag;
}

// Releases the references torch::stable::detail::from made for the arguments (to<T> takes them
// back: a tensor handle, an optional's box, a list).
template <typename... Args, size_t... I>
void release(StableIValue* stack, std::index_sequence<I...>) {
  ((void)torch::stable::detail::to<Args>(stack[I]), ...);
}

template <typename F, F* fn>
void run(const char* op, StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  const tv_kernel_api& a = api();
  const bool checked = a.checked_mode() != 0;
  if (checked && a.check_begin(op, stack, num_args) != TV_SUCCESS)
    throw std::runtime_error(a.last_error_message());
  const bool outer = std::exchange(fell_back(), false);  // a kernel may call another kernel
  torch::stable::detail::boxer<F, fn>::boxed_fn(stack, num_args, num_outputs);
  if (!std::exchange(fell_back(), outer)) a.kernel_called(op);
  if (checked && a.check_end(op, stack, num_outputs) != TV_SUCCESS)
    throw std::runtime_error(a.last_error_message());
}

}  // namespace detail

// Runs `op` ("aten::mm", or the twin "torchvendor::add.Tensor" a kernel serves) on `args` -- the
// operator's arguments in its schema's order, typed as the kernel received them -- through the
// device's counted CPU fallback, and returns its result: what a kernel returns for a case it does
// not handle (a dtype, a CPU operand, an error the CPU kernel should word), so the caller gets
// exactly what the device gives without the kernel. The call counts as a fallback, not as a
// native call. Needs an SDK with kernel API minor 2 (it throws, naming the case, on an older one).
//
//     if (a.scalar_type() == ScalarType::ComplexFloat) return tv::fallback<Tensor>("aten::mm", a, b);
template <typename R, typename... Args>
R fallback(const char* op, const Args&... args) {
  const tv_kernel_api& a = api();
  if (!TV_KERNEL_API_HAS(&a, fallback))
    throw std::runtime_error(std::string("this torchvendor's kernel API (minor ") +
                             std::to_string(a.abi_minor) + ") cannot hand " + op + " back to the "
                             "CPU fallback (minor 2 can): upgrade torchvendor.");
  std::array<StableIValue, sizeof...(Args) == 0 ? 1 : sizeof...(Args)> stack{
      torch::stable::detail::from(args)...};
  StableIValue out = 0;
  const tv_status status = a.fallback(op, stack.data(), sizeof...(Args), &out, 1);
  detail::release<Args...>(stack.data(), std::index_sequence_for<Args...>{});
  if (status != TV_SUCCESS) throw std::runtime_error(a.last_error_message());
  detail::fell_back() = true;
  return torch::stable::detail::to<R>(out);
}
}  // namespace tv

#define TV_KERNELS_INIT()                                                                   \
  extern "C" __attribute__((visibility("default"))) tv_status torchvendor_kernels_init(     \
      uint32_t requested_major, const tv_kernel_api* api) {                                 \
    if (requested_major != TV_KERNEL_API_MAJOR || api == nullptr) return TV_ERROR_NOT_SUPPORTED; \
    ::tv::api_slot() = api;                                                                 \
    return TV_SUCCESS;                                                                      \
  }

#define TV_IMPL(m, ns, op, fn)                                                              \
  (m).impl(op, [](StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {            \
    ::tv::detail::run<std::remove_pointer_t<std::remove_reference_t<decltype(fn)>>, (fn)>(   \
        #ns "::" op, stack, num_args, num_outputs);                                         \
  })
