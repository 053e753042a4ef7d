/* Device code of the floor kernels: out[i] = a[i] + b[i] over n contiguous floats. */
#include <stdint.h>

#include "torchvendor/sim_kernel.h"

typedef struct { const float* a; const float* b; float* out; int64_t n; } tv_floor_args;

TV_SIM_KERNEL(tv_floor_add) {
  if (launch->args_size < sizeof(tv_floor_args)) return 1;
  const tv_floor_args* k = (const tv_floor_args*)args;
  for (int64_t i = 0; i < k->n; ++i) k->out[i] = k->a[i] + k->b[i];
  return 0;
}
