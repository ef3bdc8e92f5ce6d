// tests/kernels/quant_test.cpp — quantize_int8_blocks / dequantize_int8_blocks (core/ops.def)
// against a float64 reference on every compiled backend: the per-block error bound of the
// format on random data of every float dtype, odd sizes, a short last block, all-zero and
// non-finite blocks, accumulation, a same-dtype i8 copy, and validation errors.
#include <algorithm>
#include <limits>

#include "tests/kernels/kernel_test_util.h"

namespace moezero::test {
namespace {

using QuantTest = KernelTest;

int64_t blocks_of(int64_t n, int64_t block) { return (n + block - 1) / block; }

TEST_P(QuantTest, RoundTripIsWithinHalfAStepPerBlock) {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (auto [n, block] :
         {std::pair<int64_t, int64_t>{1, 1}, {17, 4}, {1000, 64}, {4099, 2048}, {40000, 333}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n " << n << " block " << block);
      Vec v = round_to(t, rand_vec(static_cast<size_t>(n), -3.0f, 3.0f));
      for (int64_t b = 2; b * block < n; b += 5)  // some all-zero blocks
        std::fill(v.begin() + b * block, v.begin() + std::min(n, (b + 1) * block), 0.0f);
      TensorBuffer x = upload(v, t, Shape{n});
      TensorBuffer q = alloc(DType::I8, Shape{n});
      TensorBuffer sc = alloc(DType::F32, Shape{blocks_of(n, block)});
      TensorBuffer back = alloc(t, Shape{n});
      ops().quantize_int8_blocks(s(), x, q, sc, block);
      ops().dequantize_int8_blocks(s(), q, sc, back, block, false);
      const Vec scales = download(sc), got = download(back);
      const std::vector<uint8_t> qb = download_bytes(q);
      for (int64_t b = 0; b * block < n; ++b) {
        double amax = 0.0;
        for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
          amax = std::max(amax, std::fabs(double(v[size_t(i)])));
        // scale_b = amax / 127, rounded once to fp32.
        EXPECT_EQ(scales[size_t(b)], static_cast<float>(amax / 127.0)) << "block " << b;
        const double half = scales[size_t(b)] / 2.0;
        for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
          const double x_i = v[size_t(i)], err = std::fabs(got[size_t(i)] - x_i);
          // Half a step, the fp32 rounding of x / scale, and the output dtype's rounding.
          const double out_ulp = t == DType::F32 ? 0x1p-24 : t == DType::BF16 ? 0x1p-8 : 0x1p-11;
          ASSERT_LE(err, half * (1 + 0x1p-20) + out_ulp * std::fabs(x_i)) << "element " << i;
          const auto qi = static_cast<int8_t>(qb[size_t(i)]);
          ASSERT_GE(qi, -127);
          ASSERT_LE(qi, 127);
          if (amax == 0.0) {
            ASSERT_EQ(qi, 0);
          }
        }
      }
    }
  }
}

TEST_P(QuantTest, NonFiniteBlocksBecomeNaNAndOthersAreKept) {
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::F32, DType::BF16}) {
    // Blocks of 4: [finite], [NaN], [+Inf], [-Inf], [zeros], [finite, short].
    const Vec v = {0.5f, -1.0f, 0.25f, 2.0f, 1.0f, kNaN, 3.0f, 4.0f, kInf, 1.0f,   2.0f,
                   3.0f, 1.0f,  -kInf, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 127.0f, -63.5f};
    const auto n = static_cast<int64_t>(v.size());
    TensorBuffer x = upload(v, t, Shape{n});
    TensorBuffer q = alloc(DType::I8, Shape{n});
    TensorBuffer sc = alloc(DType::F32, Shape{6});
    TensorBuffer back = alloc(t, Shape{n});
    ops().quantize_int8_blocks(s(), x, q, sc, 4);
    ops().dequantize_int8_blocks(s(), q, sc, back, 4, false);
    const Vec scales = download(sc), got = download(back);
    const std::vector<uint8_t> qb = download_bytes(q);
    EXPECT_EQ(scales[0], 2.0f / 127.0f);
    for (int b : {1, 2, 3}) EXPECT_TRUE(std::isnan(scales[size_t(b)])) << "block " << b;
    EXPECT_EQ(scales[4], 0.0f);
    EXPECT_EQ(scales[5], 1.0f);
    for (int64_t i = 4; i < 16; ++i) {
      EXPECT_EQ(qb[size_t(i)], 0) << "q of a non-finite block, element " << i;
      EXPECT_TRUE(std::isnan(got[size_t(i)])) << "element " << i;
    }
    for (int64_t i = 16; i < 20; ++i) EXPECT_EQ(got[size_t(i)], 0.0f);
    // 127 -> q 127; -63.5 / 1 = -63.5 -> -64 (ties to even).
    EXPECT_EQ(static_cast<int8_t>(qb[20]), 127);
    EXPECT_EQ(static_cast<int8_t>(qb[21]), -64);
    EXPECT_EQ(got[21], -64.0f);
  }
}

