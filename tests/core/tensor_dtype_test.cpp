// Shapes, tensor views and the host 16-bit float conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace moezero {
namespace {

TEST(Shape, BasicsAndErrors) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s[-1], 4);
  EXPECT_EQ(s.str(), "(2, 3, 4)");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ((Shape{0, 5}).numel(), 0);
  EXPECT_THROW((Shape{1, 2, 3, 4, 5, 6}), Error);
  EXPECT_THROW((Shape{-1}), Error);
  EXPECT_THROW(s[3], Error);
}

TEST(Tensor, ViewsShareMemory) {
  float data[12] = {};
  Tensor t(data, DType::F32, Shape{4, 3}, nullptr);
  Tensor rows = t.slice_rows(1, 3);
  EXPECT_EQ(rows.data(), data + 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  Tensor flat = t.view_elems(5, Shape{7});
  EXPECT_EQ(flat.data(), data + 5);
  EXPECT_EQ(t.reshape(Shape{2, 6}).dim(1), 6);
  EXPECT_THROW(t.reshape(Shape{5}), Error);
  EXPECT_THROW(t.slice_rows(2, 5), Error);
  EXPECT_THROW(t.view_elems(6, Shape{7}), Error);
  EXPECT_THROW(t.data_as<bf16>(), Error);
  EXPECT_EQ(t.data_as<float>(), data);
}

TEST(Tensor, ViewBytesReinterpretsAlignedRanges) {
  alignas(8) int8_t bytes[16] = {};
  const Tensor wire(bytes, DType::I8, Shape{16}, nullptr);
  const Tensor scales = wire.view_bytes(8, DType::F32, Shape{2});
  EXPECT_EQ(scales.dtype(), DType::F32);
  EXPECT_EQ(scales.data(), bytes + 8);
  EXPECT_EQ(scales.shape(), (Shape{2}));
  scales.data_as<float>()[1] = 1.5f;
  float back = 0;
  std::memcpy(&back, bytes + 12, 4);
  EXPECT_EQ(back, 1.5f);
  EXPECT_EQ(wire.view_bytes(16, DType::F32, Shape{0}).numel(), 0);  // the end is in range
  EXPECT_THROW(wire.view_bytes(6, DType::F32, Shape{1}), Error);    // not 4-byte aligned
  EXPECT_THROW(wire.view_bytes(12, DType::F32, Shape{2}), Error);   // past the end
  EXPECT_THROW(wire.view_bytes(-4, DType::F32, Shape{1}), Error);
}

TEST(DType, ParseAndNames) {
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_dtype("float32"), DType::F32);
  EXPECT_EQ(dtype_name(DType::I64), "i64");
  EXPECT_EQ(dtype_size_bytes(DType::F16), 2u);
  EXPECT_EQ(parse_dtype("i8"), DType::I8);
  EXPECT_EQ(parse_dtype("int8"), DType::I8);
  EXPECT_EQ(dtype_name(DType::I8), "i8");
  EXPECT_EQ(dtype_size_bytes(DType::I8), 1u);
  EXPECT_FALSE(is_floating(DType::I8));
  try {
    parse_dtype("f8");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'f8'"), std::string::npos);
  }
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even): rounds up.
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.015625f);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
  // Every bf16 value round-trips through float.
  for (uint32_t b = 0; b < 65536; ++b) {
    bf16 h{static_cast<uint16_t>(b)};
    float f = bf16_to_float(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f).bits, h.bits) << b;
  }
}

TEST(FP16, ConvertsAllValuesExactly) {
  EXPECT_EQ(float_to_fp16(1.0f).bits, 0x3c00);
  EXPECT_EQ(float_to_fp16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(float_to_fp16(1e6f).bits, 0x7c00);                   // overflow -> inf
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -26)).bits, 0x0000);  // underflow to zero
  EXPECT_EQ(float_to_fp16(-2.0f).bits, 0xc000);
  for (uint32_t b = 0; b < 65536; ++b) {
    fp16 h{static_cast<uint16_t>(b)};
    float f = fp16_to_float(h);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_fp16(f).bits, h.bits) << b;
  }
  // Halfway between 1.0 and the next fp16 (1 + 2^-10): ties to even.
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
}

}  // namespace
}  // namespace moezero
