// tests/kernels/cpu_rows_test.cpp — the CPU kernels' row helpers (kernels/cpu/cpu_math.h), which
// run as clones for the CPU's widest vectors (and, for fp32 -> bf16, AVX-512 BF16's conversion
// instruction), against plain scalar formulas compiled here: the same bits for every input.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_math.h"

namespace moezero::test {
namespace {

std::vector<float> random_row(size_t n, unsigned seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// Converts the floats with the given bit patterns by f32_to_bf16_row and by float_to_bf16;
// returns how many differ (and names the first).
int64_t conversion_mismatches(const std::vector<uint32_t>& patterns) {
  std::vector<float> src(patterns.size());
  for (size_t i = 0; i < patterns.size(); ++i) src[i] = std::bit_cast<float>(patterns[i]);
  std::vector<bf16> got(src.size());
  cpu::f32_to_bf16_row(src.data(), got.data(), static_cast<int64_t>(src.size()));
  int64_t bad = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    const uint16_t want = float_to_bf16(src[i]).bits;
    if (got[i].bits != want && bad++ == 0)
      ADD_FAILURE() << "f32_to_bf16_row(0x" << std::hex << patterns[i] << ") = 0x" << got[i].bits
                    << ", float_to_bf16 gives 0x" << want;
  }
  return bad;
}

// Every upper half (sign, exponent, top of the mantissa: every NaN, infinity, subnormal and
// normal class) with 64 lower halves (the rounding cases 0, 1, 0x7fff, 0x8000, 0x8001, 0xffff and
// random ones), in rows whose groups of 32 mix subnormals with normal values.
TEST(CpuRows, F32ToBf16IsFloatToBf16ForEveryClassOfInput) {
  std::mt19937 rng(3);
  std::vector<uint32_t> lows = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
  while (lows.size() < 64) lows.push_back(rng() & 0xffffu);
  std::vector<uint32_t> patterns;
  patterns.reserve(size_t{65536} * lows.size());
  for (uint32_t low : lows)
    for (uint32_t up = 0; up < 65536; ++up) patterns.push_back(up << 16 | low);
  EXPECT_EQ(conversion_mismatches(patterns), 0);
  // Uneven lengths and offsets (the 32-wide groups, then the tail).
  std::vector<uint32_t> row;
  for (int i = 0; i < 77; ++i) row.push_back(bits(0.1f * static_cast<float>(i) - 3.0f));
  row[40] = 0x00000001u;  // one subnormal among normal values
  for (size_t len : {size_t{1}, size_t{31}, size_t{32}, size_t{33}, size_t{77}}) {
    std::vector<uint32_t> part(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_EQ(conversion_mismatches(part), 0) << "length " << len;
  }
  // All 2^32 inputs (about 30 s): MOEZERO_EXHAUSTIVE=1.
  if (std::getenv("MOEZERO_EXHAUSTIVE")) {
    std::vector<uint32_t> chunk(size_t{1} << 24);
    for (uint64_t base = 0; base < (uint64_t{1} << 32); base += chunk.size()) {
      for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<uint32_t>(base + i);
      ASSERT_EQ(conversion_mismatches(chunk), 0) << "from 0x" << std::hex << base;
    }
  }
}

float scalar_dot(const float* a, const float* b, int64_t n) {
  float lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lane[l] += a[i + l] * b[i + l];
  for (; i < n; ++i) lane[0] += a[i] * b[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

TEST(CpuRows, NormSoftmaxRopeAndSumRowsHaveTheScalarBits) {
  for (int64_t n : {1, 7, 8, 33, 128, 1000}) {
    SCOPED_TRACE(n);
    const auto x = random_row(static_cast<size_t>(n), 1), w = random_row(static_cast<size_t>(n), 2);
    const auto g0 = random_row(static_cast<size_t>(n), 3);
    // sum of squares; and fed in pieces of 8 and the rest (how widened bf16 blocks are summed)
    const float sq = cpu::sum_squares_f32(x.data(), n);
    EXPECT_EQ(bits(sq), bits(scalar_dot(x.data(), x.data(), n)));
    cpu::F32x8 acc8 = {};
    const int64_t first = std::min<int64_t>(8, n);
    cpu::add_squares(x.data(), first, acc8);
    cpu::add_squares(x.data() + first, n - first, acc8);
    EXPECT_EQ(bits(cpu::lane_sum(acc8)), bits(sq));
    // RMSNorm forward and backward rows
    const float r = 0.75f;
    std::vector<float> out(x.size());
    cpu::rmsnorm_row_f32(x.data(), w.data(), r, out.data(), n);
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(bits(out[j]), bits(x[j] * r * w[j])) << j;
    std::vector<float> in_place = x;  // out == x
    cpu::rmsnorm_row_f32(in_place.data(), w.data(), r, in_place.data(), n);
    EXPECT_EQ(in_place, out);
    std::vector<float> g = g0, acc(x.size(), 0.5f), dx(x.size());
    cpu::rmsnorm_backward_row_f32(x.data(), g.data(), w.data(), r, acc.data(), dx.data(), n);
    std::vector<float> gw(x.size());
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(bits(acc[j]), bits(0.5f + g0[j] * x[j] * r)) << j;
      gw[j] = g0[j] * w[j];
    }
    const float k = r * r * r * scalar_dot(gw.data(), x.data(), n) / static_cast<float>(n);
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(bits(dx[j]), bits(r * gw[j] - x[j] * k)) << j;
    std::vector<float> g2 = g0, acc2(x.size(), 0.5f), x2 = x;  // dx == x
    cpu::rmsnorm_backward_row_f32(x2.data(), g2.data(), w.data(), r, acc2.data(), x2.data(), n);
    EXPECT_EQ(x2, dx);
    // attention softmax rows: exp(s - max) and its sum, and P / dS from lse
    const int64_t valid = (n + 1) / 2;
    std::vector<float> s = x;
    const cpu::RowMaxSum ms = cpu::softmax_prefix_row_f32(s.data(), valid, n);
    float mx = x[0];
    for (int64_t j = 1; j < valid; ++j) mx = std::max(mx, x[j]);
    EXPECT_EQ(bits(ms.max), bits(mx));
    float lane[8] = {};  // the documented order: lane j % 8, the remainder to lane 0
    for (int64_t j = 0; j < n; ++j) {
      const float e = j < valid ? cpu::exp_f32(x[j] - mx) : 0.0f;
      ASSERT_EQ(bits(s[j]), bits(e)) << j;
      lane[j < n / 8 * 8 ? j % 8 : 0] += e;
    }
    EXPECT_EQ(bits(ms.sum), bits(((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                                 ((lane[4] + lane[5]) + (lane[6] + lane[7]))));
    std::vector<float> p = x, dp = g0;
    cpu::softmax_backward_row_f32(p.data(), dp.data(), valid, n, 1.5f, 0.125f);
    for (int64_t j = 0; j < n; ++j) {
      const float pj = j < valid ? cpu::exp_f32(x[j] - 1.5f) : 0.0f;
      ASSERT_EQ(bits(p[j]), bits(pj)) << j;
      ASSERT_EQ(bits(dp[j]), bits(j < valid ? pj * (g0[j] - 0.125f) : 0.0f)) << j;
    }
    // RoPE row
    std::vector<float> o1(x.size()), o2(x.size());
    cpu::rope_row_f32(x.data(), g0.data(), w.data(), x.data(), o1.data(), o2.data(), n);
    for (int64_t j = 0; j < n; ++j) {
      ASSERT_EQ(bits(o1[j]), bits(x[j] * w[j] - g0[j] * x[j])) << j;
      ASSERT_EQ(bits(o2[j]), bits(g0[j] * w[j] + x[j] * x[j])) << j;
    }
    std::vector<float> h1 = x, h2 = g0;  // in place, as rope calls it
    cpu::rope_row_f32(h1.data(), h2.data(), w.data(), x.data(), h1.data(), h2.data(), n);
    EXPECT_EQ(h1, o1);
    EXPECT_EQ(h2, o2);
  }
}

// The loader must pick the AVX-512BW conversions on a CPU that has AVX-512BW (GCC's
// arch=skylake-avx512 clone, matched by CPU model, missed Sapphire/Emerald Rapids parts).
TEST(CpuRows, Bf16RowsUseAvx512WhereTheCpuHasIt) {
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512bw")) GTEST_SKIP() << "this CPU has no AVX-512BW";
  EXPECT_STREQ(cpu::bf16_rows_variant(), "avx512bw");
#else
  GTEST_SKIP() << "not an x86-64 build with the vector variants";
#endif
}

}  // namespace
}  // namespace moezero::test
