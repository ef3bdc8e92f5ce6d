// kernels/cuda/cuda_reduce_optim.cu — sum_squares, find_nonfinite and AdamW.
//
// sum_squares: out[0] += sum(x^2) in two fixed-shape passes (per-block partials into a
// scratch buffer, then one block sums them in order), so the result is run-to-run
// deterministic — no float atomics — and needs no host sync.
// find_nonfinite: init, one grid-stride pass (per block: shared integer atomicMin of the first
// bad index and atomicAdd of the count, then one global atomic each; integer atomics are
// exact, so the result is deterministic), and a one-thread pass that writes -1 or the kind.
// adamw: torch.optim.AdamW (decoupled weight decay, bias correction as PyTorch's
// single-tensor path), one thread per element:
//   g = grad * grad_scale
//   p -= lr * wd * p
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
//   param_copy = p (optional, f32 or bf16)
// The bias corrections are computed on the host in double, as PyTorch does in Python floats.
#include <cmath>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moezero::cuda {

namespace {

constexpr int kReduceBlocks = 1024;  // fixed: the partial count (and so the order) never varies

template <typename T>
__global__ void sum_squares_partial_kernel(const T* x, int64_t n, float* partials) {
  __shared__ float scratch[32];
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = to_f32(x[i]);
    acc = fmaf(v, v, acc);
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// One block: out[0] += sum(partials[0..count)).
__global__ void sum_partials_kernel(const float* partials, int count, float* out) {
  __shared__ float scratch[32];
  float acc = 0.0f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) out[0] += acc;
}

constexpr unsigned long long kNoIndex = ~0ull;

__global__ void nonfinite_init_kernel(unsigned long long* r) {
  r[0] = kNoIndex;
  r[1] = 0;
  r[2] = 0;
}

template <typename T>
__global__ void nonfinite_scan_kernel(const T* x, int64_t n, unsigned long long* r) {
  __shared__ unsigned long long block_first, block_count;
  if (threadIdx.x == 0) {
    block_first = kNoIndex;
    block_count = 0;
  }
  __syncthreads();
  unsigned long long first = kNoIndex, count = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    if (!isfinite(to_f32(x[i]))) {
      ++count;
      if (first == kNoIndex) first = static_cast<unsigned long long>(i);  // indices increase
    }
  }
  if (count > 0) {
    atomicMin(&block_first, first);
    atomicAdd(&block_count, count);
  }
  __syncthreads();
  if (threadIdx.x == 0 && block_count > 0) {
    atomicMin(&r[0], block_first);
    atomicAdd(&r[1], block_count);
  }
}

template <typename T>
__global__ void nonfinite_finish_kernel(const T* x, unsigned long long* r) {
  long long* out = reinterpret_cast<long long*>(r);
  if (r[0] == kNoIndex) {
    out[0] = -1;
    out[2] = static_cast<long long>(NonFiniteKind::None);
    return;
  }
  const float v = to_f32(x[r[0]]);
  out[2] = static_cast<long long>(isnan(v)   ? NonFiniteKind::NaN
                                  : v > 0.0f ? NonFiniteKind::PosInf
                                             : NonFiniteKind::NegInf);
}

struct AdamWScalars {
  float lr, beta1, beta2, eps, weight_decay, grad_scale;
  float step_size;        // lr / (1 - beta1^t)
  float bias_corr2_sqrt;  // sqrt(1 - beta2^t)
};

// C: param_copy element type (unused when copy == nullptr); G: gradient element type (f32, or
// bf16 widened exactly).
template <typename C, typename G>
__global__ void adamw_kernel(float* __restrict__ param, const G* __restrict__ grad,
                             float* __restrict__ m1, float* __restrict__ m2, C* copy, int64_t n,
                             AdamWScalars a) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = to_f32(grad[i]) * a.grad_scale;
    float p = param[i];
    p -= a.lr * a.weight_decay * p;
    const float m = a.beta1 * m1[i] + (1.0f - a.beta1) * g;
    const float v = a.beta2 * m2[i] + (1.0f - a.beta2) * g * g;
    const float denom = sqrtf(v) / a.bias_corr2_sqrt + a.eps;
    p -= a.step_size * (m / denom);
    param[i] = p;
    m1[i] = m;
    m2[i] = v;
    if (copy != nullptr) copy[i] = from_f32<C>(p);
  }
}

}  // namespace

