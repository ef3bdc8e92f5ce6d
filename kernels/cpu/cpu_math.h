// kernels/cpu/cpu_math.h — fp32 exp for the CPU kernels (SwiGLU, softmax, cross-entropy,
// attention) written so that loops over it vectorise, and sums of exponentials in fixed lanes.
//
// exp_f32(x): Cody-Waite reduction x = n ln2 + r (|r| <= ln2 / 2), Cephes expf's degree-6
// polynomial for e^r, and 2^n applied as two normal powers of two (so that subnormal results
// come out right). No branches, no libm call, no integer conversion of a float: GCC vectorises
// loops over it at -O3 (SSE2 lanes on the x86-64 baseline). Error against exp in float64,
// checked by tests/kernels/exp_test.cpp over the whole range: below 1 ulp (measured 0.97 ulp,
// relative error <= 1.2e-7) where the result is a normal float; subnormal results (x < -87.34)
// within 1 ulp of the subnormal grid; exp(x) = 0 for x <= -104, +inf for x >= 88.73, NaN for NaN.
// The same arithmetic runs in every lane and in the scalar tail, so results do not depend on the
// position in a row, the thread count or the run.
#pragma once

#include <bit>
#include <cstdint>

#include "core/dtype.h"

namespace moezero::cpu {

inline float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;     // 9 significant bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;  // ln 2 - kLn2Hi
  constexpr float kRound = 12582912.0f;      // 1.5 * 2^23: t + kRound rounds t to an integer
  float xc = x < -104.0f ? -104.0f : x;      // NaN passes both clamps (comparisons are false)
  xc = xc > 89.0f ? 89.0f : xc;
  const float t = xc * kLog2e + kRound;
  const float nf = t - kRound;  // round(xc / ln 2), in [-150, 128]
  const uint32_t n = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound);  // nf, as int
  float r = xc - nf * kLn2Hi;
  r = r - nf * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * (r * r) + r + 1.0f;
  // 2^n = 2^n1 * 2^n2 with n1 = floor(n / 2): both factors are normal floats for n in [-150, 128].
  const uint32_t n1 = static_cast<uint32_t>(static_cast<int32_t>(n) >> 1);
  const uint32_t n2 = n - n1;
  const float s1 = std::bit_cast<float>((n1 + 127u) << 23);
  const float s2 = std::bit_cast<float>((n2 + 127u) << 23);
  return y * s1 * s2;
}

// Row helpers over exp_f32 (cpu_math.cpp), compiled for AVX-512, AVX2 and the x86-64 baseline
// and picked at load time for this CPU (GCC target_clones); the kernels are built with
// -ffp-contract=off, so every variant computes the same bits.
//
// sum_j exp(x[j] - shift) in 8 fixed lanes (the same order on every run).
float sum_exp_f32(const float* x, int64_t n, float shift);
// x[j] = exp(x[j] - shift) in place; returns their sum (8 fixed lanes, as sum_exp_f32).
float exp_inplace_f32(float* x, int64_t n, float shift);
// Row maximum in 8 lanes (-inf for an empty row). Like a std::max chain it skips NaN; a row with
// a NaN still gives NaN through the exp of that element.
float max_f32(const float* x, int64_t n);
// Which variant the bf16 row conversions (bf16_to_f32_row, and f32_to_bf16_row without AVX-512
// BF16) run on this CPU: "avx512bw" where it has AVX-512BW.
const char* bf16_rows_variant();
// SwiGLU on fp32 rows: o = silu(g) * u; and its backward dg, du from d.
void swiglu_forward_f32(const float* g, const float* u, float* o, int64_t n);
void swiglu_backward_f32(const float* g, const float* u, const float* d, float* dg, float* du,
                         int64_t n);
// swiglu_backward_f32 plus o = silu(g) * u (swiglu_forward_f32's value) from the same sigmoid.
void swiglu_backward_act_f32(const float* g, const float* u, const float* d, float* o, float* dg,
                             float* du, int64_t n);
// True when every x[i] is finite (no NaN, no infinity); integer compares only.
bool all_finite_f32(const float* x, int64_t n);
// Sum of squares over 8 fixed lanes, as dot_f32 (cpu_common.h): lane l takes elements l, l + 8,
// ...; the tail goes to lane 0; lanes summed as ((0+1)+(2+3))+((4+5)+(6+7)).
float sum_squares_f32(const float* x, int64_t n);
// Causal softmax of a score row of `total` elements, keys [0, valid) visible (1 <= valid): x[j]
// = exp(x[j] - max) for j < valid, 0 beyond; returns the max (max_f32 of the visible keys) and
// the sum (8 fixed lanes, lane l taking elements l, l + 8, ...; the remainder past a multiple of
// 8 to lane 0). Not yet divided by the sum: attention scales its output rows instead (D elements
// a row, not total). The exp and sum run masked to whole 8-lane groups, so a row of a multiple
// of 8 elements has no scalar tail there.
struct RowMaxSum {
  float max, sum;
};
RowMaxSum softmax_prefix_row_f32(float* x, int64_t valid, int64_t total);
// Attention backward row: p[j] = exp(p[j] - lse), dp[j] = p[j] * (dp[j] - dsum) for j < valid;
// both 0 for valid <= j < total (one masked full-length loop).
void softmax_backward_row_f32(float* p, float* dp, int64_t valid, int64_t total, float lse,
                              float dsum);
// RMSNorm rows: out[j] = x[j] * r * w[j]; backward: acc[j] += g[j] * x[j] * r, g[j] *= w[j],
// dx[j] = r * g[j] - x[j] * (r^3 dot(g, x) / c). out may be x, dx may be x (in place).
void rmsnorm_row_f32(const float* x, const float* w, float r, float* out, int64_t c);
void rmsnorm_backward_row_f32(const float* x, float* g, const float* w, float r, float* acc,
                              float* dx, int64_t c);
// Rotate-half RoPE of one head: o1 = x1 c - x2 s, o2 = x2 c + x1 s (half elements each; in place
// allowed).
void rope_row_f32(const float* x1, const float* x2, const float* cs, const float* sn, float* o1,
                  float* o2, int64_t half);
// One AdamW update of n elements (cpu_optim.cpp's formula, with its per-call constants).
struct AdamWConsts {
  float grad_scale, decay, w1, beta2, w2, bc2_sqrt, eps, step_size;
};
void adamw_f32(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConsts& c);

}  // namespace moezero::cpu
