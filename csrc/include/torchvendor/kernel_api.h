/*
 * torchvendor kernel API: what a vendor's eager kernel library gets from the SDK beyond
 * PyTorch's LibTorch stable ABI. Plain C99, no torch; versioned like runtime.h.
 *
 *     vendor kernel library (libacme_kernels.so)
 *       - ATen kernels for the device: STABLE_TORCH_LIBRARY_IMPL(aten, PrivateUse1, m), built
 *         with TORCH_TARGET_VERSION set to the oldest torch it must load on, so it includes no
 *         unstable torch header and loads unchanged on later releases;
 *       - launches its device code through the runtime table (runtime.h), reached here;
 *       - exports `torchvendor_kernels_init` (below) and the TV_KERNEL_LIBRARY marker.
 *     torchvendor.sdk.load_kernel_library(path) checks the marker, loads the library, checks what
 *     it registered, then calls torchvendor_kernels_init with this table.
 *
 * The gaps of the stable ABI (torch 2.11 to 2.14) this table fills:
 *   - The runtime's stream behind torch's current stream: torch::stable::accelerator::Stream
 *     gives only id() before 2.13 (nativeHandle() needs TORCH_FEATURE_VERSION >= 2.13):
 *     native_stream(device, id) maps it.
 *   - Operators with a Scalar argument (aten::add.Tensor's alpha, aten::sub.Tensor's): a
 *     StableIValue cannot hold a c10::Scalar, so every call of a stable kernel registered for
 *     them fails ("Not yet supported conversion from IValue to StableIValue for schema type:
 *     Scalar"). The SDK defines a twin with `float` in place of `Scalar` in the `torchvendor`
 *     namespace (TV_TWIN_OPS below); a library registers its kernel for the twin
 *     (STABLE_TORCH_LIBRARY_IMPL(torchvendor, PrivateUse1, m)) and the SDK routes the aten
 *     operator to it (a complex alpha goes through the counted CPU fallback).
 *   - Counting: kernel_called(op) counts a native call for torch.<name>.native_counts() and
 *     diagnose(), beside the CPU fallback's counts.
 *   - Checked mode (the conformance suite turns it on): checked_mode() tells kernels to compare
 *     every output's device and shape with what the operator's meta kernel says.
 *   - Handing a call back: a kernel meets a case it does not handle (a complex dtype, a CPU
 *     `self`, an argument its device code has no path for). Calling the operator again through
 *     the dispatcher (torch_call_dispatcher) would reach the same kernel; the stable ABI has no
 *     redispatch below it. Minor 2's fallback runs the call through the device's counted CPU
 *     fallback, exactly as if the library had no kernel for the operator.
 *   - Minor 1, the per-call cost of a small op: torch::stable::empty is a dispatcher call by
 *     operator name with heap-allocated optional arguments, and getCurrentStream heap-allocates
 *     a stream handle; empty_strided and current_stream do the same work directly (measured in
 *     docs/bench_device.md, "Floors").
 *
 * Rules for changing this header: as runtime.h (a minor version only appends entries; a major
 * may change anything; the SDK reads only entries inside the library's view of struct_size).
 */
#ifndef TORCHVENDOR_KERNEL_API_H_
#define TORCHVENDOR_KERNEL_API_H_

#include <stddef.h>
#include <stdint.h>

#include "torchvendor/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TV_KERNEL_API_MAJOR 1
#define TV_KERNEL_API_MINOR 2

/* The function a kernel library exports; called once, after the library is loaded and its
 * registrations are checked, before any of its kernels can run. Return TV_SUCCESS, or an error
 * (the SDK then unloads the library and reports it). `requested_major` is the kernel API major
 * the SDK speaks; `api` is static, valid for the life of the process. */
#define TV_KERNELS_INIT_SYMBOL "torchvendor_kernels_init"
typedef tv_status (*tv_kernels_init_fn)(uint32_t requested_major, const struct tv_kernel_api* api);

/* Scalar-free twins the SDK defines (schema of each twin; the aten operator it serves). */
#define TV_TWIN_OPS                                                                        \
  "torchvendor::add.Tensor(Tensor self, Tensor other, *, float alpha=1) -> Tensor",          \
  "torchvendor::sub.Tensor(Tensor self, Tensor other, *, float alpha=1) -> Tensor"

