// kernels/cuda/cuda_cols.cu — the router's column gathers between (R, C) and (R, k) rows:
//   gather_cols:      out[r, j] = x[r, idx[r, j]] (0 for idx -1)          out f32 (R, k)  `=`
//   scatter_add_cols: out[r, idx[r, j]] += src[r, j] (skipping -1)        out f32 (R, C)  `+=`
// One thread per row walks its k entries in increasing j: no atomics, deterministic, and the
// same order of additions as the CPU backend. An index outside [0, C) that is not -1 reports
// kGatherColsIdx / kScatterAddColsIdx on the stream and is treated as absent.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moezero::cuda {

namespace {

__device__ __forceinline__ bool col_ok(int32_t e, int64_t C, int64_t where, int code,
                                       KernelErrorSink err) {
  if (e == -1) return false;
  if (e < 0 || e >= C) {
    report_kernel_error(err, code, where, e, C);
    return false;
  }
  return true;
}

__global__ void gather_cols_kernel(const float* x, const int32_t* idx, float* out, int64_t R,
                                   int64_t C, int64_t k, KernelErrorSink err) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (r >= R) return;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t a = r * k + j;
    const int32_t e = idx[a];
    out[a] = col_ok(e, C, a, kGatherColsIdx, err) ? x[r * C + e] : 0.0f;
  }
}

__global__ void scatter_add_cols_kernel(const float* src, const int32_t* idx, float* out, int64_t R,
                                        int64_t C, int64_t k, KernelErrorSink err) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (r >= R) return;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t a = r * k + j;
    const int32_t e = idx[a];
    if (col_ok(e, C, a, kScatterAddColsIdx, err)) out[r * C + e] += src[a];
  }
}

}  // namespace

void CudaOps::do_gather_cols(Stream& s, const Tensor& x, const Tensor& idx, const Tensor& out) {
  OpContext ctx(s);
  const int64_t R = idx.dim(0), k = idx.dim(1), C = x.dim(1);
  if (R == 0 || k == 0) return;
  gather_cols_kernel<<<grid_for(R), kThreads, 0, ctx.st>>>(ptr<float>(x), ptr<int32_t>(idx),
                                                           ptr<float>(out), R, C, k, ctx.err());
  MOEZERO_CUDA_CHECK_LAUNCH();
}

void CudaOps::do_scatter_add_cols(Stream& s, const Tensor& src, const Tensor& idx,
                                  const Tensor& out) {
  OpContext ctx(s);
  const int64_t R = idx.dim(0), k = idx.dim(1), C = out.dim(1);
  if (R == 0 || k == 0) return;
  scatter_add_cols_kernel<<<grid_for(R), kThreads, 0, ctx.st>>>(
      ptr<float>(src), ptr<int32_t>(idx), ptr<float>(out), R, C, k, ctx.err());
  MOEZERO_CUDA_CHECK_LAUNCH();
}

}  // namespace moezero::cuda
