/*
 * Device code of the kernel template, for the reference simulator (torchvendor/sim_kernel.h):
 * a module loaded with module_load_file and launched with launch. On real hardware this file is
 * the vendor's device code (a cubin, an ELF for the accelerator...) and kernels.cpp is unchanged
 * but for the argument structs.
 *
 * Every kernel takes one argument struct, declared in kernels_abi.h (shared with kernels.cpp);
 * the device pointers in it are listed in its TV_TPL_*_POINTERS so launch can translate them.
 */
#include <math.h>
#include <string.h>

#include "kernels_abi.h"
#include "torchvendor/sim_kernel.h"

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0) {
    if (man == 0) bits = sign;
    else { /* subnormal */
      exp = 127 - 15 + 1;
      while (!(man & 0x400)) man <<= 1, exp--;
      bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
  } else if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
  else bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t float_to_half(float f) { /* round to nearest even */
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return (uint16_t)sign;
    man |= 0x800000;
    uint32_t shift = (uint32_t)(14 - exp), half = 1u << (shift - 1);
    uint32_t r = man >> shift, rem = man & ((1u << shift) - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = (uint32_t)(exp << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

static float bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

static int is_float(int32_t t) { return t >= TV_TPL_F32; }

static double load_f(const char* p, int32_t t) {
  switch (t) {
    case TV_TPL_BOOL: return *(const uint8_t*)p != 0;
    case TV_TPL_U8: return *(const uint8_t*)p;
    case TV_TPL_I8: return *(const int8_t*)p;
    case TV_TPL_I16: return *(const int16_t*)p;
    case TV_TPL_I32: return *(const int32_t*)p;
    case TV_TPL_I64: return (double)*(const int64_t*)p;
    case TV_TPL_F32: return *(const float*)p;
    case TV_TPL_F64: return *(const double*)p;
    case TV_TPL_F16: return half_to_float(*(const uint16_t*)p);
    default: return bf16_to_float(*(const uint16_t*)p);
  }
}

static int64_t load_i(const char* p, int32_t t) {
  switch (t) {
    case TV_TPL_BOOL: return *(const uint8_t*)p != 0;
    case TV_TPL_U8: return *(const uint8_t*)p;
    case TV_TPL_I8: return *(const int8_t*)p;
    case TV_TPL_I16: return *(const int16_t*)p;
    case TV_TPL_I32: return *(const int32_t*)p;
    case TV_TPL_I64: return *(const int64_t*)p;
    default: return (int64_t)load_f(p, t);
  }
}

static void store_f(char* p, int32_t t, double v) {
  switch (t) {
    case TV_TPL_F32: *(float*)p = (float)v; break;
    case TV_TPL_F64: *(double*)p = v; break;
    case TV_TPL_F16: *(uint16_t*)p = float_to_half((float)v); break;
    default: *(uint16_t*)p = float_to_bf16((float)v); break;
  }
}

static void store_i(char* p, int32_t t, int64_t v) {
  switch (t) {
    case TV_TPL_BOOL: *(uint8_t*)p = v != 0; break;
    case TV_TPL_U8: *(uint8_t*)p = (uint8_t)v; break;
    case TV_TPL_I8: *(int8_t*)p = (int8_t)v; break;
    case TV_TPL_I16: *(int16_t*)p = (int16_t)v; break;
    case TV_TPL_I32: *(int32_t*)p = (int32_t)v; break;
    default: *(int64_t*)p = v; break;
  }
}

static const int item_size[] = {1, 1, 1, 2, 4, 8, 4, 8, 2, 2};

/* Offset (bytes) of element `i` (row-major over sizes) in a tensor with these strides. */
static int64_t offset_of(int64_t i, int32_t ndim, const int64_t* sizes, const int64_t* strides) {
  int64_t off = 0;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

/* float32 operands and result, all dense alike: the common case without a per-element dtype
 * switch. The same arithmetic as the general loop (in double, rounded once). */
static int elementwise_f32(const tv_tpl_elementwise_args* k) {
  if (!k->contiguous || k->dtype_a != TV_TPL_F32 || k->dtype_out != TV_TPL_F32 ||
      (k->b != NULL && k->dtype_b != TV_TPL_F32))
    return 0;
  const float* a = (const float*)k->a;
  const float* b = (const float*)k->b;
  float* out = (float*)k->out;
  for (int64_t i = 0; i < k->numel; ++i) {
    const double x = a[i], y = b ? (double)b[i] : k->scalar_b;
    switch (k->op) {
      case TV_TPL_ADD: out[i] = (float)(x + k->alpha * y); break;
      case TV_TPL_MUL: out[i] = (float)(x * y); break;
      default: out[i] = (float)(x > 0 ? x : (isnan(x) ? x : 0.0)); break;
    }
  }
  return 1;
}

TV_SIM_KERNEL(tv_tpl_elementwise) {
  if (launch->args_size < sizeof(tv_tpl_elementwise_args)) return 1;
  const tv_tpl_elementwise_args* k = (const tv_tpl_elementwise_args*)args;
  if (elementwise_f32(k)) return 0;
  const int sa = item_size[k->dtype_a], sb = item_size[k->dtype_b], so = item_size[k->dtype_out];
  const int floating = is_float(k->dtype_out);
  const int contiguous = k->contiguous;
  for (int64_t i = 0; i < k->numel; ++i) {
    const char* pa = (const char*)k->a + (contiguous ? i : offset_of(i, k->ndim, k->sizes, k->stride_a)) * sa;
    char* po = (char*)k->out + i * so;
    if (floating) {
      double x = load_f(pa, k->dtype_a), r;
      double y = k->b == NULL ? k->scalar_b : load_f((const char*)k->b + (contiguous ? i : offset_of(i, k->ndim, k->sizes, k->stride_b)) * sb, k->dtype_b);
      switch (k->op) {
        case TV_TPL_ADD: r = x + k->alpha * y; break;
        case TV_TPL_MUL: r = x * y; break;
        default: r = x > 0 ? x : (isnan(x) ? x : 0.0); break; /* relu keeps NaN */
      }
      store_f(po, k->dtype_out, r);
    } else {
      int64_t x = load_i(pa, k->dtype_a), r;
      int64_t y = k->b == NULL ? (int64_t)k->scalar_b : load_i((const char*)k->b + (contiguous ? i : offset_of(i, k->ndim, k->sizes, k->stride_b)) * sb, k->dtype_b);
      switch (k->op) {
        case TV_TPL_ADD: r = x + (int64_t)k->alpha * y; break;
        case TV_TPL_MUL: r = x * y; break;
        default: r = x > 0 ? x : 0; break;
      }
      if (k->dtype_out == TV_TPL_BOOL && k->op == TV_TPL_ADD) r = (x != 0) || (y != 0);
      if (k->dtype_out == TV_TPL_BOOL && k->op == TV_TPL_MUL) r = (x != 0) && (y != 0);
      store_i(po, k->dtype_out, r);
    }
  }
  return 0;
}

TV_SIM_KERNEL(tv_tpl_mm) {
  if (launch->args_size < sizeof(tv_tpl_mm_args)) return 1;
  const tv_tpl_mm_args* k = (const tv_tpl_mm_args*)args;
  const int s = item_size[k->dtype];
  for (int64_t i = 0; i < k->m; ++i)
    for (int64_t j = 0; j < k->n; ++j) {
      char* po = (char*)k->out + (i * k->n + j) * s;
      if (is_float(k->dtype)) { /* in double, rounded once: see tv_tpl_sum */
        double acc = 0;
        for (int64_t p = 0; p < k->k; ++p)
          acc += load_f((const char*)k->a + (i * k->stride_a[0] + p * k->stride_a[1]) * s, k->dtype) *
                 load_f((const char*)k->b + (p * k->stride_b[0] + j * k->stride_b[1]) * s, k->dtype);
        store_f(po, k->dtype, acc);
      } else {
        int64_t acc = 0;
        for (int64_t p = 0; p < k->k; ++p)
          acc += load_i((const char*)k->a + (i * k->stride_a[0] + p * k->stride_a[1]) * s, k->dtype) *
                 load_i((const char*)k->b + (p * k->stride_b[0] + j * k->stride_b[1]) * s, k->dtype);
        store_i(po, k->dtype, k->dtype == TV_TPL_BOOL ? acc != 0 : acc);
      }
    }
  return 0;
}

TV_SIM_KERNEL(tv_tpl_sum) {
  if (launch->args_size < sizeof(tv_tpl_sum_args)) return 1;
  const tv_tpl_sum_args* k = (const tv_tpl_sum_args*)args;
  const int si = item_size[k->dtype_in], so = item_size[k->dtype_out];
  int64_t n_out = 1, n_red = 1;
  for (int32_t d = 0; d < k->out_ndim; ++d) n_out *= k->out_sizes[d];
  for (int32_t d = 0; d < k->red_ndim; ++d) n_red *= k->red_sizes[d];
  for (int64_t o = 0; o < n_out; ++o) {
    const int64_t base = offset_of(o, k->out_ndim, k->out_sizes, k->out_strides);
    /* Floating sums accumulate in double and round once to the output dtype (see the note at
     * the top of kernels.cpp); integer sums in int64, as the CPU's. */
    double acc_f = 0;
    int64_t acc_i = 0;
    for (int64_t r = 0; r < n_red; ++r) {
      const char* p = (const char*)k->in + (base + offset_of(r, k->red_ndim, k->red_sizes, k->red_strides)) * si;
      if (is_float(k->dtype_out)) acc_f += load_f(p, k->dtype_in);
      else acc_i += load_i(p, k->dtype_in);
    }
    char* po = (char*)k->out + o * so;
    if (is_float(k->dtype_out)) store_f(po, k->dtype_out, acc_f);
    else store_i(po, k->dtype_out, k->dtype_out == TV_TPL_BOOL ? acc_i != 0 : acc_i);
  }
  return 0;
}
