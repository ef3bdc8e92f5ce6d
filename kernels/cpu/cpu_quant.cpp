// kernels/cpu/cpu_quant.cpp — block-wise int8 quantisation on the CPU: quantize_int8_blocks and
// dequantize_int8_blocks (core/ops.def states the arithmetic; cuda_quant.cu computes the same
// bits). Blocks of `block` elements are independent; tasks take whole blocks (at least ~16K
// elements each), so every element is computed by one task in a fixed order. The library is
// compiled with -ffp-contract=off: q * scale + x is a product, then a sum, as on the GPU.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/cpu/cpu_common.h"

namespace moezero::cpu {
namespace {

constexpr int64_t kTaskElems = 16384;

// Blocks per task: whole blocks, at least ~kTaskElems elements.
int64_t block_grain(int64_t block) { return block >= kTaskElems ? 1 : kTaskElems / block; }

// Quantises one block p[0, len) into q and returns its scale (core/ops.def). Written so that the
// compiler vectorises both passes (the library has no -march: SSE2 must do): the absolute
// maximum is an integer maximum over the sign-cleared bit patterns (for non-NaN floats the
// unsigned order of those patterns is the numeric order, and every NaN or Inf pattern is >=
// 0x7f800000, so one reduction also tells finiteness); rint is the add-and-subtract of 1.5 * 2^23
// after the clamp, which rounds to nearest even exactly for |v| <= 127 in the default rounding
// mode (clamping first gives the same q as rounding first: rint is monotone and +-127 are
// integers). The same bits as the scalar definition, with no libm call per element.
template <typename T>
float quantize_block(const T* p, int64_t len, int8_t* q) {
  uint32_t amax_bits = 0;
  for (int64_t i = 0; i < len; ++i) {
    const uint32_t b = std::bit_cast<uint32_t>(to_f32(p[i])) & 0x7fffffffu;
    amax_bits = std::max(amax_bits, b);
  }
  if (amax_bits >= 0x7f800000u) {  // a NaN or an Inf in the block
    std::fill(q, q + len, int8_t{0});
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float scale = std::bit_cast<float>(amax_bits) / 127.0f;
  if (scale == 0.0f) {
    std::fill(q, q + len, int8_t{0});
    return 0.0f;
  }
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  for (int64_t i = 0; i < len; ++i) {
    const float v = std::min(std::max(to_f32(p[i]) / scale, -127.0f), 127.0f);
    q[i] = static_cast<int8_t>(static_cast<int32_t>((v + kRound) - kRound));
  }
  return scale;
}

// The fp32 and bf16 blocks (gradients, weights) also get AVX2 and AVX-512 clones, chosen at load
// time by the CPU (GCC function multi-versioning): the same arithmetic, 8 or 16 lanes.
[[gnu::target_clones("avx512f", "avx2", "default"), gnu::flatten]] float quantize_block_f32(
    const float* p, int64_t len, int8_t* q) {
  return quantize_block(p, len, q);
}
[[gnu::target_clones("avx512f", "avx2", "default"), gnu::flatten]] float quantize_block_bf16(
    const bf16* p, int64_t len, int8_t* q) {
  return quantize_block(p, len, q);
}
template <typename T>
float quantize_one(const T* p, int64_t len, int8_t* q) {
  if constexpr (std::is_same_v<T, float>)
    return quantize_block_f32(p, len, q);
  else if constexpr (std::is_same_v<T, bf16>)
    return quantize_block_bf16(p, len, q);
  else
    return quantize_block(p, len, q);
}

}  // namespace

void quantize_int8_blocks(Stream& s, const Tensor& x, const Tensor& q, const Tensor& scales,
                          int64_t block) {
  s.enqueue_host([x, q, scales, block] {
    const int64_t n = x.numel(), nb = (n + block - 1) / block;
    int8_t* pq = static_cast<int8_t*>(q.data());
    float* ps = static_cast<float*>(scales.data());
    dispatch_float(x.dtype(), "quantize_int8_blocks", [&]<typename T>() {
      const T* px = static_cast<const T*>(x.data());
      parallel_for_each(nb, block_grain(block), [&](int64_t b) {
        const int64_t lo = b * block, len = std::min(n, lo + block) - lo;
        ps[b] = quantize_one(px + lo, len, pq + lo);
      });
    });
  });
}

void dequantize_int8_blocks(Stream& s, const Tensor& q, const Tensor& scales, const Tensor& x,
                            int64_t block, bool accumulate) {
  s.enqueue_host([q, scales, x, block, accumulate] {
    const int64_t n = x.numel(), nb = (n + block - 1) / block;
    const int8_t* pq = static_cast<const int8_t*>(q.data());
    const float* ps = static_cast<const float*>(scales.data());
    dispatch_float(x.dtype(), "dequantize_int8_blocks", [&]<typename T>() {
      T* px = static_cast<T*>(x.data());
      parallel_for_each(nb, block_grain(block), [&](int64_t b) {
        const int64_t lo = b * block, hi = std::min(n, lo + block);
        const float scale = ps[b];
        for (int64_t i = lo; i < hi; ++i) {
          const float v = static_cast<float>(pq[i]) * scale;
          px[i] = from_f32<T>(accumulate ? to_f32(px[i]) + v : v);
        }
      });
    });
  });
}

}  // namespace moezero::cpu
