// kernels/cuda/cuda_softmax_topk_ce.cu — row softmax (forward/backward), logsumexp, top-k,
// cross-entropy, and the router's sigmoid and row normalisation.
//
// One block per row for softmax, logsumexp and cross-entropy (fixed-order block reductions, so
// results are deterministic); every element is read before the same thread overwrites it, so the
// documented aliases (softmax out = x, dlogits = logits) are safe.
// topk: one warp per row, k rounds of a warp arg-max under the total order
// (value descending, index ascending); NaN ranks as -inf (so indices stay in range and
// distinct), its value is reported as is.
// A cross-entropy target outside [0, V) and != -1 reports kCrossEntropy{Forward,Backward}Target on
// the stream and is treated as ignored.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moezero::cuda {

namespace {

template <typename T>
__global__ void softmax_forward_kernel(const T* x, T* out, int64_t C) {
  __shared__ float scratch[32];
  const T* xr = x + blockIdx.x * C;
  T* o = out + blockIdx.x * C;
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, to_f32(xr[c]));
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += expf(to_f32(xr[c]) - mx);
  sum = block_sum(sum, scratch);
  const float inv = 1.0f / sum;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    o[c] = from_f32<T>(expf(to_f32(xr[c]) - mx) * inv);
}

// out[row] = max + log(sum exp(x - max)); x f32.
__global__ void logsumexp_kernel(const float* x, float* out, int64_t C) {
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * C;
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) mx = fmaxf(mx, xr[c]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += expf(xr[c] - mx);
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = mx + logf(sum);
}

// out = 1 / (1 + exp(-x)), f32, grid-stride.
__global__ void sigmoid_kernel(const float* x, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = 1.0f / (1.0f + expf(-x[i]));
}

// out[row] = x[row] / sum(x[row]), 0 when the sum is 0; f32, one block per row.
__global__ void normalize_rows_kernel(const float* x, float* out, int64_t C) {
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * C;
  float* o = out + blockIdx.x * C;
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) sum += xr[c];
  sum = block_sum(sum, scratch);
  const float inv = sum != 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = xr[c] * inv;
}

// dx = y * (dy - sum(dy * y))
template <typename T>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t C) {
  __shared__ float scratch[32];
  const int64_t off = blockIdx.x * C;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dot += to_f32(dy[off + c]) * to_f32(y[off + c]);
  dot = block_sum(dot, scratch);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float yy = to_f32(y[off + c]);
    dx[off + c] = from_f32<T>(yy * (to_f32(dy[off + c]) - dot));
  }
}

// True when (va, ia) ranks before (vb, ib): larger value first, then lower index.
__device__ __forceinline__ bool ranks_before(float va, int ia, float vb, int ib) {
  return va > vb || (va == vb && ia < ib);
}

// One warp per row (blockDim = 32 * rows_per_block).
__global__ void topk_kernel(const float* x, int64_t R, int64_t C, int k, float* values,
                            int32_t* indices) {
  const int64_t row = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  if (row >= R) return;
  const int lane = threadIdx.x & 31;
  const float* xr = x + row * C;
  float prev_v = INFINITY;  // the previous pick (rank key); everything ranks after "none"
  int prev_i = -1;
  for (int r = 0; r < k; ++r) {
    float best_v = -INFINITY;
    int best_i = INT_MAX;
    for (int64_t c = lane; c < C; c += 32) {
      const float raw = xr[c];
      const float v = isnan(raw) ? -INFINITY : raw;
      const int ci = static_cast<int>(c);
      const bool after_prev = r == 0 || ranks_before(prev_v, prev_i, v, ci);
      if (after_prev && ranks_before(v, ci, best_v, best_i)) {
        best_v = v;
        best_i = ci;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best_v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (ranks_before(ov, oi, best_v, best_i)) {
        best_v = ov;
        best_i = oi;
      }
    }
    if (lane == 0) {
      values[row * k + r] = xr[best_i];
      indices[row * k + r] = best_i;
    }
    prev_v = best_v;
    prev_i = best_i;
  }
}

// Per row: max and sum(exp(x - max)) of logits; returns lse. Call with all threads.
template <typename T>
__device__ float row_logsumexp(const T* xr, int64_t V, float* scratch, float* mx_out) {
  float mx = -INFINITY;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) mx = fmaxf(mx, to_f32(xr[c]));
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) sum += expf(to_f32(xr[c]) - mx);
  sum = block_sum(sum, scratch);
  *mx_out = mx;
  return mx + logf(sum);
}

__device__ __forceinline__ bool target_ok(int32_t tgt, int64_t V, int64_t t, KernelErrorSink err,
                                          int code) {
  if (tgt >= 0 && tgt < V) return true;
  if (tgt != -1 && threadIdx.x == 0) report_kernel_error(err, code, t, tgt, V);
  return false;
}

template <typename T>
__global__ void cross_entropy_forward_kernel(const T* logits, const int32_t* targets, float* losses,
                                             int64_t V, KernelErrorSink err) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const int32_t tgt = targets[t];
  if (!target_ok(tgt, V, t, err, kCrossEntropyForwardTarget)) {  // uniform across the block
    if (threadIdx.x == 0) losses[t] = 0.0f;
    return;
  }
  const T* xr = logits + t * V;
  float mx;
  const float lse = row_logsumexp(xr, V, scratch, &mx);
  if (threadIdx.x == 0) losses[t] = lse - to_f32(xr[tgt]);
}

