// core/dtype.h — element types of tensors and host-side 16-bit float conversions.
//
// bf16 and fp16 are storage formats: every kernel accumulates in fp32. The host structs
// below have the same bit layout as CUDA's __nv_bfloat16 / __half, so buffers move between
// backends unchanged. Conversions round to nearest even; NaN stays NaN.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace moezero {

// I8: signed int8, the wire values of block-quantised gathers (ops quantize_int8_blocks).
enum class DType : uint8_t { F32, BF16, F16, I32, I64, I8 };

constexpr size_t dtype_size_bytes(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::I8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::I8: return "i8";
  }
  return "?";
}

// Parses "f32"/"fp32"/"float32", "bf16"/"bfloat16", "f16"/"fp16"/"float16", "i32", "i64",
// "i8".
// Throws moezero::Error naming the bad string.
DType parse_dtype(std::string_view s);

constexpr bool is_floating(DType t) {
  return t == DType::F32 || t == DType::BF16 || t == DType::F16;
}

// Host representation of bfloat16: the upper 16 bits of an IEEE fp32.
struct bf16 {
  uint16_t bits = 0;
};
// Host representation of IEEE binary16.
struct fp16 {
  uint16_t bits = 0;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return bf16{static_cast<uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);      // round to nearest even
  return bf16{static_cast<uint16_t>((u + rounding_bias) >> 16)};
}
inline float bf16_to_float(bf16 h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }

fp16 float_to_fp16(float f);
float fp16_to_float(fp16 h);

// Maps a C++ element type to its DType (used by typed accessors and tests).
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::BF16;
};
template <>
struct dtype_of<fp16> {
  static constexpr DType value = DType::F16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct dtype_of<int8_t> {
  static constexpr DType value = DType::I8;
};

}  // namespace moezero