typedef struct tv_kernel_api {
  uint32_t abi_major;   /* TV_KERNEL_API_MAJOR of the SDK */
  uint32_t abi_minor;
  uint64_t struct_size; /* sizeof(tv_kernel_api) of the SDK */
  /* The device's runtime table: module_load_file, module_get_function, launch, ... */
  const tv_runtime* runtime;
  /* The runtime stream behind the torch stream (device index, stream id) of the device, e.g.
   * from torch::stable::accelerator::getCurrentStream(device).id(). An unknown id is
   * TV_ERROR_INVALID_HANDLE. */
  tv_status (*native_stream)(int32_t device, int64_t stream_id, tv_stream* stream);
  /* Count one native call of `op` ("mul.Tensor"); thread-safe, never fails. */
  void (*kernel_called)(const char* op);
  /* Nonzero while checked mode is on: kernels then call check_begin before and check_end
   * after computing (torchvendor/stable_kernels.h does it for every kernel it wraps). */
  int32_t (*checked_mode)(void);
  /* Checked mode, before the kernel: `args` is the kernel's StableIValue stack (num_args
   * entries, not consumed). The SDK runs the operator `op` ("aten::mul.Tensor") on meta copies
   * of the arguments to learn the outputs' shapes and dtypes. */
  tv_status (*check_begin)(const char* op, const uint64_t* args, uint64_t num_args);
  /* Checked mode, after the kernel: `outputs` is the stack holding its num_outputs results.
   * TV_ERROR_INVALID_VALUE if an output has another shape, dtype or device than expected;
   * last_error_message says which. */
  tv_status (*check_end)(const char* op, const uint64_t* outputs, uint64_t num_outputs);
  /* The message of the calling thread's last failed check or call of this table, or "".
   * Never NULL. */
  const char* (*last_error_message)(void);

  /* ---- minor 1 (read only when struct_size covers the entry) ---- */
  /* A new, uninitialized device tensor from the caching allocator, as torch's C shim
   * aoti_torch_empty_strided(ndim, sizes, strides, dtype, <PrivateUse1>, device, ret) makes it,
   * without a trip through the dispatcher. `dtype` is the shim's dtype code
   * (aoti_torch_dtype_float32(), ...); `*ret_tensor` receives a new AtenTensorHandle that the
   * caller owns (torch::stable::Tensor(handle) takes it). TV_ERROR_INVALID_DEVICE for a device
   * out of range, TV_ERROR_OUT_OF_MEMORY when the allocator cannot serve it,
   * TV_ERROR_INVALID_VALUE for negative sizes or an unknown dtype; last_error_message says
   * which. */
  tv_status (*empty_strided)(int64_t ndim, const int64_t* sizes, const int64_t* strides,
                             int32_t dtype, int32_t device, void** ret_tensor);
  /* The runtime stream behind torch's current stream of `device` on the calling thread (what
   * native_stream(device, getCurrentStream(device).id()) gives, without the stable API's
   * heap-allocated stream handle). TV_ERROR_INVALID_DEVICE for a device out of range. */
  tv_status (*current_stream)(int32_t device, tv_stream* stream);

  /* ---- minor 2 ---- */
  /* Run the operator `op` ("aten::mm"; a twin, "torchvendor::add.Tensor", runs as the aten
   * operator it serves) on `args` through the device's counted CPU fallback: the arguments go to
   * the host, the CPU kernel computes, the results come back, and the call counts in
   * fallback_counts() (not as a native call), as if the library had no kernel for `op`.
   * `args` holds the num_args arguments in the schema's order, encoded as torch encodes a stable
   * kernel's arguments (torch::stable::detail::from of the kernel's own parameters); they are
   * borrowed, not consumed. On success `outputs` receives the operator's num_outputs results
   * (a tensor as a new AtenTensorHandle the caller owns, a number as its bits).
   * Argument kinds it reads: Tensor, int, SymInt, float, bool, ScalarType, int[], and optionals
   * of these; another kind, or num_args/num_outputs unlike the schema's, is
   * TV_ERROR_NOT_SUPPORTED. An error of the CPU kernel (the same error the operator raises on
   * the CPU) is TV_ERROR_INVALID_VALUE; last_error_message gives its message.
   * torchvendor/stable_kernels.h wraps it: `return tv::fallback<Tensor>("aten::mm", a, b);`. */
  tv_status (*fallback)(const char* op, const uint64_t* args, uint64_t num_args,
                        uint64_t* outputs, uint64_t num_outputs);
} tv_kernel_api;

/* Whether `api` (the SDK's table) has `entry`: a library built against a newer minor than the
 * SDK that loads it must not read past the SDK's struct_size. */
#define TV_KERNEL_API_HAS(api, entry)                                                      \
  ((api)->struct_size >= offsetof(tv_kernel_api, entry) + sizeof((api)->entry) &&          \
   (api)->entry != NULL)

/* Put once in a kernel library: the marker the SDK reads from the file before loading it
 * (a library built for a newer torch than the running one is refused before it registers
 * anything). `torch_target` is "major.minor", the TORCH_TARGET_VERSION it was built with. */
#define TV_KERNEL_LIBRARY(torch_target)                                                     \
  __attribute__((used)) static const char torchvendor_kernel_library[] =                   \
      "torchvendor-kernel-library;torch=" torch_target ";api=1;"

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCHVENDOR_KERNEL_API_H_ */
