// kernels/cpu/cpu_math.cpp — the row helpers of cpu_math.h, one clone per x86 vector width.
#include "kernels/cpu/cpu_math.h"

#include <algorithm>
#include <bit>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <cmath>

#include "kernels/cpu/cpu_common.h"

// AVX-512, AVX2 and the baseline: the loader picks the widest this CPU has.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define MOEZERO_CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
// bf16 row conversions pack 16-bit lanes: 512-bit packs need AVX-512BW (an avx512f clone would
// stay at 256 bits). GCC 12's target_clones takes AVX-512BW only as an `arch=` clone, which the
// loader matches by CPU model, not by feature (arch=skylake-avx512 is not picked on a Sapphire
// or Emerald Rapids part): so these have AVX2 and baseline clones, plus an AVX-512BW variant
// picked by feature at the first call (MOEZERO_AVX512BW, bw_or()).
#define MOEZERO_CPU_CLONES_BW __attribute__((target_clones("avx2", "default")))
#define MOEZERO_AVX512BW __attribute__((target("avx512f,avx512bw")))
#define MOEZERO_HAVE_BW_VARIANTS 1
#else
#define MOEZERO_CPU_CLONES
#define MOEZERO_CPU_CLONES_BW
#define MOEZERO_HAVE_BW_VARIANTS 0
#endif

namespace moezero::cpu {
namespace {

inline float sigmoid(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

}  // namespace

MOEZERO_CPU_CLONES float sum_exp_f32(const float* x, int64_t n, float shift) {
  F32x8 acc = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    float e[8];
    for (int l = 0; l < 8; ++l) e[l] = exp_f32(x[i + l] - shift);
    F32x8 v;
    load8(e, v);
    acc += v;
  }
  for (; i < n; ++i) acc[0] += exp_f32(x[i] - shift);
  return lane_sum(acc);
}

MOEZERO_CPU_CLONES float exp_inplace_f32(float* x, int64_t n, float shift) {
  for (int64_t j = 0; j < n; ++j) x[j] = exp_f32(x[j] - shift);
  F32x8 acc = {};
  add_lanes(x, n, acc);
  return lane_sum(acc);
}

MOEZERO_CPU_CLONES float max_f32(const float* x, int64_t n) {
  constexpr float kNegInf = -__builtin_inff();
  F32x8 lane = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F32x8 v;
    load8(x + i, v);
    lane = lane < v ? v : lane;  // per lane, as the scalar form (a NaN in v is skipped)
  }
  for (; i < n; ++i) lane[0] = lane[0] < x[i] ? x[i] : lane[0];
  float m = lane[0];
  for (int l = 1; l < 8; ++l) m = m < lane[l] ? lane[l] : m;
  return m;
}

MOEZERO_CPU_CLONES void swiglu_forward_f32(const float* g, const float* u, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] * sigmoid(g[i]) * u[i];
}

MOEZERO_CPU_CLONES void swiglu_backward_f32(const float* g, const float* u, const float* d,
                                            float* dg, float* du, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float sg = sigmoid(g[i]);
    dg[i] = d[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
    du[i] = d[i] * g[i] * sg;
  }
}

// __restrict__: without it GCC needs more run-time alias checks than it versions a loop for
// and leaves this one scalar (the outputs never alias the inputs or each other).
MOEZERO_CPU_CLONES void swiglu_backward_act_f32(const float* __restrict__ g,
                                                const float* __restrict__ u,
                                                const float* __restrict__ d, float* __restrict__ o,
                                                float* __restrict__ dg, float* __restrict__ du,
                                                int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float sg = sigmoid(g[i]);
    o[i] = g[i] * sg * u[i];  // = swiglu_forward_f32: (g * sigmoid(g)) * u
    dg[i] = d[i] * u[i] * sg * (1.0f + g[i] * (1.0f - sg));
    du[i] = d[i] * g[i] * sg;
  }
}

