// kernels/cuda/cuda_ops.h — CudaOps: the op table of core/ops.h on a GPU.
//
// The public methods of Ops (core/ops.cpp) validate shapes and dtypes; the do_* methods here
// assume valid arguments. One .cu file per op family defines its members:
//   cuda_gemm.cu              gemm, grouped_gemm (cuBLAS, fp32 compute)
//   cuda_elementwise.cu       add, scale, axpy, fill, cast, swiglu
//   cuda_reduce_optim.cu      sum_squares, find_nonfinite, adamw
//   cuda_embedding.cu         embedding forward/backward (backward: sort + segmented sum)
//   cuda_norm_rope.cu         rmsnorm forward/backward, rope
//   cuda_attention.cu         causal GQA attention forward/backward
//   cuda_softmax_topk_ce.cu   softmax, topk, cross-entropy
//   cuda_moe.cu               expert_histogram, sort_by_expert (CUB radix sort)
//   cuda_moe_rows.cu          gather_rows, combine_rows, combine_rows_backward
//
// Determinism: every op is run-to-run deterministic on a given GPU: no floating-point
// atomics anywhere (weight-gradient reductions use fixed-order partial sums; embedding
// backward sorts token ids; attention backward computes dk/dv per key row). Integer atomics
// (histograms) are exact.
// In-kernel errors (ids out of range): the element is treated as absent (zero row / dropped),
// and the stream's error record is set, so the op fails on the stream (cuda_objects.h).
#pragma once

#include <cstdint>

#include "core/ops.h"

namespace moezero::cuda {

struct OpContext;

class CudaOps final : public Ops {
 protected:
  // Declared in the order of core/ops.h.
  void do_gemm(Stream& s, const GemmArgs& args) override;
  void do_grouped_gemm(Stream& s, std::span<const GemmProblem> problems, Transpose trans_a,
                       Transpose trans_b, float alpha, float beta) override;
  void do_add(Stream& s, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void do_scale(Stream& s, const Tensor& x, float alpha) override;
  void do_axpy(Stream& s, float alpha, const Tensor& x, const Tensor& y) override;
  void do_fill(Stream& s, const Tensor& x, double value) override;
  void do_cast(Stream& s, const Tensor& src, const Tensor& dst) override;
  void do_sum_squares(Stream& s, const Tensor& x, const Tensor& out) override;
  void do_find_nonfinite(Stream& s, const Tensor& x, const Tensor& result) override;
  void do_embedding_forward(Stream& s, const Tensor& ids, const Tensor& table,
                            const Tensor& out) override;
  void do_embedding_backward(Stream& s, const Tensor& ids, const Tensor& dout,
                             const Tensor& dtable) override;
  void do_rmsnorm_forward(Stream& s, const Tensor& x, const Tensor& w, float eps, const Tensor& out,
                          const Tensor& rstd) override;
  void do_rmsnorm_backward(Stream& s, const Tensor& dout, const Tensor& x, const Tensor& w,
                           const Tensor& rstd, const Tensor& dx, const Tensor& dw) override;
  void do_rope(Stream& s, const Tensor& x, const Tensor& positions, float base, RopeDirection dir,
               const Tensor& out) override;
  void do_attention_forward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& out, const Tensor& lse) override;
  void do_attention_backward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& out, const Tensor& lse, const Tensor& dout,
                             const Tensor& dq, const Tensor& dk, const Tensor& dv) override;
  void do_swiglu_forward(Stream& s, const Tensor& gate, const Tensor& up,
                         const Tensor& out) override;
  void do_swiglu_backward(Stream& s, const Tensor& gate, const Tensor& up, const Tensor& dout,
                          const Tensor& dgate, const Tensor& dup) override;
  void do_softmax_forward(Stream& s, const Tensor& x, const Tensor& out) override;
  void do_softmax_backward(Stream& s, const Tensor& y, const Tensor& dy, const Tensor& dx) override;
  void do_topk(Stream& s, const Tensor& x, int k, const Tensor& values,
               const Tensor& indices) override;
  void do_cross_entropy_forward(Stream& s, const Tensor& logits, const Tensor& targets,
                                const Tensor& losses) override;
  void do_cross_entropy_backward(Stream& s, const Tensor& logits, const Tensor& targets,
                                 const Tensor& dlosses, const Tensor& dlogits) override;
  void do_adamw(Stream& s, const AdamWArgs& args) override;
  void do_expert_histogram(Stream& s, const Tensor& expert_ids, int num_experts,
                           const Tensor& counts) override;
  void do_sort_by_expert(Stream& s, const Tensor& expert_ids, int num_experts, const Tensor& perm,
                         const Tensor& inv_perm, const Tensor& offsets) override;
  void do_gather_rows(Stream& s, const Tensor& x, const Tensor& perm, int k,
                      const Tensor& out) override;
  void do_combine_rows(Stream& s, const Tensor& y, const Tensor& inv_perm, const Tensor& weights,
                       int k, const Tensor& out) override;
  void do_combine_rows_backward(Stream& s, const Tensor& dout, const Tensor& y, const Tensor& perm,
                                const Tensor& inv_perm, const Tensor& weights, int k,
                                const Tensor& dy, const Tensor& dweights) override;
};

// Stable sort of n (key, value) int32 pairs by key, keys in [0, 2^end_bit). The one CUB radix
// sort instantiation of the backend (cuda_moe.cu); used by sort_by_expert and embedding
// backward. Scratch comes from the device allocator on ctx's stream. n may be 0.
void sort_pairs_i32(OpContext& ctx, const int32_t* keys_in, int32_t* keys_out,
                    const int32_t* vals_in, int32_t* vals_out, int64_t n, int end_bit);

// Number of bits needed to represent `max_key` (>= 1).
inline int key_bits(int64_t max_key) {
  int b = 1;
  while (b < 31 && (int64_t{1} << b) <= max_key) ++b;
  return b;
}

}  // namespace moezero::cuda
