// kernels/cuda/cuda_gemm.cu — gemm and grouped_gemm on cuBLAS (cublasGemmEx /
// cublasGemmStridedBatchedEx, CUBLAS_COMPUTE_32F: fp32 accumulation; bf16 inputs use tensor
// cores, f32 inputs stay full fp32 — no TF32 — to match the CPU reference). The handle's math
// mode (kCublasMathMode, cuda_objects.h) forbids split-k partial sums in C's dtype: a bf16 C is
// one rounding of the fp32 sum, as on the CPU.
//
// Row-major through column-major cuBLAS: a row-major (m, n) C is a column-major (n, m) C^T,
// and C^T = op(B)^T op(A)^T, so cuBLAS is called with the operands swapped:
//   gemm(opB, opA, n, m, k, B, ldb, A, lda, C, ldc = n)
//   lda = trans_a ? m : k   (row length of A as stored)
//   ldb = trans_b ? k : n   (row length of B as stored)
// k == 0 is done here (C = beta * C) rather than trusting every cuBLAS path with empty sums.
// grouped_gemm is a loop of cublasGemmEx calls on the stream (experts: E is small).
#include <climits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moezero::cuda {

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: MOEZERO_THROW("gemm: dtype ", dtype_name(t), " not supported by cuBLAS here");
  }
}

int to_int(int64_t v, const char* what) {
  MOEZERO_CHECK(v >= 0 && v <= INT_MAX, "gemm: ", what, " = ", v, " exceeds cuBLAS int range");
  return static_cast<int>(v);
}

// One unbatched problem's dims from its (validated) tensors; batch_dim = 1 for batched views.
struct Dims {
  int64_t m, n, k;
};
Dims problem_dims(const Tensor& a, const Tensor& b, Transpose ta, Transpose tb, int lead) {
  const int64_t a0 = a.dim(lead), a1 = a.dim(lead + 1);
  const int64_t bl = b.rank() == 2 ? 0 : lead;
  const int64_t b1 = b.dim(static_cast<int>(bl) + 1);
  Dims d;
  d.m = ta == Transpose::Yes ? a1 : a0;
  d.k = ta == Transpose::Yes ? a0 : a1;
  d.n = tb == Transpose::Yes ? b.dim(static_cast<int>(bl)) : b1;
  return d;
}

cublasOperation_t cublas_op(Transpose t) { return t == Transpose::Yes ? CUBLAS_OP_T : CUBLAS_OP_N; }

// C = beta * C for an empty inner dimension (c of any float dtype, row-major contiguous).
template <typename T>
__global__ void scale_kernel(T* c, int64_t n, float beta) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    c[i] = beta == 0.0f ? from_f32<T>(0.0f) : from_f32<T>(beta * to_f32(c[i]));
  }
}

void scale_c(OpContext& ctx, const Tensor& c, int64_t elems, float beta) {
  if (elems == 0 || beta == 1.0f) return;
  dispatch_float(c.dtype(), "gemm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_kernel<T><<<grid_for(elems), kThreads, 0, ctx.st>>>(ptr<T>(c), elems, beta);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

// One (possibly strided-batched) cuBLAS call. batch == 1 uses cublasGemmEx.
void run_gemm(OpContext& ctx, const Tensor& a, const Tensor& b, const Tensor& c, Dims d,
              int64_t batch, bool b_shared, Transpose ta, Transpose tb, float alpha, float beta,
              const Tensor& c_whole) {
  if (d.m == 0 || d.n == 0 || batch == 0) return;
  if (d.k == 0) {
    scale_c(ctx, c_whole, batch * d.m * d.n, beta);
    return;
  }
  const int m = to_int(d.m, "m"), n = to_int(d.n, "n"), k = to_int(d.k, "k");
  const int lda = ta == Transpose::Yes ? m : k;
  const int ldb = tb == Transpose::Yes ? k : n;
  cublasHandle_t h = ctx.stream.cublas();
  if (batch == 1) {
    MOEZERO_CUDA_CHECK(cublasGemmEx(h, cublas_op(tb), cublas_op(ta), n, m, k, &alpha, b.data(),
                                    cuda_type(b.dtype()), ldb, a.data(), cuda_type(a.dtype()), lda,
                                    &beta, c.data(), cuda_type(c.dtype()), n, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
    return;
  }
  const long long stride_a = d.m * d.k, stride_c = d.m * d.n;
  const long long stride_b = b_shared ? 0 : d.k * d.n;
  MOEZERO_CUDA_CHECK(cublasGemmStridedBatchedEx(
      h, cublas_op(tb), cublas_op(ta), n, m, k, &alpha, b.data(), cuda_type(b.dtype()), ldb,
      stride_b, a.data(), cuda_type(a.dtype()), lda, stride_a, &beta, c.data(),
      cuda_type(c.dtype()), n, stride_c, to_int(batch, "batch"), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace

// a (m, k) | (k, m); b (k, n) | (n, k); c (m, n); batched: one more leading dim (b may stay 2-D).
void CudaOps::do_gemm(Stream& s, const GemmArgs& args) {
  OpContext ctx(s);
  const bool batched = args.a.rank() == 3;
  const int lead = batched ? 1 : 0;
  const Dims d = problem_dims(args.a, args.b, args.trans_a, args.trans_b, lead);
  const int64_t batch = batched ? args.a.dim(0) : 1;
  const bool b_shared = batched && args.b.rank() == 2;
  run_gemm(ctx, args.a, args.b, args.c, d, batch, b_shared, args.trans_a, args.trans_b, args.alpha,
           args.beta, args.c);
}

void CudaOps::do_grouped_gemm(Stream& s, std::span<const GemmProblem> problems, Transpose trans_a,
                              Transpose trans_b, float alpha, float beta) {
  OpContext ctx(s);
  for (const GemmProblem& p : problems) {
    const Dims d = problem_dims(p.a, p.b, trans_a, trans_b, 0);
    run_gemm(ctx, p.a, p.b, p.c, d, 1, false, trans_a, trans_b, alpha, beta, p.c);
  }
}

}  // namespace moezero::cuda
