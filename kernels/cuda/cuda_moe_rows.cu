// kernels/cuda/cuda_moe_rows.cu — the MoE token movers: gather_rows (dispatch), combine_rows
// and its backward. Pure data movement plus fixed-order fp32 sums: deterministic.
//
//   gather_rows:  out[p] = x[perm[p] / k]                       x (T, C), out (P, C)   `=`
//   combine_rows: out[t] = sum_j w[t, j] y[inv_perm[t k + j]]   y (P, C), out (T, C)   `=`
//   backward:     dy[p] = w[a] dout[a / k], a = perm[p]         dy (P, C)              `=`
//                 dweights[t, j] = dout[t] . y[inv_perm[t k + j]]   f32 (T, k)         `=`
// A permutation entry of -1 (dropped, or p >= kept) gives a zero row / zero weight; entries
// out of range are treated the same way (perm and inv_perm come from sort_by_expert, so that
// only guards against misuse, it is not an error report).
// gather_rows copies 16-byte vectors when rows and pointers allow it (the benchmark's GB/s).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moezero::cuda {

namespace {

// One block per output row; the row is copied as `V` words (V = uint4 or T itself).
template <typename V>
__global__ void gather_rows_kernel(const V* x, const int32_t* perm, int k, V* out, int64_t T_,
                                   int64_t row_words) {
  const int64_t p = blockIdx.x;
  const int32_t a = perm[p];
  const int64_t t = a >= 0 ? a / k : -1;
  V* dst = out + p * row_words;
  if (t < 0 || t >= T_) {
    for (int64_t c = threadIdx.x; c < row_words; c += blockDim.x) dst[c] = V{};
    return;
  }
  const V* src = x + t * row_words;
  for (int64_t c = threadIdx.x; c < row_words; c += blockDim.x) dst[c] = src[c];
}

template <typename T>
__global__ void combine_rows_kernel(const T* y, const int32_t* inv_perm, const float* weights,
                                    int k, T* out, int64_t P, int64_t C) {
  const int64_t t = blockIdx.x;
  T* o = out + t * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < k; ++j) {
      const int32_t p = inv_perm[t * k + j];
      if (p < 0 || p >= P) continue;
      const float w = weights != nullptr ? weights[t * k + j] : 1.0f;
      acc = fmaf(w, to_f32(y[static_cast<int64_t>(p) * C + c]), acc);
    }
    o[c] = from_f32<T>(acc);
  }
}

template <typename T>
__global__ void combine_rows_backward_dy_kernel(const T* dout, const int32_t* perm,
                                                const float* weights, int k, T* dy, int64_t T_,
                                                int64_t C) {
  const int64_t p = blockIdx.x;
  const int32_t a = perm[p];
  T* d = dy + p * C;
  if (a < 0 || a / k >= T_) {
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) d[c] = from_f32<T>(0.0f);
    return;
  }
  const float w = weights != nullptr ? weights[a] : 1.0f;
  const T* src = dout + static_cast<int64_t>(a / k) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) d[c] = from_f32<T>(w * to_f32(src[c]));
}

// One warp per assignment a = t * k + j.
template <typename T>
__global__ void combine_rows_backward_dw_kernel(const T* dout, const T* y, const int32_t* inv_perm,
                                                int k, float* dweights, int64_t N, int64_t P,
                                                int64_t C) {
  const int64_t a = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  if (a >= N) return;
  const int lane = threadIdx.x & 31;
  const int32_t p = inv_perm[a];
  float acc = 0.0f;
  if (p >= 0 && p < P) {
    const T* g = dout + (a / k) * C;
    const T* yr = y + static_cast<int64_t>(p) * C;
    for (int64_t c = lane; c < C; c += 32) acc = fmaf(to_f32(g[c]), to_f32(yr[c]), acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) dweights[a] = acc;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void CudaOps::do_gather_rows(Stream& s, const Tensor& x, const Tensor& perm, int k,
                             const Tensor& out) {
  OpContext ctx(s);
  const int64_t P = out.dim(0), T_ = x.dim(0), C = x.dim(1);
  if (P == 0) return;
  const int64_t row_bytes = C * static_cast<int64_t>(dtype_size_bytes(x.dtype()));
  if (row_bytes % 16 == 0 && aligned16(x.data()) && aligned16(out.data())) {
    gather_rows_kernel<uint4><<<grid_rows(P), kThreads, 0, ctx.st>>>(
        ptr<uint4>(x), ptr<int32_t>(perm), k, ptr<uint4>(out), T_, row_bytes / 16);
    MOEZERO_CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_act(x.dtype(), "gather_rows", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gather_rows_kernel<T><<<grid_rows(P), kThreads, 0, ctx.st>>>(ptr<T>(x), ptr<int32_t>(perm), k,
                                                                 ptr<T>(out), T_, C);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_combine_rows(Stream& s, const Tensor& y, const Tensor& inv_perm,
                              const Tensor& weights, int k, const Tensor& out) {
  OpContext ctx(s);
  const int64_t T_ = out.dim(0), C = out.dim(1), P = y.dim(0);
  if (T_ == 0) return;
  const float* w = weights.defined() && weights.numel() > 0 ? ptr<float>(weights) : nullptr;
  dispatch_act(out.dtype(), "combine_rows", [&](auto tag) {
    using T = typename decltype(tag)::type;
    combine_rows_kernel<T><<<grid_rows(T_), kThreads, 0, ctx.st>>>(
        ptr<T>(y), ptr<int32_t>(inv_perm), w, k, ptr<T>(out), P, C);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_combine_rows_backward(Stream& s, const Tensor& dout, const Tensor& y,
                                       const Tensor& perm, const Tensor& inv_perm,
                                       const Tensor& weights, int k, const Tensor& dy,
                                       const Tensor& dweights) {
  OpContext ctx(s);
  const int64_t T_ = dout.dim(0), C = dout.dim(1), P = dy.dim(0), N = T_ * k;
  const float* w = weights.defined() && weights.numel() > 0 ? ptr<float>(weights) : nullptr;
  const bool want_dw = dweights.defined() && dweights.numel() > 0;
  dispatch_act(dout.dtype(), "combine_rows_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (P > 0) {
      combine_rows_backward_dy_kernel<T><<<grid_rows(P), kThreads, 0, ctx.st>>>(
          ptr<T>(dout), ptr<int32_t>(perm), w, k, ptr<T>(dy), T_, C);
      MOEZERO_CUDA_CHECK_LAUNCH();
    }
    if (want_dw && N > 0) {
      constexpr int kWarpsPerBlock = kThreads / 32;
      combine_rows_backward_dw_kernel<T>
          <<<grid_rows((N + kWarpsPerBlock - 1) / kWarpsPerBlock), kThreads, 0, ctx.st>>>(
              ptr<T>(dout), ptr<T>(y), ptr<int32_t>(inv_perm), k, ptr<float>(dweights), N, y.dim(0),
              C);
      MOEZERO_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace moezero::cuda
