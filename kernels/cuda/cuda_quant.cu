// kernels/cuda/cuda_quant.cu — block-wise int8 quantisation: quantize_int8_blocks and
// dequantize_int8_blocks (core/ops.def states the arithmetic; kernels/cpu/cpu_quant.cpp computes
// the same bits). Every fp32 operation is an explicit IEEE intrinsic (__fdiv_rn, __fmul_rn,
// __fadd_rn): no FMA contraction, no approximate division, whatever the compiler flags.
//
// quantize: one thread block per quantisation block (a grid-stride loop over blocks): a block
// max of |x| (non-finite elements count as +Inf, so the max says whether the block is finite),
// then every thread computes the same scale and quantises its elements.
// dequantize: one thread per element (grid-stride).
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moezero::cuda {

namespace {

template <typename T>
__global__ void quantize_int8_blocks_kernel(const T* x, int8_t* q, float* scales, int64_t n,
                                            int64_t block, int64_t num_blocks) {
  __shared__ float scratch[32];
  for (int64_t b = blockIdx.x; b < num_blocks; b += gridDim.x) {
    const int64_t lo = b * block, hi = min(n, lo + block);
    float amax = 0.0f;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      const float a = fabsf(to_f32(x[i]));
      amax = fmaxf(amax, a <= 3.402823466e38f ? a : INFINITY);  // NaN, Inf -> +Inf
    }
    amax = block_max(amax, scratch);
    float scale = __fdiv_rn(amax, 127.0f);
    const bool finite = amax <= 3.402823466e38f;
    if (!finite) scale = __int_as_float(0x7fc00000);  // quiet NaN: the block is lost
    if (threadIdx.x == 0) scales[b] = scale;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
      float r = 0.0f;
      if (finite && scale != 0.0f) {
        r = rintf(__fdiv_rn(to_f32(x[i]), scale));  // to nearest even
        r = fminf(fmaxf(r, -127.0f), 127.0f);
      }
      q[i] = static_cast<int8_t>(r);
    }
  }
}

template <typename T>
__global__ void dequantize_int8_blocks_kernel(const int8_t* q, const float* scales, T* x, int64_t n,
                                              int64_t block, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = __fmul_rn(static_cast<float>(q[i]), scales[i / block]);
    x[i] = from_f32<T>(accumulate ? __fadd_rn(to_f32(x[i]), v) : v);
  }
}

}  // namespace

void CudaOps::do_quantize_int8_blocks(Stream& s, const Tensor& x, const Tensor& q,
                                      const Tensor& scales, int64_t block) {
  OpContext ctx(s);
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t num_blocks = (n + block - 1) / block;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(num_blocks, 132 * 64));
  dispatch_float(x.dtype(), "quantize_int8_blocks", [&](auto tag) {
    using T = typename decltype(tag)::type;
    quantize_int8_blocks_kernel<T><<<grid, kThreads, 0, ctx.st>>>(
        ptr<T>(x), ptr<int8_t>(q), ptr<float>(scales), n, block, num_blocks);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_dequantize_int8_blocks(Stream& s, const Tensor& q, const Tensor& scales,
                                        const Tensor& x, int64_t block, bool accumulate) {
  OpContext ctx(s);
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "dequantize_int8_blocks", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dequantize_int8_blocks_kernel<T><<<grid_for(n), kThreads, 0, ctx.st>>>(
        ptr<int8_t>(q), ptr<float>(scales), ptr<T>(x), n, block, accumulate);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace moezero::cuda
