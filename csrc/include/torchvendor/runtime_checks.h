/*
 * torchvendor/runtime_checks.h: the argument checks that the entries of a runtime table share,
 * and the per-thread error message behind `last_error_message`. Header-only C (C11, or C++), no
 * torch, only C headers: both reference runtimes use it (csrc/reference_runtime/sim_runtime.c and
 * reference_backends/cuda/runtime/tv_cuda_runtime.c), and a vendor's runtime may too.
 *
 * Include it in the one source file that defines the table: the message buffer is a static of
 * that file. Each check returns TV_SUCCESS or the status runtime.h gives for the fault, with a
 * message naming the entry (`where`; the macros pass __func__) and the value at fault:
 *
 *     static tv_status acme_malloc(int32_t dev, size_t size, void** ptr) {
 *       TV_CHECK_DEVICE(dev, acme.ndev);
 *       TV_CHECK_ARGS(ptr);
 *       ...
 *     }
 *     static tv_status acme_launch(tv_function f, const tv_launch_config* cfg, const void* args,
 *                                  size_t args_size, tv_stream stream) {
 *       TV_TRY(tv_check_launch(__func__, f, cfg, args, args_size));
 *       ...
 *     }
 *     ... .get_error_string = tv_status_name, .last_error_message = tv_last_error_message, ...
 *
 * docs/runtime.md ("Shared argument checks") lists them.
 */
#ifndef TORCHVENDOR_RUNTIME_CHECKS_H_
#define TORCHVENDOR_RUNTIME_CHECKS_H_

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include "torchvendor/runtime.h"

#ifdef __cplusplus
#define TV_THREAD_LOCAL_ thread_local
#else
#define TV_THREAD_LOCAL_ _Thread_local
#endif
#if defined(__GNUC__)
#define TV_PRINTF_(f, a) __attribute__((format(printf, f, a)))
#else
#define TV_PRINTF_(f, a)
#endif

static TV_THREAD_LOCAL_ char tv_error_message_[512];

/* Record the calling thread's message for last_error_message; returns `status`. */
static inline tv_status tv_fail(tv_status status, const char* fmt, ...) TV_PRINTF_(2, 3);
static inline tv_status tv_fail(tv_status status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tv_error_message_, sizeof tv_error_message_, fmt, ap);
  va_end(ap);
  return status;
}

/* The table's last_error_message: the calling thread's last message. */
static inline const char* tv_last_error_message(void) { return tv_error_message_; }

/* The table's get_error_string: the name of a tv_status. */
static inline const char* tv_status_name(tv_status status) {
  static const char* const names[] = {
      "TV_SUCCESS", "TV_ERROR_INVALID_VALUE", "TV_ERROR_INVALID_DEVICE", "TV_ERROR_OUT_OF_MEMORY",
      "TV_ERROR_NOT_READY", "TV_ERROR_NOT_FOUND", "TV_ERROR_INVALID_IMAGE",
      "TV_ERROR_LAUNCH_FAILED", "TV_ERROR_NOT_SUPPORTED", "TV_ERROR_INVALID_HANDLE"};
  if (status >= 0 && status < (tv_status)(sizeof names / sizeof *names)) return names[status];
  return status == TV_ERROR_UNKNOWN ? "TV_ERROR_UNKNOWN" : "unrecognized tv_status";
}

/* Return from the calling entry with TV_ERROR_INVALID_DEVICE unless 0 <= d < count. */
#define TV_CHECK_DEVICE(d, count)                                                                \
  if ((d) < 0 || (d) >= (count))                                                                 \
  return tv_fail(TV_ERROR_INVALID_DEVICE, "%s: device %d out of range [0, %d)", __func__, (int)(d), \
                 (int)(count))