namespace {

// `wide` where the CPU has AVX-512BW, else `narrow` (the clones of MOEZERO_CPU_CLONES_BW).
template <typename F>
F bw_or([[maybe_unused]] F wide, F narrow) {
#if MOEZERO_HAVE_BW_VARIANTS
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bw")) return wide;
#endif
  return narrow;
}

MOEZERO_CPU_CLONES_BW void bf16_to_f32_row_narrow(const bf16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}
MOEZERO_CPU_CLONES_BW void f32_to_bf16_row_narrow(const float* src, bf16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = from_f32<bf16>(src[i]);
}
#if MOEZERO_HAVE_BW_VARIANTS
MOEZERO_AVX512BW void bf16_to_f32_row_bw(const bf16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}
MOEZERO_AVX512BW void f32_to_bf16_row_bw(const float* src, bf16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = from_f32<bf16>(src[i]);
}
#else
constexpr auto bf16_to_f32_row_bw = bf16_to_f32_row_narrow;
constexpr auto f32_to_bf16_row_bw = f32_to_bf16_row_narrow;
#endif

using Bf16ToF32 = void (*)(const bf16*, float*, int64_t);
using F32ToBf16 = void (*)(const float*, bf16*, int64_t);

// The exact (RNE) fp32 -> bf16 rows without AVX-512 BF16: AVX-512BW, AVX2 or the baseline.
void f32_to_bf16_row_portable(const float* src, bf16* dst, int64_t n) {
  static const F32ToBf16 impl = bw_or<F32ToBf16>(f32_to_bf16_row_bw, f32_to_bf16_row_narrow);
  impl(src, dst, n);
}

}  // namespace

const char* bf16_rows_variant() {
  using Pick = const char*;
  return bw_or<Pick>("avx512bw", "avx2 or baseline clone");
}

void bf16_to_f32_row(const bf16* src, float* dst, int64_t n) {
  static const Bf16ToF32 impl = bw_or<Bf16ToF32>(bf16_to_f32_row_bw, bf16_to_f32_row_narrow);
  impl(src, dst, n);
}

namespace {

#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// AVX-512 BF16's vcvtne2ps2bf16: 32 values in one instruction, RNE, NaN -> quiet NaN with the same
// bits as from_f32<bf16>. It flushes subnormal inputs to zero, where from_f32 rounds them: a
// group of 32 holding one (never in practice) takes the portable loop, so the bits are the same
// for every input (tests/kernels/cpu_rows_test.cpp checks all 2^32).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void f32_to_bf16_row_avx512bf16(
    const float* src, bf16* dst, int64_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000);
  const __m512i mantissa = _mm512_set1_epi32(0x007fffff);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i lo = _mm512_loadu_si512(src + i), hi = _mm512_loadu_si512(src + i + 16);
    const __mmask16 sub_lo =
        _mm512_testn_epi32_mask(lo, exponent) & _mm512_test_epi32_mask(lo, mantissa);
    const __mmask16 sub_hi =
        _mm512_testn_epi32_mask(hi, exponent) & _mm512_test_epi32_mask(hi, mantissa);
    if ((sub_lo | sub_hi) != 0) {
      f32_to_bf16_row_portable(src + i, dst + i, 32);
      continue;
    }
    const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo));
    _mm512_storeu_si512(dst + i, reinterpret_cast<const __m512i&>(r));
  }
  if (i < n) f32_to_bf16_row_portable(src + i, dst + i, n - i);
}
#endif

F32ToBf16 pick_f32_to_bf16() {
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw"))
    return f32_to_bf16_row_avx512bf16;
#endif
  return f32_to_bf16_row_portable;
}

}  // namespace

void f32_to_bf16_row(const float* src, bf16* dst, int64_t n) {
  static const F32ToBf16 impl = pick_f32_to_bf16();  // (a function-local static: any init order)
  impl(src, dst, n);
}

MOEZERO_CPU_CLONES float sum_squares_f32(const float* x, int64_t n) {
  F32x8 acc = {};
  add_squares(x, n, acc);
  return lane_sum(acc);
}

