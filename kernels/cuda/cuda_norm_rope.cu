// kernels/cuda/cuda_norm_rope.cu — RMSNorm forward/backward and rotary position embedding.
//
// rmsnorm forward (one block per row t):  r = rsqrt(mean(x^2) + eps); out = x * r * w; rstd[t] = r
// rmsnorm backward, with g = dout:
//   dx_i = r * w_i * g_i - x_i * r^3 / C * sum_j(g_j * w_j * x_j)         `=`
//   dw_j += sum_t g_tj * x_tj * r_t                                       `+=` (f32)
//   dw is reduced deterministically: fixed row chunks write partials (chunks, C), then one
//   pass adds the chunks in order.
// rope (rotate-half): angles in double (pos * base^(-2i/D) reaches thousands of radians, where
// fp32 would lose ~1e-4 rad), products in fp32. Each thread owns one (i, i + D/2) pair, so
// out may alias x.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moezero::cuda {

namespace {

template <typename T>
__global__ void rmsnorm_forward_kernel(const T* x, const T* w, float eps, T* out, float* rstd,
                                       int64_t C) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = to_f32(xr[c]);
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss, scratch);
  const float r = rsqrtf(ss / static_cast<float>(C) + eps);
  T* o = out + row * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    o[c] = from_f32<T>(to_f32(xr[c]) * r * to_f32(w[c]));
  }
  if (threadIdx.x == 0) rstd[row] = r;
}

template <typename T>
__global__ void rmsnorm_backward_dx_kernel(const T* dout, const T* x, const T* w, const float* rstd,
                                           T* dx, int64_t C) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* g = dout + row * C;
  const T* xr = x + row * C;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    dot += to_f32(g[c]) * to_f32(w[c]) * to_f32(xr[c]);
  }
  dot = block_sum(dot, scratch);
  const float r = rstd[row];
  const float coef = r * r * r * dot / static_cast<float>(C);
  T* d = dx + row * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    d[c] = from_f32<T>(r * to_f32(w[c]) * to_f32(g[c]) - to_f32(xr[c]) * coef);
  }
}

// Grid (ceil(C / blockDim), chunks): partials[chunk, j] = sum over the chunk's rows.
template <typename T>
__global__ void rmsnorm_backward_dw_partial_kernel(const T* dout, const T* x, const float* rstd,
                                                   float* partials, int64_t rows, int64_t C,
                                                   int64_t rows_per_chunk) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= C) return;
  const int64_t begin = blockIdx.y * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  float acc = 0.0f;
  for (int64_t t = begin; t < end; ++t)
    acc += to_f32(dout[t * C + j]) * to_f32(x[t * C + j]) * rstd[t];
  partials[blockIdx.y * C + j] = acc;
}

__global__ void add_partials_kernel(const float* partials, int64_t chunks, int64_t C, float* dw) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < C;
       j += int64_t{gridDim.x} * blockDim.x) {
    float acc = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) acc += partials[c * C + j];
    dw[j] += acc;
  }
}

// x, out (T, H, D); one thread per (t, h, i < D/2).
template <typename T>
__global__ void rope_kernel(const T* x, const int32_t* positions, double log2_base, float sign,
                            T* out, int64_t T_, int64_t H, int64_t D) {
  const int64_t half = D / 2;
  const int64_t n = T_ * H * half;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = idx % half;
    const int64_t th = idx / half;  // t * H + h
    const int64_t t = th / H;
    const double inv_freq =
        exp2(-2.0 * static_cast<double>(i) / static_cast<double>(D) * log2_base);
    double sn, cs;
    sincos(static_cast<double>(positions[t]) * inv_freq, &sn, &cs);
    const float c = static_cast<float>(cs), s = sign * static_cast<float>(sn);
    const int64_t base = th * D;
    const float x1 = to_f32(x[base + i]), x2 = to_f32(x[base + i + half]);
    out[base + i] = from_f32<T>(x1 * c - x2 * s);
    out[base + i + half] = from_f32<T>(x2 * c + x1 * s);
  }
}

}  // namespace

void CudaOps::do_rmsnorm_forward(Stream& s, const Tensor& x, const Tensor& w, float eps,
                                 const Tensor& out, const Tensor& rstd) {
  OpContext ctx(s);
  const int64_t C = x.dim(-1), rows = C == 0 ? 0 : x.numel() / C;
  if (rows == 0) return;
  dispatch_act(x.dtype(), "rmsnorm_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rmsnorm_forward_kernel<T><<<grid_rows(rows), kThreads, 0, ctx.st>>>(
        ptr<T>(x), ptr<T>(w), eps, ptr<T>(out), ptr<float>(rstd), C);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_rmsnorm_backward(Stream& s, const Tensor& dout, const Tensor& x, const Tensor& w,
                                  const Tensor& rstd, const Tensor& dx, const Tensor& dw) {
  OpContext ctx(s);
  const int64_t C = x.dim(-1), rows = C == 0 ? 0 : x.numel() / C;
  if (rows == 0) return;
  // Chunking depends only on the shape, so the summation order is fixed.
  const int64_t rows_per_chunk = std::max<int64_t>(32, (rows + 127) / 128);
  const int64_t chunks = (rows + rows_per_chunk - 1) / rows_per_chunk;
  Buffer partials =
      ctx.scratch(static_cast<size_t>(chunks * C) * sizeof(float), "rmsnorm_backward dw partials");
  auto* part = static_cast<float*>(partials.data());
  dispatch_act(x.dtype(), "rmsnorm_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    // dw first: then dx may alias dout or x.
    const dim3 grid(static_cast<unsigned>((C + kThreads - 1) / kThreads),
                    static_cast<unsigned>(chunks));
    rmsnorm_backward_dw_partial_kernel<T><<<grid, kThreads, 0, ctx.st>>>(
        ptr<T>(dout), ptr<T>(x), ptr<float>(rstd), part, rows, C, rows_per_chunk);
    MOEZERO_CUDA_CHECK_LAUNCH();
    rmsnorm_backward_dx_kernel<T><<<grid_rows(rows), kThreads, 0, ctx.st>>>(
        ptr<T>(dout), ptr<T>(x), ptr<T>(w), ptr<float>(rstd), ptr<T>(dx), C);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
  add_partials_kernel<<<grid_for(C), kThreads, 0, ctx.st>>>(part, chunks, C, ptr<float>(dw));
  MOEZERO_CUDA_CHECK_LAUNCH();
}

void CudaOps::do_rope(Stream& s, const Tensor& x, const Tensor& positions, float base,
                      RopeDirection dir, const Tensor& out) {
  OpContext ctx(s);
  const int64_t T_ = x.dim(0), H = x.dim(1), D = x.dim(2);
  const int64_t n = T_ * H * (D / 2);
  if (n == 0) return;
  const float sign = dir == RopeDirection::Forward ? 1.0f : -1.0f;
  const double log2_base = std::log2(static_cast<double>(base));
  dispatch_act(x.dtype(), "rope", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rope_kernel<T><<<grid_for(n), kThreads, 0, ctx.st>>>(ptr<T>(x), ptr<int32_t>(positions),
                                                         log2_base, sign, ptr<T>(out), T_, H, D);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace moezero::cuda
