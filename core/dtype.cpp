// core/dtype.cpp — dtype parsing and the host fp16 conversions (dtype.h).
#include "core/dtype.h"

#include <string>

#include "core/error.h"

namespace moezero {

DType parse_dtype(std::string_view s) {
  if (s == "f32" || s == "fp32" || s == "float32") return DType::F32;
  if (s == "bf16" || s == "bfloat16") return DType::BF16;
  if (s == "f16" || s == "fp16" || s == "float16") return DType::F16;
  if (s == "i32" || s == "int32") return DType::I32;
  if (s == "i64" || s == "int64") return DType::I64;
  if (s == "i8" || s == "int8") return DType::I8;
  MOEZERO_THROW("unknown dtype '", std::string(s),
                "' (expected one of f32, bf16, f16, i32, i64, i8)");
}

// IEEE binary16 conversion with round-to-nearest-even, subnormals, inf and NaN.
fp16 float_to_fp16(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return fp16{static_cast<uint16_t>(sign | 0x7e00u)};   // NaN
  if (abs >= 0x477ff000u) return fp16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (abs < 0x38800000u) {
    // Subnormal or zero in fp16: value = abs_float * 2^24, rounded to nearest even.
    float af = bits_float(abs);
    float scaled = af * 16777216.0f;  // 2^24, exact
    uint32_t r = static_cast<uint32_t>(scaled);
    float frac = scaled - static_cast<float>(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
    return fp16{static_cast<uint16_t>(sign | r)};
  }
  // Normal: rebias exponent 127 -> 15, round mantissa 23 -> 10 bits.
  uint32_t mant_rounded = abs + 0x0fffu + ((abs >> 13) & 1u);
  uint32_t h = (mant_rounded - (112u << 23)) >> 13;
  return fp16{static_cast<uint16_t>(sign | h)};
}

float fp16_to_float(fp16 h) {
  uint32_t sign = (static_cast<uint32_t>(h.bits) & 0x8000u) << 16;
  uint32_t exp = (h.bits >> 10) & 0x1fu;
  uint32_t mant = h.bits & 0x3ffu;
  if (exp == 0) {
    float v = static_cast<float>(mant) / 16777216.0f;  // mant * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace moezero