MOEZERO_CPU_CLONES RowMaxSum softmax_prefix_row_f32(float* x, int64_t valid, int64_t total) {
  // The exp and sum loops run to `end`: valid rounded up to whole 8-lane groups (masked), or the
  // whole row.
  const int64_t end = std::min(total, (valid + 7) / 8 * 8);
  const float mx = max_f32(x, valid);
  for (int64_t j = 0; j < end; ++j) x[j] = j < valid ? exp_f32(x[j] - mx) : 0.0f;
  for (int64_t j = end; j < total; ++j) x[j] = 0.0f;
  // The sum over [0, end) in the documented lane order is the sum over [0, total): the rest
  // is zeros, and end is a multiple of 8 unless it is total.
  F32x8 acc = {};
  add_lanes(x, end, acc);
  return {mx, lane_sum(acc)};
}

MOEZERO_CPU_CLONES void softmax_backward_row_f32(float* __restrict__ p, float* __restrict__ dp,
                                                 int64_t valid, int64_t total, float lse,
                                                 float dsum) {
  const int64_t end = std::min(total, (valid + 7) / 8 * 8);  // as softmax_prefix_row_f32
  for (int64_t j = 0; j < end; ++j) {
    const bool in = j < valid;
    const float pj = in ? exp_f32(p[j] - lse) : 0.0f;
    p[j] = pj;
    dp[j] = in ? pj * (dp[j] - dsum) : 0.0f;
  }
  for (int64_t j = end; j < total; ++j) p[j] = dp[j] = 0.0f;
}

// x and out may be the same row (in place): no __restrict__ on them.
MOEZERO_CPU_CLONES void rmsnorm_row_f32(const float* x, const float* __restrict__ w, float r,
                                        float* out, int64_t c) {
  for (int64_t j = 0; j < c; ++j) out[j] = x[j] * r * w[j];
}

// x and dx may be the same row (in place): no __restrict__ on them.
MOEZERO_CPU_CLONES void rmsnorm_backward_row_f32(const float* x, float* __restrict__ g,
                                                 const float* __restrict__ w, float r,
                                                 float* __restrict__ acc, float* dx, int64_t c) {
  for (int64_t j = 0; j < c; ++j) acc[j] += g[j] * x[j] * r;
  for (int64_t j = 0; j < c; ++j) g[j] *= w[j];
  const float k = r * r * r * dot_f32(g, x, c) / static_cast<float>(c);
  for (int64_t j = 0; j < c; ++j) dx[j] = r * g[j] - x[j] * k;
}

// In place (o1 == x1, o2 == x2: rope's usual call) is allowed: both inputs of element i are read
// before either output is written, and no pointer is __restrict__.
MOEZERO_CPU_CLONES void rope_row_f32(const float* x1, const float* x2, const float* cs,
                                     const float* sn, float* o1, float* o2, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x1[i], b = x2[i];
    o1[i] = a * cs[i] - b * sn[i];
    o2[i] = b * cs[i] + a * sn[i];
  }
}

MOEZERO_CPU_CLONES bool all_finite_f32(const float* x, int64_t n) {
  // |x| as bits: non-finite (exponent all ones) exactly when >= 0x7f800000. A max over integer
  // lanes: no float compare, so NaN cannot slip through.
  uint32_t mx = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t b = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
    mx = b > mx ? b : mx;
  }
  return mx < 0x7f800000u;
}

MOEZERO_CPU_CLONES void adamw_f32(float* p, const float* g, float* m, float* v, int64_t n,
                                  const AdamWConsts& c) {
  // Element by element the formula of cpu_optim.cpp; sqrt and division are correctly rounded in
  // every vector width (built with -fno-math-errno so that sqrt needs no libm fallback and the
  // loop vectorises; no FMA contraction), so every clone computes the same bits.
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * c.grad_scale;
    const float pi = p[i] * c.decay;
    const float mi = m[i] + c.w1 * (gi - m[i]);
    const float vi = c.beta2 * v[i] + c.w2 * gi * gi;
    const float denom = std::sqrt(vi) / c.bc2_sqrt + c.eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - c.step_size * (mi / denom);
  }
}

}  // namespace moezero::cpu
