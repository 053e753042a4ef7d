
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
template <class T> __device__ __forceinline__ T tv_max(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a > b ? a : b)); }
template <class T> __device__ __forceinline__ T tv_min(T a, T b) { return (a != a) ? a : ((b != b) ? b : (a < b ? a : b)); }
__device__ __forceinline__ long long tv_maxi(long long a, long long b) { return a > b ? a : b; }
__device__ __forceinline__ long long tv_absi(long long a) { return a < 0 ? -a : a; }
__device__ __forceinline__ long long tv_mini(long long a, long long b) { return a < b ? a : b; }
__device__ __forceinline__ long long tv_ifloordiv(long long a, long long b) { long long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
__device__ __forceinline__ long long tv_ipymod(long long a, long long b) { long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
template <class T> __device__ __forceinline__ T tv_floordiv(T a, T b) { T q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
template <class T> __device__ __forceinline__ T tv_pymod(T a, T b) { T r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
__device__ __forceinline__ float tv_pymod(float a, float b) { float r = fmodf(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
__device__ __forceinline__ double tv_pymod(double a, double b) { double r = fmod(a, b); return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
template <class T> __device__ __forceinline__ T tv_cmod(T a, T b) { return a % b; }
template <class T> __device__ __forceinline__ T tv_ldcs(const T* p) { return *p; }
__device__ __forceinline__ float tv_ldcs(const float* p) { return __ldcs(p); }
__device__ __forceinline__ double tv_ldcs(const double* p) { return __ldcs(p); }
__device__ __forceinline__ int tv_ldcs(const int* p) { return __ldcs(p); }
__device__ __forceinline__ long long tv_ldcs(const long long* p) { return __ldcs(p); }
__device__ __forceinline__ float tv_cmod(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ double tv_cmod(double a, double b) { return fmod(a, b); }
template <class T> __device__ __forceinline__ T tv_ffloordiv(T a, T b) { return tv_floordiv(a, b); }
__device__ __forceinline__ float tv_ffloordiv(float a, float b) { return floorf(a / b); }
__device__ __forceinline__ double tv_ffloordiv(double a, double b) { return floor(a / b); }
template <class T> __device__ __forceinline__ T tv_ipow(T a, T b) { T r = 1; while (b > 0) { if (b & 1) r *= a; a *= a; b >>= 1; } return r; }
template <class T> __device__ __forceinline__ T tv_sign(T x) { return (T)((x > 0) - (x < 0)); }
template <class T> __device__ __forceinline__ T tv_lowest() { return sizeof(T) == 8 ? (T)(-9223372036854775807LL - 1) : sizeof(T) == 4 ? (T)(-2147483647 - 1) : sizeof(T) == 2 ? (T)-32768 : (T)-128; }
template <> __device__ __forceinline__ float tv_lowest<float>() { return -INFINITY; }
template <> __device__ __forceinline__ double tv_lowest<double>() { return -(double)INFINITY; }
template <class T> __device__ __forceinline__ T tv_highest() { return sizeof(T) == 8 ? (T)9223372036854775807LL : sizeof(T) == 4 ? (T)2147483647 : sizeof(T) == 2 ? (T)32767 : (T)127; }
template <> __device__ __forceinline__ float tv_highest<float>() { return INFINITY; }
template <> __device__ __forceinline__ double tv_highest<double>() { return (double)INFINITY; }
template <class T> __device__ __forceinline__ T tv_shfl(T v, int off) { return __shfl_xor_sync(0xffffffffu, v, off); }
__device__ __forceinline__ bool tv_shfl(bool v, int off) { return __shfl_xor_sync(0xffffffffu, (int)v, off); }
template <class T> __device__ __forceinline__ void tv_arg(T& v, long long& i, T v2, long long i2, bool is_max) {
  bool nan2 = v2 != v2, nan1 = v != v;
  bool better = nan2 ? (!nan1 || i2 < i) : (!nan1 && (is_max ? v2 > v : v2 < v));
  if (!better && !nan1 && !nan2 && v2 == v && i2 < i) better = true;
  if (better) { v = v2; i = i2; }
}
__device__ __forceinline__ float tv_div(float a, float b) { return __fdividef(a, b); }
__device__ __forceinline__ double tv_div(double a, double b) { return a / b; }
template <class T> __device__ __forceinline__ void tv_welford(T& m, T& m2, T& w, T om, T om2, T ow) {
  T n = w + ow;
  if (n == 0) return;
  T d = om - m, f = tv_div(ow, n);
  m = m + d * f; m2 = m2 + om2 + d * d * w * f; w = n;
}
// one value of weight 1 (a thread's own elements): no zero-weight test, one division
template <class T> __device__ __forceinline__ void tv_welford1(T& m, T& m2, T& w, T x) {
  w = w + (T)1;
  const T d = x - m;
  m = m + tv_div(d, w); m2 = m2 + d * (x - m);
}
template <class T> __device__ __forceinline__ void tv_osm(T& m, T& s, T om, T os) {
  T mx = tv_max(m, om);
  if (mx == tv_lowest<T>()) return;
  s = (m == mx ? s : s * exp(m - mx)) + (om == mx ? os : os * exp(om - mx)); m = mx;
}
// one value of weight 1 into (max, sum of exp(x - max)): one exp, whichever branch (equal
// values add 1, as tv_osm does: no exp(inf - inf); a NaN becomes the max and poisons the sum)
template <class T> __device__ __forceinline__ void tv_osm1(T& m, T& s, T v) {
  if (v > m) { s = s * exp(m - v) + (T)1; m = v; }
  else if (v == m) { s = s + (T)1; }
  else if (v != v) { m = v; }
  else { s = s + exp(v - m); }
}
__device__ __forceinline__ unsigned long long tv_hash(long long seed, long long off) {
  unsigned long long x = (unsigned long long)seed * 0x9E3779B97F4A7C15ULL + (unsigned long long)off + 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL; x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL; return x ^ (x >> 31);
}
__device__ __forceinline__ float tv_rand(long long seed, long long off) { return (float)(tv_hash(seed, off) >> 40) * (1.0f / 16777216.0f); }
__device__ __forceinline__ float tv_randn(long long seed, long long off) {
  float u1 = fmaxf(tv_rand(seed, off * 2), 1e-7f), u2 = tv_rand(seed, off * 2 + 1);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}
__device__ __forceinline__ long long tv_randint64(long long seed, long long off, long long lo, long long hi) {
  return lo + (long long)((tv_hash(seed, off) >> 1) % (unsigned long long)(hi - lo));
}
template <class T, int V> struct __align__(sizeof(T) * V) tv_vec { T v[V]; };
// the first failed bounds check of the module since the host last read it: (check, index)
__device__ long long tv_error[2] = {-1, 0};
__device__ __forceinline__ void tv_fail(long long check, long long value) {
  if (atomicCAS((unsigned long long*)&tv_error[0], ~0ULL, (unsigned long long)check) == ~0ULL) tv_error[1] = value;
}
