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
#pragma once

#include <torchvendor/kernel_api.h>

#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>

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

// The runtime stream behind torch's current stream of `device` (works from torch 2.9 on;
// Stream::nativeHandle() would need TORCH_FEATURE_VERSION >= 2.13).
inline tv_stream current_stream(int32_t device) {
  const auto stream = torch::stable::accelerator::getCurrentStream(device);
  tv_stream s = nullptr;
  if (api().native_stream(device, stream.id(), &s) != TV_SUCCESS)
    throw std::runtime_error("torchvendor: no runtime stream for stream id " +
                             std::to_string(stream.id()) + " of device " +
                             std::to_string(device));
  return s;
}

// Throws with the runtime's message when a runtime call failed.
inline void check(tv_status status, const char* what) {
  if (status == TV_SUCCESS) return;
  const tv_runtime* rt = api().runtime;
  std::string detail = rt->last_error_message ? rt->last_error_message() : "";
  throw std::runtime_error(std::string(what) + " failed with status " + std::to_string(status) +
                           (detail.empty() ? "" : ": " + detail));
}

namespace detail {

template <typename F, F* fn>
void run(const char* op, StableIValue* stack, uint64_t num_args, uint64_t num_outputs) {
  const tv_kernel_api& a = api();
  a.kernel_called(op);
  const bool checked = a.checked_mode() != 0;
  if (checked && a.check_begin(op, stack, num_args) != TV_SUCCESS)
    throw std::runtime_error(a.last_error_message());
  torch::stable::detail::boxer<F, fn>::boxed_fn(stack, num_args, num_outputs);
  if (checked && a.check_end(op, stack, num_outputs) != TV_SUCCESS)
    throw std::runtime_error(a.last_error_message());
}

}  // namespace detail
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