// dlogits = (softmax - onehot) * dloss; zero row when ignored.
template <typename T>
__global__ void cross_entropy_backward_kernel(const T* logits, const int32_t* targets,
                                              const float* dlosses, T* dlogits, int64_t V,
                                              KernelErrorSink err) {
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x;
  const int32_t tgt = targets[t];
  T* d = dlogits + t * V;
  if (!target_ok(tgt, V, t, err, kCrossEntropyBackwardTarget)) {
    for (int64_t c = threadIdx.x; c < V; c += blockDim.x) d[c] = from_f32<T>(0.0f);
    return;
  }
  const T* xr = logits + t * V;
  float mx;
  const float lse = row_logsumexp(xr, V, scratch, &mx);
  const float g = dlosses[t];
  for (int64_t c = threadIdx.x; c < V; c += blockDim.x) {
    const float p = expf(to_f32(xr[c]) - lse);
    d[c] = from_f32<T>((p - (c == tgt ? 1.0f : 0.0f)) * g);
  }
}

}  // namespace

void CudaOps::do_softmax_forward(Stream& s, const Tensor& x, const Tensor& out) {
  OpContext ctx(s);
  const int64_t C = x.dim(-1), R = C == 0 ? 0 : x.numel() / C;
  if (R == 0) return;
  dispatch_act(x.dtype(), "softmax_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_forward_kernel<T><<<grid_rows(R), kThreads, 0, ctx.st>>>(ptr<T>(x), ptr<T>(out), C);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_logsumexp(Stream& s, const Tensor& x, const Tensor& out) {
  OpContext ctx(s);
  const int64_t R = x.dim(0), C = x.dim(1);
  if (R == 0) return;
  logsumexp_kernel<<<grid_rows(R), kThreads, 0, ctx.st>>>(ptr<float>(x), ptr<float>(out), C);
  MOEZERO_CUDA_CHECK_LAUNCH();
}

void CudaOps::do_sigmoid_forward(Stream& s, const Tensor& x, const Tensor& out) {
  OpContext ctx(s);
  const int64_t n = x.numel();
  if (n == 0) return;
  sigmoid_kernel<<<grid_for(n), kThreads, 0, ctx.st>>>(ptr<float>(x), ptr<float>(out), n);
  MOEZERO_CUDA_CHECK_LAUNCH();
}

void CudaOps::do_normalize_rows(Stream& s, const Tensor& x, const Tensor& out) {
  OpContext ctx(s);
  const int64_t R = x.dim(0), C = x.dim(1);
  if (R == 0 || C == 0) return;
  normalize_rows_kernel<<<grid_rows(R), kThreads, 0, ctx.st>>>(ptr<float>(x), ptr<float>(out), C);
  MOEZERO_CUDA_CHECK_LAUNCH();
}

void CudaOps::do_softmax_backward(Stream& s, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  OpContext ctx(s);
  const int64_t C = y.dim(-1), R = C == 0 ? 0 : y.numel() / C;
  if (R == 0) return;
  dispatch_act(y.dtype(), "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_kernel<T>
        <<<grid_rows(R), kThreads, 0, ctx.st>>>(ptr<T>(y), ptr<T>(dy), ptr<T>(dx), C);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_topk(Stream& s, const Tensor& x, int k, const Tensor& values,
                      const Tensor& indices) {
  OpContext ctx(s);
  const int64_t R = x.dim(0), C = x.dim(1);
  if (R == 0) return;
  MOEZERO_CHECK(C <= INT_MAX, "topk: C = ", C, " exceeds the int index range");
  constexpr int kRowsPerBlock = 8;
  const int64_t blocks = (R + kRowsPerBlock - 1) / kRowsPerBlock;
  topk_kernel<<<grid_rows(blocks), 32 * kRowsPerBlock, 0, ctx.st>>>(
      ptr<float>(x), R, C, k, ptr<float>(values), ptr<int32_t>(indices));
  MOEZERO_CUDA_CHECK_LAUNCH();
}

void CudaOps::do_cross_entropy_forward(Stream& s, const Tensor& logits, const Tensor& targets,
                                       const Tensor& losses) {
  OpContext ctx(s);
  const int64_t T_ = logits.dim(0), V = logits.dim(1);
  if (T_ == 0) return;
  dispatch_act(logits.dtype(), "cross_entropy_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_forward_kernel<T><<<grid_rows(T_), kThreads, 0, ctx.st>>>(
        ptr<T>(logits), ptr<int32_t>(targets), ptr<float>(losses), V, ctx.err());
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_cross_entropy_backward(Stream& s, const Tensor& logits, const Tensor& targets,
                                        const Tensor& dlosses, const Tensor& dlogits) {
  OpContext ctx(s);
  const int64_t T_ = logits.dim(0), V = logits.dim(1);
  if (T_ == 0) return;
  dispatch_act(logits.dtype(), "cross_entropy_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    cross_entropy_backward_kernel<T><<<grid_rows(T_), kThreads, 0, ctx.st>>>(
        ptr<T>(logits), ptr<int32_t>(targets), ptr<float>(dlosses), ptr<T>(dlogits), V, ctx.err());
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace moezero::cuda
