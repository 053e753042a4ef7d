
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <algorithm>
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
template <class T> static inline T tv_max(T a, T b) { return (a != a || a > b) ? a : b; }
template <class T> static inline T tv_min(T a, T b) { return (a != a || a < b) ? a : b; }
static inline int64_t tv_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t tv_floormod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline double tv_floordiv(double a, double b) { return std::floor(a / b); }
static inline float tv_floordiv(float a, float b) { return std::floor(a / b); }
template <class T> static inline T tv_remainder(T a, T b) { T r = std::fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
static inline int64_t tv_remainder(int64_t a, int64_t b) { return tv_floormod(a, b); }
static inline int32_t tv_remainder(int32_t a, int32_t b) { return (int32_t)tv_floormod(a, b); }
static inline int64_t tv_ipow(int64_t b, int64_t e) { int64_t r = 1; while (e-- > 0) r *= b; return r; }
static inline float tv_h2f(uint16_t h) {
  uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
  if (e == 0) { if (m == 0) u = s; else { int k = -1; do { k++; m <<= 1; } while (!(m & 0x400)); u = s | ((uint32_t)(112 - k) << 23) | ((m & 0x3ff) << 13); } }
  else if (e == 31) u = s | 0x7f800000u | (m << 13); else u = s | ((e + 112) << 23) | (m << 13);
  float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t tv_f2h(float f) {
  uint32_t u; std::memcpy(&u, &f, 4); uint32_t s = (u >> 16) & 0x8000; int32_t e = (int32_t)((u >> 23) & 0xff) - 112; uint32_t m = u & 0x7fffff;
  if (((u >> 23) & 0xff) == 0xff) return (uint16_t)(s | 0x7c00 | (m ? 0x200 : 0));
  if (e >= 31) return (uint16_t)(s | 0x7c00);
  if (e <= 0) { if (e < -10) return (uint16_t)s; m |= 0x800000; uint32_t sh = (uint32_t)(14 - e); uint32_t r = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (r & 1))) r++; return (uint16_t)(s | r); }
  uint32_t r = ((uint32_t)e << 10) | (m >> 13), rem = m & 0x1fff; if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++; return (uint16_t)(s | r); }
static inline float tv_b2f(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t tv_f2b(float f) { uint32_t u; std::memcpy(&u, &f, 4); if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);
  return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16); }
template <class T> static inline T tv_sign(T x) { return (x != x) ? x : (T)((x > 0) - (x < 0)); }
static inline double tv_erfinv(double y) {
  if (y <= -1) return y == -1 ? -INFINITY : NAN; if (y >= 1) return y == 1 ? INFINITY : NAN;
  double w = -std::log((1.0 - y) * (1.0 + y)), x;
  if (w < 6.25) { w -= 3.125; x = -3.6444120640178196996e-21; x = -1.685059138182016589e-19 + x * w; x = 1.2858480715256400167e-18 + x * w;
    x = 1.115787767802518096e-17 + x * w; x = -1.333171662854620906e-16 + x * w; x = 2.0972767875968561637e-17 + x * w; x = 6.6376381343583238325e-15 + x * w;
    x = -4.0545662729752068639e-14 + x * w; x = -8.1519341976054721522e-14 + x * w; x = 2.6335093153082322977e-12 + x * w; x = -1.2975133253453532498e-11 + x * w;
    x = -5.4154120542946279317e-11 + x * w; x = 1.051212273321532285e-09 + x * w; x = -4.1126339803469836976e-09 + x * w; x = -2.9070369957882005086e-08 + x * w;
    x = 4.2347877827932403518e-07 + x * w; x = -1.3654692000834678645e-06 + x * w; x = -1.3882523362786468719e-05 + x * w; x = 0.0001867342080340571352 + x * w;
    x = -0.00074070253416626697512 + x * w; x = -0.0060336708714301490533 + x * w; x = 0.24015818242558961693 + x * w; x = 1.6536545626831027356 + x * w; }
  else if (w < 16.0) { w = std::sqrt(w) - 3.25; x = 2.2137376921775787049e-09; x = 9.0756561938885390979e-08 + x * w; x = -2.7517406297064545428e-07 + x * w;
    x = 1.8239629214389227755e-08 + x * w; x = 1.5027403968909827627e-06 + x * w; x = -4.013867526981545969e-06 + x * w; x = 2.9234449089955446044e-06 + x * w;
    x = 1.2475304481671778723e-05 + x * w; x = -4.7318229009055733981e-05 + x * w; x = 6.8284851459573175448e-05 + x * w; x = 2.4031110387097893999e-05 + x * w;
    x = -0.0003550375203628474796 + x * w; x = 0.00095328937973738049703 + x * w; x = -0.0016882755560235047313 + x * w; x = 0.0024914420961078508066 + x * w;
    x = -0.0037512085075692412107 + x * w; x = 0.005370914553590063617 + x * w; x = 1.0052589676941592334 + x * w; x = 3.0838856104922207635 + x * w; }
  else { w = std::sqrt(w) - 5.0; x = -2.7109920616438573243e-11; x = -2.5556418169965252055e-10 + x * w; x = 1.5076572693500548083e-09 + x * w;
    x = -3.7894654401267369937e-09 + x * w; x = 7.6157012080783393804e-09 + x * w; x = -1.4960026627149240478e-08 + x * w; x = 2.9147953450901080826e-08 + x * w;
    x = -6.7711997758452339498e-08 + x * w; x = 2.2900482228026654717e-07 + x * w; x = -9.9298272942317002539e-07 + x * w; x = 4.5260625972231537039e-06 + x * w;
    x = -1.9681778105531670567e-05 + x * w; x = 7.5995277030017761139e-05 + x * w; x = -0.00021503011930044477347 + x * w; x = -0.00013871931833623122026 + x * w;
    x = 1.0103004648645343977 + x * w; x = 4.8499064014085844221 + x * w; }
  return x * y; }
template <class To, class From> static inline To tv_bitcast(From v) { static_assert(sizeof(To) == sizeof(From), "bitcast size"); To t; std::memcpy(&t, &v, sizeof(To)); return t; }