TEST_P(QuantTest, AccumulateAddsTheDequantisedValues) {
  const int64_t n = 1001, block = 100;
  for (DType t : {DType::F32, DType::BF16}) {
    const Vec v = round_to(t, rand_vec(size_t(n))), base = round_to(t, rand_vec(size_t(n)));
    TensorBuffer x = upload(v, t, Shape{n});
    TensorBuffer q = alloc(DType::I8, Shape{n});
    TensorBuffer sc = alloc(DType::F32, Shape{blocks_of(n, block)});
    TensorBuffer plain = alloc(t, Shape{n});
    TensorBuffer acc = upload(base, t, Shape{n});
    ops().quantize_int8_blocks(s(), x, q, sc, block);
    ops().dequantize_int8_blocks(s(), q, sc, plain, block, false);
    ops().dequantize_int8_blocks(s(), q, sc, acc, block, true);
    const Vec p = download(plain), a = download(acc);
    const std::vector<uint8_t> qb = download_bytes(q);
    const Vec scales = download(sc);
    for (int64_t i = 0; i < n; ++i) {
      const float d =
          static_cast<float>(static_cast<int8_t>(qb[size_t(i)])) * scales[size_t(i / block)];
      ASSERT_EQ(p[size_t(i)], round_to(t, d)) << "element " << i;
      ASSERT_EQ(a[size_t(i)], round_to(t, base[size_t(i)] + d)) << "element " << i;
    }
  }
}

TEST_P(QuantTest, I8TensorsCopyAndFillButFloatOpsRefuseThem) {
  TensorBuffer a = alloc(DType::I8, Shape{5}), b = alloc(DType::I8, Shape{5});
  ops().fill(s(), a, -7.0);
  ops().cast(s(), a, b);
  const std::vector<uint8_t> got = download_bytes(b);
  for (uint8_t x : got) EXPECT_EQ(static_cast<int8_t>(x), -7);
  TensorBuffer f = alloc(DType::F32, Shape{5});
  EXPECT_MOEZERO_ERROR(ops().cast(s(), a, f), "cast: src is i8(5)");
  EXPECT_MOEZERO_ERROR(ops().scale(s(), a, 2.0f), "scale: x is i8(5) but must be a float dtype");
  sync();
}

TEST_P(QuantTest, ValidationNamesTheArgument) {
  TensorBuffer x = alloc(DType::F32, Shape{10}), q = alloc(DType::I8, Shape{10});
  TensorBuffer sc = alloc(DType::F32, Shape{3}), q9 = alloc(DType::I8, Shape{9});
  TensorBuffer qi32 = alloc(DType::I32, Shape{10}), sc2 = alloc(DType::F32, Shape{2});
  TensorBuffer bytes = alloc(DType::I8, Shape{16});
  const Tensor odd(static_cast<char*>(bytes.view().data()) + 1, DType::F32, Shape{3}, &dev());
  const char* op = "quantize_int8_blocks";
  EXPECT_MOEZERO_ERROR(ops().quantize_int8_blocks(s(), x, q, sc, 0), "block is 0 but must be >= 1");
  EXPECT_MOEZERO_ERROR(ops().quantize_int8_blocks(s(), x, q, sc, -4), "block is -4");
  EXPECT_MOEZERO_ERROR(ops().quantize_int8_blocks(s(), x, q9, sc, 4), "q is i8(9)");
  EXPECT_MOEZERO_ERROR(ops().quantize_int8_blocks(s(), x, qi32, sc, 4),
                       "q is i32(10) but must be i8");
  EXPECT_MOEZERO_ERROR(ops().quantize_int8_blocks(s(), x, q, sc2, 4),
                       "scales is f32(2) but must have 3 elements");
  EXPECT_MOEZERO_ERROR(ops().quantize_int8_blocks(s(), q, q, sc, 4), "x is i8(10)");
  EXPECT_MOEZERO_ERROR(ops().quantize_int8_blocks(s(), x, q, odd, 4), "not 4-byte aligned");
  EXPECT_MOEZERO_ERROR(ops().quantize_int8_blocks(s(), x, q, sc, 0), op);
  EXPECT_MOEZERO_ERROR(ops().dequantize_int8_blocks(s(), q, sc, x, 0, false),
                       "dequantize_int8_blocks: block is 0");
  EXPECT_MOEZERO_ERROR(ops().dequantize_int8_blocks(s(), q, sc2, x, 4, true),
                       "dequantize_int8_blocks: scales is f32(2)");
  EXPECT_MOEZERO_ERROR(ops().dequantize_int8_blocks(s(), q, sc, q, 4, false),
                       "dequantize_int8_blocks: x is i8(10)");
  // Empty x: nothing to do, no scales.
  TensorBuffer e = alloc(DType::F32, Shape{0}), eq = alloc(DType::I8, Shape{0});
  TensorBuffer es = alloc(DType::F32, Shape{0});
  ops().quantize_int8_blocks(s(), e, eq, es, 4);
  ops().dequantize_int8_blocks(s(), eq, es, e, 4, true);
  sync();
}

MOEZERO_INSTANTIATE_BACKENDS(QuantTest);

}  // namespace
}  // namespace moezero::test
