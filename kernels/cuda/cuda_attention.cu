// kernels/cuda/cuda_attention.cu — causal attention with grouped-query heads, forward and
// backward. Straightforward and exact rather than fast (no tiling, no tensor cores): one block
// per row, the row of scores in shared memory, fp32 throughout.
//
// q (B, T, Hq, D), k/v (B, T, Hkv, D), query head h uses kv head h / (Hq / Hkv); scale 1/sqrt(D).
// forward, block (t, h, b):  s_j = scale q_t.k_j (j <= t); p = softmax(s); out_t = sum_j p_j v_j;
//   lse[b, h, t] = max + log(sum exp(s - max)).
// backward (P_tj = exp(s_tj - lse_t), Delta_t = dout_t . out_t, dS_tj = P_tj (dout_t.v_j -
// Delta_t)):
//   kernel A, block per query row (t, h, b): dq_t = scale sum_{j<=t} dS_tj k_j; saves Delta.
//   kernel B, block per key row (j, hkv, b): for every query head h of the group,
//     dv_j += sum_{t>=j} P_tj dout_t;  dk_j += scale sum_{t>=j} dS_tj q_t.
//   Each output row is owned by one block: no atomics, deterministic.
// Shared memory grows with T (forward: T + D floats; backward B: 2T + 4D): long sequences use
// the opt-in limit of the device (227 KiB on H100/H200, T up to ~28k); beyond it, the op throws.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moezero::cuda {

namespace {

constexpr int kAttnThreads = 128;  // 4 warps

struct AttnShape {
  int64_t B, T, Hq, Hkv, D;
  float scale;
  __device__ int64_t q_off(int64_t b, int64_t t, int64_t h) const {
    return ((b * T + t) * Hq + h) * D;
  }
  __device__ int64_t kv_off(int64_t b, int64_t t, int64_t h) const {
    return ((b * T + t) * Hkv + h) * D;
  }
  __device__ int64_t lse_off(int64_t b, int64_t h, int64_t t) const { return (b * Hq + h) * T + t; }
};

// Dot of a shared fp32 row with a global row, by one warp; result in every lane.
template <typename T>
__device__ __forceinline__ float warp_dot(const float* a_shared, const T* b, int64_t D) {
  float acc = 0.0f;
  for (int64_t d = threadIdx.x & 31; d < D; d += 32) acc = fmaf(a_shared[d], to_f32(b[d]), acc);
  return warp_sum(acc);
}

// Dynamic shared memory: q_s[D] | scores[t + 1].
template <typename T>
__global__ void attention_forward_kernel(const T* q, const T* k, const T* v, T* out, float* lse,
                                         AttnShape sh) {
  extern __shared__ float smem[];
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t hk = h / (sh.Hq / sh.Hkv), D = sh.D;
  float* q_s = smem;
  float* scores = smem + D;
  const T* qr = q + sh.q_off(b, t, h);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) q_s[d] = to_f32(qr[d]) * sh.scale;
  __syncthreads();

  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int64_t j = warp; j <= t; j += nwarps) {
    const float sc = warp_dot(q_s, k + sh.kv_off(b, j, hk), D);
    if ((threadIdx.x & 31) == 0) scores[j] = sc;
  }
  __syncthreads();

  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) mx = fmaxf(mx, scores[j]);
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += blockDim.x) {
    const float p = expf(scores[j] - mx);
    scores[j] = p;
    sum += p;
  }
  sum = block_sum(sum, scratch);  // its barriers also publish the scores[] writes
  const float inv = 1.0f / sum;

  T* o = out + sh.q_off(b, t, h);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j <= t; ++j) acc = fmaf(scores[j], to_f32(v[sh.kv_off(b, j, hk) + d]), acc);
    o[d] = from_f32<T>(acc * inv);
  }
  if (threadIdx.x == 0) lse[sh.lse_off(b, h, t)] = mx + logf(sum);
}

// Kernel A. Dynamic shared memory: q_s[D] | do_s[D] | ds[t + 1]. Writes delta (B, Hq, T).
template <typename T>
__global__ void attention_backward_dq_kernel(const T* q, const T* k, const T* v, const T* out,
                                             const float* lse, const T* dout, T* dq, float* delta,
                                             AttnShape sh) {
  extern __shared__ float smem[];
  __shared__ float scratch[32];
  const int64_t t = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t hk = h / (sh.Hq / sh.Hkv), D = sh.D;
  float* q_s = smem;
  float* do_s = smem + D;
  float* ds = smem + 2 * D;
  const int64_t qo = sh.q_off(b, t, h);
  float dlt = 0.0f;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    q_s[d] = to_f32(q[qo + d]) * sh.scale;
    const float g = to_f32(dout[qo + d]);
    do_s[d] = g;
    dlt = fmaf(g, to_f32(out[qo + d]), dlt);
  }
  dlt = block_sum(dlt, scratch);  // barriers publish q_s, do_s
  const float l = lse[sh.lse_off(b, h, t)];

  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int64_t j = warp; j <= t; j += nwarps) {
    const int64_t ko = sh.kv_off(b, j, hk);
    const float s = warp_dot(q_s, k + ko, D);
    const float dp = warp_dot(do_s, v + ko, D);
    if ((threadIdx.x & 31) == 0) ds[j] = expf(s - l) * (dp - dlt);
  }
  __syncthreads();

  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int64_t j = 0; j <= t; ++j) acc = fmaf(ds[j], to_f32(k[sh.kv_off(b, j, hk) + d]), acc);
    dq[qo + d] = from_f32<T>(acc * sh.scale);
  }
  if (threadIdx.x == 0) delta[sh.lse_off(b, h, t)] = dlt;
}

