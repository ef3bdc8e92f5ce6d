// tests/kernels/exp_test.cpp — the CPU kernels' vectorisable exp (kernels/cpu/cpu_math.h)
// against exp in float64 over its whole range, its special values, and the lane sums built on it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_math.h"

namespace moezero::test {
namespace {

using cpu::exp_f32;

// Error of exp_f32(x) in units of the float spacing (ulp) at the float64 result.
double ulp_error(float x) {
  const double ref = std::exp(static_cast<double>(x));
  const double got = exp_f32(x);
  const float rf = static_cast<float>(ref);
  const double ulp =
      rf == 0.0f
          ? std::ldexp(1.0, -149)
          : std::max(std::ldexp(1.0, -149),
                     static_cast<double>(std::nextafter(std::fabs(rf), INFINITY)) - std::fabs(rf));
  return std::fabs(got - ref) / ulp;
}

TEST(CpuExp, WithinOneUlpOfFloat64OverTheNormalRange) {
  // [-87.3, 88.7] at a stride of 1e-4, plus random points; the bound the header states.
  double worst = 0.0;
  float worst_x = 0.0f;
  auto check = [&](float x) {
    const double e = ulp_error(x);
    if (e > worst) worst = e, worst_x = x;
  };
  for (int i = 0; i <= 1760000; ++i) check(-87.3f + 1e-4f * static_cast<float>(i));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-87.3f, 88.7f), small(-1.0f, 1.0f);
  for (int i = 0; i < 1000000; ++i) check(u(rng));
  for (int i = 0; i < 200000; ++i) check(small(rng));
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;  // measured: 0.97
  RecordProperty("max_ulp_error", std::to_string(worst));
}

TEST(CpuExp, SubnormalResultsAndLimits) {
  for (float x = -104.0f; x < -87.3f; x += 0.001f) {
    const double ref = std::exp(static_cast<double>(x));
    EXPECT_LE(std::fabs(exp_f32(x) - ref), std::ldexp(1.0, -149)) << "x = " << x;
  }
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-inf), 0.0f);
  EXPECT_EQ(exp_f32(-104.5f), 0.0f);
  EXPECT_EQ(exp_f32(-1e30f), 0.0f);
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_EQ(exp_f32(88.8f), inf);
  EXPECT_EQ(exp_f32(1e30f), inf);
  EXPECT_TRUE(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
  // The largest results stay finite: exp(88.72) = 3.4e38 < FLT_MAX.
  EXPECT_TRUE(std::isfinite(exp_f32(88.72f)));
  EXPECT_NEAR(exp_f32(88.72f) / std::exp(static_cast<double>(88.72f)), 1.0, 3e-7);
}

TEST(CpuExp, LaneSumsMatchFloat64AndDoNotDependOnTheLoopPosition) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-20.0f, 5.0f);
  for (int64_t n : {0, 1, 7, 8, 9, 100, 1000}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = u(rng);
    const float shift = cpu::max_f32(x.data(), n);
    if (n == 0) {
      EXPECT_EQ(shift, -std::numeric_limits<float>::infinity());
      EXPECT_EQ(cpu::sum_exp_f32(x.data(), n, 0.0f), 0.0f);
      continue;
    }
    double ref = 0.0;
    for (float v : x) ref += std::exp(static_cast<double>(v) - shift);
    const float s = cpu::sum_exp_f32(x.data(), n, shift);
    EXPECT_NEAR(s, ref, ref * 1e-6) << "n " << n;
    std::vector<float> y = x;
    EXPECT_EQ(cpu::exp_inplace_f32(y.data(), n, shift), s) << "n " << n;
    for (int64_t j = 0; j < n; ++j) {
      // Element j's value is the same whether it sits in a vector lane or the scalar tail.
      EXPECT_EQ(y[static_cast<size_t>(j)], exp_f32(x[static_cast<size_t>(j)] - shift));
    }
  }
}

// The row helpers run the clone for this CPU's widest vector unit (AVX-512 here); with no FMA
// contraction they compute the same bits as the baseline code the test itself is built as.
TEST(CpuExp, SwigluRowsMatchTheScalarFormulaBitForBit) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-30.0f, 30.0f);
  const int64_t n = 1003;
  std::vector<float> g(n), up(n), d(n), o(n), dg(n), du(n);
  for (int64_t i = 0; i < n; ++i) g[i] = u(rng), up[i] = u(rng), d[i] = u(rng);
  cpu::swiglu_forward_f32(g.data(), up.data(), o.data(), n);
  cpu::swiglu_backward_f32(g.data(), up.data(), d.data(), dg.data(), du.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float sg = 1.0f / (1.0f + exp_f32(-g[i]));
    EXPECT_EQ(o[i], g[i] * sg * up[i]) << i;
    EXPECT_EQ(dg[i], d[i] * up[i] * sg * (1.0f + g[i] * (1.0f - sg))) << i;
    EXPECT_EQ(du[i], d[i] * g[i] * sg) << i;
    const double ref = static_cast<double>(g[i]) / (1.0 + std::exp(-static_cast<double>(g[i]))) *
                       static_cast<double>(up[i]);
    EXPECT_NEAR(o[i], ref, 1e-6 * (1.0 + std::fabs(ref))) << i;
  }
}

}  // namespace
}  // namespace moezero::test