/* Return from the calling entry with TV_ERROR_INVALID_VALUE unless `ok`; the message quotes it. */
#define TV_CHECK_ARGS(ok) \
  if (!(ok)) return tv_fail(TV_ERROR_INVALID_VALUE, "%s: invalid argument (%s)", __func__, #ok)
/* Return from the calling entry with the status of `expr` unless it is TV_SUCCESS. */
#define TV_TRY(expr) do { tv_status tv_st_ = (expr); if (tv_st_) return tv_st_; } while (0)

/* get_device_properties: the caller's struct must hold at least this header's fields. */
static inline tv_status tv_check_properties(const char* where, const tv_device_properties* props) {
  if (props && props->struct_size >= sizeof *props) return TV_SUCCESS;
  return tv_fail(TV_ERROR_INVALID_VALUE, "%s: invalid argument (props && props->struct_size >= "
                 "sizeof *props)", where);
}

/* memcpy / memcpy_async: one of the four tv_memcpy_kind values. */
static inline tv_status tv_check_memcpy_kind(int kind) {
  if (kind >= TV_MEMCPY_HOST_TO_DEVICE && kind <= TV_MEMCPY_HOST_TO_HOST) return TV_SUCCESS;
  return tv_fail(TV_ERROR_INVALID_VALUE, "memcpy: unknown kind %d", kind);
}

/* event_create: an out-pointer, and no flag but TV_EVENT_ENABLE_TIMING. */
static inline tv_status tv_check_event_create(const char* where, const tv_event* event,
                                              uint32_t flags) {
  if (event && !(flags & ~(uint32_t)TV_EVENT_ENABLE_TIMING)) return TV_SUCCESS;
  return tv_fail(TV_ERROR_INVALID_VALUE, "%s: invalid argument (%s)", where,
                 event ? "flags other than TV_EVENT_ENABLE_TIMING" : "event is NULL");
}

/* event_elapsed_time, before asking the device: both events timed and both recorded. */
static inline tv_status tv_check_elapsed(const char* where, uint32_t flags_a, uint32_t flags_b,
                                         int recorded_a, int recorded_b) {
  if (!(flags_a & flags_b & TV_EVENT_ENABLE_TIMING))
    return tv_fail(TV_ERROR_INVALID_VALUE, "%s: both events need TV_EVENT_ENABLE_TIMING", where);
  if (!recorded_a || !recorded_b)
    return tv_fail(TV_ERROR_INVALID_HANDLE, "%s: an event was never recorded", where);
  return TV_SUCCESS;
}

/* launch: a function, a config, an argument buffer unless it is empty, pointer offsets if any
 * are counted, and at least one block of one thread in each dimension. */
static inline tv_status tv_check_launch(const char* where, const void* function,
                                        const tv_launch_config* cfg, const void* args,
                                        size_t args_size) {
  if (!function || !cfg || (!args && args_size))
    return tv_fail(TV_ERROR_INVALID_VALUE, "%s: invalid argument (f && cfg && (args || "
                   "!args_size))", where);
  if (!cfg->pointer_offsets && cfg->num_pointer_offsets)
    return tv_fail(TV_ERROR_INVALID_VALUE, "%s: invalid argument (cfg->pointer_offsets || "
                   "!cfg->num_pointer_offsets)", where);
  for (int i = 0; i < 3; i++)
    if (cfg->grid[i] < 1 || cfg->block[i] < 1)
      return tv_fail(TV_ERROR_INVALID_VALUE, "%s: invalid argument (grid %u x %u x %u, block "
                     "%u x %u x %u: each at least 1)", where, cfg->grid[0], cfg->grid[1],
                     cfg->grid[2], cfg->block[0], cfg->block[1], cfg->block[2]);
  return TV_SUCCESS;
}

/* Two handles that must belong to one device (an event and its stream, a communicator and its
 * stream): "<where>: <a> of device <i>, <b> of device <j>". */
static inline tv_status tv_check_same_device(const char* where, const char* a, int32_t dev_a,
                                             const char* b, int32_t dev_b) {
  if (dev_a == dev_b) return TV_SUCCESS;
  return tv_fail(TV_ERROR_INVALID_VALUE, "%s: %s of device %d, %s of device %d", where, a,
                 (int)dev_a, b, (int)dev_b);
}

/* launch: the function's module must be loaded on the stream's device. */
static inline tv_status tv_check_launch_device(const char* name, int32_t module_dev,
                                               int32_t stream_dev) {
  if (module_dev == stream_dev) return TV_SUCCESS;
  return tv_fail(TV_ERROR_INVALID_VALUE, "launch: '%s' is from a device %d module, the stream on %d",
                 name, (int)module_dev, (int)stream_dev);
}

/* Collectives: a known tv_dtype and, for a reduction (op >= 0), a known tv_reduce_op, with
 * TV_REDUCE_AVG on floating-point types only; else TV_ERROR_NOT_SUPPORTED (runtime.h). */
static inline tv_status tv_check_collective_types(const char* where, tv_dtype dtype, int op) {
  if ((unsigned)dtype > TV_BOOL)
    return tv_fail(TV_ERROR_NOT_SUPPORTED, "%s: unknown tv_dtype %d", where, (int)dtype);
  if (op >= 0 && ((unsigned)op > TV_REDUCE_AVG || (op == TV_REDUCE_AVG && dtype > TV_BFLOAT16)))
    return tv_fail(TV_ERROR_NOT_SUPPORTED, "%s: tv_reduce_op %d is not supported for tv_dtype %d",
                   where, op, (int)dtype);
  return TV_SUCCESS;
}

/* Collectives: a root or peer rank inside [0, nranks). */
static inline tv_status tv_check_rank(const char* where, int32_t rank, int32_t nranks) {
  if (rank >= 0 && rank < nranks) return TV_SUCCESS;
  return tv_fail(TV_ERROR_INVALID_VALUE, "%s: rank %d is outside [0, %d)", where, (int)rank,
                 (int)nranks);
}

/* torchvendor_get_runtime: the major the caller speaks must be this header's. */
static inline tv_status tv_check_abi_major(const char* runtime_name, uint32_t requested_major) {
  if (requested_major == TV_RUNTIME_ABI_MAJOR) return TV_SUCCESS;
  return tv_fail(TV_ERROR_NOT_SUPPORTED, "%s implements runtime ABI major %d, not %u", runtime_name,
                 TV_RUNTIME_ABI_MAJOR, requested_major);
}

/* torchvendor_get_runtime, when the library cannot initialise: the caller gets no table, hence
 * no last_error_message, so the reason goes to stderr as well. */
static inline tv_status tv_init_failed(const char* runtime_name, tv_status status, const char* msg) {
  fprintf(stderr, "%s: %s\n", runtime_name, msg);
  return tv_fail(status, "%s", msg);
}

#endif /* TORCHVENDOR_RUNTIME_CHECKS_H_ */
