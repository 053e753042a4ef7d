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
#endif