void CudaOps::do_sum_squares(Stream& s, const Tensor& x, const Tensor& out) {
  OpContext ctx(s);
  const int64_t n = x.numel();
  if (n == 0) return;
  Buffer partials = ctx.scratch(kReduceBlocks * sizeof(float), "sum_squares partials");
  dispatch_float(x.dtype(), "sum_squares", [&](auto tag) {
    using T = typename decltype(tag)::type;
    sum_squares_partial_kernel<T><<<kReduceBlocks, kThreads, 0, ctx.st>>>(
        ptr<T>(x), n, static_cast<float*>(partials.data()));
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
  sum_partials_kernel<<<1, kThreads, 0, ctx.st>>>(static_cast<const float*>(partials.data()),
                                                  kReduceBlocks, ptr<float>(out));
  MOEZERO_CUDA_CHECK_LAUNCH();
}

void CudaOps::do_find_nonfinite(Stream& s, const Tensor& x, const Tensor& result) {
  OpContext ctx(s);
  const int64_t n = x.numel();
  auto* r = ptr<unsigned long long>(result);
  nonfinite_init_kernel<<<1, 1, 0, ctx.st>>>(r);
  MOEZERO_CUDA_CHECK_LAUNCH();
  dispatch_float(x.dtype(), "find_nonfinite", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (n > 0) {
      nonfinite_scan_kernel<T><<<grid_for(n), kThreads, 0, ctx.st>>>(ptr<T>(x), n, r);
      MOEZERO_CUDA_CHECK_LAUNCH();
    }
    nonfinite_finish_kernel<T><<<1, 1, 0, ctx.st>>>(ptr<T>(x), r);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_adamw(Stream& s, const AdamWArgs& args) {
  OpContext ctx(s);
  const int64_t n = args.param.numel();
  if (n == 0) return;
  const double t = static_cast<double>(args.step);
  AdamWScalars a{};
  a.lr = args.lr;
  a.beta1 = args.beta1;
  a.beta2 = args.beta2;
  a.eps = args.eps;
  a.weight_decay = args.weight_decay;
  a.grad_scale = args.grad_scale;
  a.step_size = static_cast<float>(args.lr / (1.0 - std::pow(static_cast<double>(args.beta1), t)));
  a.bias_corr2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(args.beta2), t)));
  float* p = ptr<float>(args.param);
  float* m1 = ptr<float>(args.exp_avg);
  float* m2 = ptr<float>(args.exp_avg_sq);
  const unsigned grid = grid_for(n);
  auto launch = [&](auto* g) {
    using G = std::remove_const_t<std::remove_pointer_t<decltype(g)>>;
    if (!args.param_copy.defined() || args.param_copy.numel() == 0) {
      adamw_kernel<float, G><<<grid, kThreads, 0, ctx.st>>>(p, g, m1, m2, nullptr, n, a);
    } else if (args.param_copy.dtype() == DType::F32) {
      adamw_kernel<float, G>
          <<<grid, kThreads, 0, ctx.st>>>(p, g, m1, m2, ptr<float>(args.param_copy), n, a);
    } else if (args.param_copy.dtype() == DType::BF16) {
      adamw_kernel<__nv_bfloat16, G>
          <<<grid, kThreads, 0, ctx.st>>>(p, g, m1, m2, ptr<__nv_bfloat16>(args.param_copy), n, a);
    } else {
      MOEZERO_THROW("adamw: param_copy dtype ", dtype_name(args.param_copy.dtype()),
                    " not supported (f32, bf16)");
    }
  };
  if (args.grad.dtype() == DType::BF16)
    launch(static_cast<const __nv_bfloat16*>(ptr<__nv_bfloat16>(args.grad)));
  else
    launch(static_cast<const float*>(ptr<float>(args.grad)));
  MOEZERO_CUDA_CHECK_LAUNCH();
}

// One kernel per entry, in order (the same launches as one adamw per entry).
void CudaOps::do_adamw_multi(Stream& s, std::span<const AdamWArgs> tensors) {
  for (const AdamWArgs& a : tensors) do_adamw(s, a);
}

}  // namespace moezero::cuda