// Kernel B. Dynamic shared memory: k_s[D] | v_s[D] | dk_acc[D] | dv_acc[D] | p[T - j] | ds[T - j].
template <typename T>
__global__ void attention_backward_dkdv_kernel(const T* q, const T* k, const T* v, const float* lse,
                                               const T* dout, const float* delta, T* dk, T* dv,
                                               AttnShape sh) {
  extern __shared__ float smem[];
  const int64_t j = blockIdx.x, hk = blockIdx.y, b = blockIdx.z;
  const int64_t D = sh.D, group = sh.Hq / sh.Hkv, rows = sh.T - j;
  float* k_s = smem;
  float* v_s = smem + D;
  float* dk_acc = smem + 2 * D;
  float* dv_acc = smem + 3 * D;
  float* p = smem + 4 * D;
  float* ds = p + rows;
  const int64_t ko = sh.kv_off(b, j, hk);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    k_s[d] = to_f32(k[ko + d]) * sh.scale;
    v_s[d] = to_f32(v[ko + d]);
    dk_acc[d] = 0.0f;
    dv_acc[d] = 0.0f;
  }
  __syncthreads();

  const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = hk * group + g;
    for (int64_t i = warp; i < rows; i += nwarps) {
      const int64_t t = j + i, qo = sh.q_off(b, t, h);
      const float s = warp_dot(k_s, q + qo, D);
      const float dp = warp_dot(v_s, dout + qo, D);
      if ((threadIdx.x & 31) == 0) {
        const float pr = expf(s - lse[sh.lse_off(b, h, t)]);
        p[i] = pr;
        ds[i] = pr * (dp - delta[sh.lse_off(b, h, t)]);
      }
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float acc_v = 0.0f, acc_k = 0.0f;
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t qo = sh.q_off(b, j + i, h) + d;
        acc_v = fmaf(p[i], to_f32(dout[qo]), acc_v);
        acc_k = fmaf(ds[i], to_f32(q[qo]), acc_k);
      }
      dv_acc[d] += acc_v;
      dk_acc[d] += acc_k * sh.scale;
    }
    __syncthreads();  // p/ds are rewritten for the next head
  }
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    dk[ko + d] = from_f32<T>(dk_acc[d]);
    dv[ko + d] = from_f32<T>(dv_acc[d]);
  }
}

AttnShape attn_shape(const Tensor& q, const Tensor& k) {
  AttnShape sh{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), 0.0f};
  sh.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.D)));
  return sh;
}

dim3 attn_grid(int64_t rows, int64_t heads, int64_t batch) {
  MOEZERO_CHECK(rows <= INT_MAX && heads <= 65535 && batch <= 65535,
                "attention: grid (T, heads, B) = (", rows, ", ", heads, ", ", batch,
                ") exceeds the launch limits");
  return dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads),
              static_cast<unsigned>(batch));
}

// Raises the kernel's dynamic shared-memory limit when `bytes` needs it; throws if the device
// cannot provide it.
template <typename Kernel>
void ensure_smem(OpContext& ctx, Kernel kernel, size_t bytes, const char* op, int64_t T) {
  if (bytes <= 48 * 1024) return;
  int optin = 0;
  MOEZERO_CUDA_CHECK(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx.device.index()));
  MOEZERO_CHECK(bytes + 32 * sizeof(float) <= static_cast<size_t>(optin), op, ": T = ", T,
                " needs ", bytes, " bytes of shared memory per block; the device allows ", optin);
  MOEZERO_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(bytes)));
}

}  // namespace

void CudaOps::do_attention_forward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& lse) {
  OpContext ctx(s);
  const AttnShape sh = attn_shape(q, k);
  if (sh.B == 0 || sh.T == 0 || sh.Hq == 0) return;
  const size_t smem = static_cast<size_t>(sh.D + sh.T) * sizeof(float);
  dispatch_act(q.dtype(), "attention_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ensure_smem(ctx, attention_forward_kernel<T>, smem, "attention_forward", sh.T);
    attention_forward_kernel<T><<<attn_grid(sh.T, sh.Hq, sh.B), kAttnThreads, smem, ctx.st>>>(
        ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(out), ptr<float>(lse), sh);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_attention_backward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const Tensor& dout,
                                    const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  OpContext ctx(s);
  const AttnShape sh = attn_shape(q, k);
  if (sh.B == 0 || sh.T == 0 || sh.Hq == 0) return;
  Buffer delta = ctx.scratch(static_cast<size_t>(sh.B * sh.Hq * sh.T) * sizeof(float),
                             "attention_backward delta");
  auto* dl = static_cast<float*>(delta.data());
  const size_t smem_a = static_cast<size_t>(2 * sh.D + sh.T) * sizeof(float);
  const size_t smem_b = static_cast<size_t>(4 * sh.D + 2 * sh.T) * sizeof(float);
  dispatch_act(q.dtype(), "attention_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    ensure_smem(ctx, attention_backward_dq_kernel<T>, smem_a, "attention_backward", sh.T);
    ensure_smem(ctx, attention_backward_dkdv_kernel<T>, smem_b, "attention_backward", sh.T);
    attention_backward_dq_kernel<T><<<attn_grid(sh.T, sh.Hq, sh.B), kAttnThreads, smem_a, ctx.st>>>(
        ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<T>(out), ptr<float>(lse), ptr<T>(dout), ptr<T>(dq), dl,
        sh);
    MOEZERO_CUDA_CHECK_LAUNCH();
    attention_backward_dkdv_kernel<T>
        <<<attn_grid(sh.T, sh.Hkv, sh.B), kAttnThreads, smem_b, ctx.st>>>(
            ptr<T>(q), ptr<T>(k), ptr<T>(v), ptr<float>(lse), ptr<T>(dout), dl, ptr<T>(dk),
            ptr<T>(dv), sh);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace moezero::cuda
