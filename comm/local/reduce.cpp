// comm/local/reduce.cpp — blocked fp32-accumulating reduction over n inputs.
#include "comm/local/reduce.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

#include "core/error.h"

namespace moezero::comm {

namespace {

constexpr size_t kBlockElems = 1024;  // accumulator block on the stack: 4-8 KiB

template <typename T>
struct Acc {  // accumulator type and conversions per storage type
  using type = T;
  static type load(T v) { return v; }
  static T store(type v) { return v; }
};
template <>
struct Acc<bf16> {
  using type = float;
  static float load(bf16 v) { return bf16_to_float(v); }
  static bf16 store(float v) { return float_to_bf16(v); }
};
template <>
struct Acc<fp16> {
  using type = float;
  static float load(fp16 v) { return fp16_to_float(v); }
  static fp16 store(float v) { return float_to_fp16(v); }
};

template <typename A>
A combine(A acc, A v, ReduceOp op) {
  if (op == ReduceOp::Max) return acc < v ? v : acc;
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;  // wrapping sum without signed overflow
    return static_cast<A>(static_cast<U>(acc) + static_cast<U>(v));
  } else {
    return acc + v;
  }
}

template <typename T>
void reduce_typed(T* out, std::span<const void* const> inputs, size_t count, ReduceOp op) {
  using A = typename Acc<T>::type;
  const size_t n = inputs.size();
  std::array<A, kBlockElems> acc;
  for (size_t begin = 0; begin < count; begin += kBlockElems) {
    const size_t len = std::min(kBlockElems, count - begin);
    const T* in0 = static_cast<const T*>(inputs[0]) + begin;
    for (size_t i = 0; i < len; ++i) acc[i] = Acc<T>::load(in0[i]);
    for (size_t r = 1; r < n; ++r) {
      const T* in = static_cast<const T*>(inputs[r]) + begin;
      for (size_t i = 0; i < len; ++i) acc[i] = combine<A>(acc[i], Acc<T>::load(in[i]), op);
    }
    if (op == ReduceOp::Avg) {
      const A div = static_cast<A>(n);
      for (size_t i = 0; i < len; ++i) acc[i] = acc[i] / div;
    }
    T* o = out + begin;
    for (size_t i = 0; i < len; ++i) o[i] = Acc<T>::store(acc[i]);
  }
}

}  // namespace

void reduce_elems(void* out, std::span<const void* const> inputs, size_t count_elems, DType dtype,
                  ReduceOp op) {
  MOEZERO_CHECK(!inputs.empty(), "reduce: no inputs");
  switch (dtype) {
    case DType::F32: return reduce_typed(static_cast<float*>(out), inputs, count_elems, op);
    case DType::BF16: return reduce_typed(static_cast<bf16*>(out), inputs, count_elems, op);
    case DType::F16: return reduce_typed(static_cast<fp16*>(out), inputs, count_elems, op);
    case DType::I32: return reduce_typed(static_cast<int32_t*>(out), inputs, count_elems, op);
    case DType::I64: return reduce_typed(static_cast<int64_t*>(out), inputs, count_elems, op);
    case DType::I8: return reduce_typed(static_cast<int8_t*>(out), inputs, count_elems, op);
  }
  MOEZERO_THROW("reduce: unknown dtype ", static_cast<int>(dtype));
}

}  // namespace moezero::comm
