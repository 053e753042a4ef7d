#ifdef TV_VECTOR_MATH
// glibc's vector variants (libmvec) of the math functions, declared as math.h does only under
// -ffast-math: with them `omp simd` loops calling sin/exp/tanh vectorize (results within 4 ulp).
#define TV_SIMD __attribute__((__simd__("notinbranch")))
extern "C" {
TV_SIMD float sinf(float); TV_SIMD float cosf(float); TV_SIMD float expf(float); TV_SIMD float logf(float);
TV_SIMD float tanhf(float); TV_SIMD float tanf(float); TV_SIMD float expm1f(float); TV_SIMD float log1pf(float);
TV_SIMD float erff(float); TV_SIMD float atanf(float); TV_SIMD float sinhf(float); TV_SIMD float coshf(float);
TV_SIMD float log2f(float); TV_SIMD float exp2f(float); TV_SIMD float log10f(float);
TV_SIMD double sin(double); TV_SIMD double cos(double); TV_SIMD double exp(double); TV_SIMD double log(double);
TV_SIMD double tanh(double);
}
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// expf's x86 vector variants defined here (hidden: the loops of this library call them, not
// libmvec's). libmvec's go to scalar code lane by lane for any input below about -87 (-inf
// included: every masked score of a causal softmax), which made such a loop 3-5x slower. These
// are branch-free: Cephes' polynomial on [-ln2/2, ln2/2], scaled by 2^n in two steps (subnormal
// results kept); -inf and underflow give 0, overflow +inf, NaN NaN. Within 1 ulp of glibc's
// expf on every float (tests/test_cpu_vector_math.py).
#define TV_VEXPF(V, I, N, NAME)                                                                    \
  typedef float V __attribute__((vector_size(4 * N)));                                             \
  typedef int32_t I __attribute__((vector_size(4 * N)));                                           \
  extern "C" __attribute__((visibility("hidden"))) V NAME(V x) {                                   \
    V c = x < -104.0f ? -104.0f : (x > 89.0f ? 89.0f : x);                                         \
    V n = (c * 1.44269504088896341f + 12582912.0f) - 12582912.0f; /* rounded to an integer */     \
    V r = (c - n * 0.693359375f) - n * -2.12194440e-4f;                                            \
    V p = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r                 \
           + 4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;                     \
    p = p * r * r + r + 1.0f;                                                                      \
    I k = __builtin_convertvector(n, I), h = k >> 1;                                               \
    V y = p * (V)((h + 127) << 23) * (V)((k - h + 127) << 23);                                     \
    y = x > 88.72283935546875f ? __builtin_inff() : y;                                             \
    y = x < -103.97208404541015625f ? 0.0f : y;                                                    \
    return x != x ? x : y;                                                                         \
  }
TV_VEXPF(tv_v4sf, tv_v4si, 4, _ZGVbN4v_expf)
#ifdef __AVX__
TV_VEXPF(tv_v8sf_avx, tv_v8si_avx, 8, _ZGVcN8v_expf)
#endif
#ifdef __AVX2__
TV_VEXPF(tv_v8sf, tv_v8si, 8, _ZGVdN8v_expf)
#endif
#ifdef __AVX512F__
TV_VEXPF(tv_v16sf, tv_v16si, 16, _ZGVeN16v_expf)
#endif
#endif
#endif
