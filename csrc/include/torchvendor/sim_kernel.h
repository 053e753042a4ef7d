/*
 * Kernel calling convention of the reference simulated accelerator (libtorchvendor_sim).
 *
 * A simulator module is a shared library; a kernel is an exported C function
 *
 *     int32_t kernel(const tv_sim_launch* launch, void* args);
 *
 * that the runtime calls ONCE per launch: on the enqueuing thread when the stream is idle, else
 * on the stream's worker thread, in stream order either way. The kernel covers the whole index space
 * itself (grid and block are passed for kernels that want to partition work by them).
 * `args` is the runtime's private, writable copy of the launch's argument buffer (16-byte
 * aligned) in which every device pointer listed in tv_launch_config.pointer_offsets has already
 * been replaced by its host-accessible alias: kernels dereference them directly, and must not
 * keep them after returning. Return 0 on success; any other value marks the stream as failed
 * (TV_ERROR_LAUNCH_FAILED from the next stream_query / stream_synchronize / device_synchronize,
 * sticky for that stream).
 */
#ifndef TORCHVENDOR_SIM_KERNEL_H_
#define TORCHVENDOR_SIM_KERNEL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tv_sim_launch {
  uint32_t grid[3];   /* as given in tv_launch_config */
  uint32_t block[3];
  int32_t device;     /* the device of the stream the kernel runs on */
  size_t args_size;   /* bytes in `args`: kernels check it before reading their arguments */
} tv_sim_launch;

typedef int32_t (*tv_sim_kernel)(const tv_sim_launch* launch, void* args);

/* Define an exported kernel: TV_SIM_KERNEL(my_kernel) { ... return 0; } */
#define TV_SIM_KERNEL(name) \
  __attribute__((visibility("default"))) int32_t name(const tv_sim_launch* launch, void* args)

/* A kernel that waits on the host (a flag the host sets later, a timer): it always runs on the
 * stream's worker, so launch returns at once. Marked by the exported symbol <name>__tv_sim_waits. */
#define TV_SIM_KERNEL_WAITS(name)                                                  \
  __attribute__((visibility("default"))) const char name##__tv_sim_waits = 1; \
  TV_SIM_KERNEL(name)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCHVENDOR_SIM_KERNEL_H_ */
