/* The argument structs of the template's device kernels (device_kernels.c), shared by the host
 * side (kernels.cpp). Plain C, laid out as C structs; *_POINTERS are the byte offsets of the
 * device pointers in each struct, for tv_launch_config.pointer_offsets. */
#ifndef ACME_KERNELS_ABI_H_
#define ACME_KERNELS_ABI_H_

#include <stddef.h>
#include <stdint.h>

#define TV_TPL_MAX_DIMS 8

/* dtype codes: order matters (codes >= TV_TPL_F32 are floating point) */
enum { TV_TPL_BOOL, TV_TPL_U8, TV_TPL_I8, TV_TPL_I16, TV_TPL_I32, TV_TPL_I64,
       TV_TPL_F32, TV_TPL_F64, TV_TPL_F16, TV_TPL_BF16 };
enum { TV_TPL_ADD, TV_TPL_MUL, TV_TPL_RELU };

typedef struct tv_tpl_elementwise_args {
  const void* a;        /* device */
  const void* b;        /* device, or NULL: use scalar_b (a CPU scalar operand, or relu) */
  void* out;            /* device, contiguous */
  int32_t op, ndim, dtype_a, dtype_b, dtype_out, contiguous; /* contiguous: a, b dense as out */
  int64_t numel;
  double alpha, scalar_b;
  int64_t sizes[TV_TPL_MAX_DIMS];     /* output sizes */
  int64_t stride_a[TV_TPL_MAX_DIMS];  /* element strides, 0 where broadcast */
  int64_t stride_b[TV_TPL_MAX_DIMS];
} tv_tpl_elementwise_args;
#define TV_TPL_ELEMENTWISE_POINTERS {offsetof(tv_tpl_elementwise_args, a), \
    offsetof(tv_tpl_elementwise_args, b), offsetof(tv_tpl_elementwise_args, out)}

typedef struct tv_tpl_mm_args {
  const void* a;
  const void* b;
  void* out;            /* contiguous m x n */
  int32_t dtype, pad;
  int64_t m, n, k;
  int64_t stride_a[2], stride_b[2];
} tv_tpl_mm_args;
#define TV_TPL_MM_POINTERS {offsetof(tv_tpl_mm_args, a), offsetof(tv_tpl_mm_args, b), \
    offsetof(tv_tpl_mm_args, out)}

typedef struct tv_tpl_sum_args {
  const void* in;
  void* out;            /* contiguous over out_sizes */
  int32_t dtype_in, dtype_out, out_ndim, red_ndim;
  int64_t out_sizes[TV_TPL_MAX_DIMS], out_strides[TV_TPL_MAX_DIMS]; /* input strides of kept dims */
  int64_t red_sizes[TV_TPL_MAX_DIMS], red_strides[TV_TPL_MAX_DIMS]; /* of reduced dims */
} tv_tpl_sum_args;
#define TV_TPL_SUM_POINTERS {offsetof(tv_tpl_sum_args, in), offsetof(tv_tpl_sum_args, out)}

#endif /* ACME_KERNELS_ABI_H_ */
