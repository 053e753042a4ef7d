/*
 * Sample kernels for the simulated accelerator (libtorchvendor_sim_kernels.so), following the
 * calling convention of torchvendor/sim_kernel.h: one call per launch on the stream's worker,
 * `args` is the translated copy of the argument buffer, 0 means success.
 *
 * Argument buffers: packed like the C structs below (natural alignment, 64-bit pointers).
 *
 *   kernel        layout (byte offset: field)                                   pointer_offsets
 *   tv_add_f32    0: int64 n, 8: const float* a, 16: const float* b,
 *                 24: float* out; size 32.  out[i] = a[i] + b[i], i < n            {8, 16, 24}
 *   tv_fill_f32   0: int64 n, 8: float* out, 16: float value; size 24.
 *                 out[i] = value, i < n                                             {8}
 *   tv_sleep_ms   0: int64 ms; size 8. Sleeps, keeping its stream busy.            {}
 *   tv_wait_flag  0: const int32* flag, in HOST memory (not translated); size 8.
 *                 Waits until *flag != 0: a gate that host code opens (tests).     {}
 *   tv_fail       0: int32 status; size 4. Returns status: a failing kernel.       {}
 *
 * Every kernel returns -1 if args_size is smaller than its layout or a count is negative.
 */
#define _POSIX_C_SOURCE 200809L
#include <time.h>

#include "torchvendor/sim_kernel.h"

typedef struct { int64_t n; const float* a; const float* b; float* out; } add_args;
typedef struct { int64_t n; float* out; float value; } fill_args;
typedef struct { int64_t ms; } sleep_args;
typedef struct { const int32_t* flag; } flag_args;
typedef struct { int32_t status; } fail_args;

#define ARGS(type, name)                                  \
  if (launch->args_size < sizeof(type)) return -1;        \
  const type* name = (const type*)args

TV_SIM_KERNEL(tv_add_f32) {
  ARGS(add_args, p);
  if (p->n < 0) return -1;
  for (int64_t i = 0; i < p->n; i++) p->out[i] = p->a[i] + p->b[i];
  return 0;
}

TV_SIM_KERNEL(tv_fill_f32) {
  ARGS(fill_args, p);
  if (p->n < 0) return -1;
  for (int64_t i = 0; i < p->n; i++) p->out[i] = p->value;
  return 0;
}

TV_SIM_KERNEL_WAITS(tv_sleep_ms) {
  ARGS(sleep_args, p);
  if (p->ms < 0) return -1;
  struct timespec ts = {p->ms / 1000, (long)(p->ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts)) {} /* resume after signals */
  return 0;
}

TV_SIM_KERNEL_WAITS(tv_wait_flag) {
  ARGS(flag_args, p);
  struct timespec ts = {0, 50000L};
  while (!__atomic_load_n(p->flag, __ATOMIC_ACQUIRE)) nanosleep(&ts, NULL);
  return 0;
}

TV_SIM_KERNEL(tv_fail) {
  ARGS(fail_args, p);
  return p->status;
}
