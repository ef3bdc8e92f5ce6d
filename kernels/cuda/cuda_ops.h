// kernels/cuda/cuda_ops.h — CudaOps: the op table of core/ops.h on a GPU.
//
// The public methods of Ops (core/ops.cpp) validate shapes and dtypes; the do_* methods here
// assume valid arguments. One .cu file per op family defines its members:
//   cuda_gemm.cu              gemm, grouped_gemm (cuBLAS, fp32 compute)
//   cuda_elementwise.cu       add, mul, scale, axpy, fill, cast, swiglu
//   cuda_reduce_optim.cu      sum_squares, find_nonfinite, adamw, adamw_multi
//   cuda_embedding.cu         embedding forward/backward (backward: sort + segmented sum)
//   cuda_norm_rope.cu         rmsnorm forward/backward, rope
//   cuda_attention.cu         causal GQA attention forward/backward
//   cuda_softmax_topk_ce.cu   softmax, logsumexp, topk, cross-entropy
//   cuda_moe.cu               expert_histogram, sort_by_expert (CUB radix sort)
//   cuda_moe_rows.cu          gather_rows, combine_rows, combine_rows_backward
//   cuda_cols.cu              gather_cols, scatter_add_cols (the router's (N, E) <-> (N, k))
//   cuda_quant.cu             quantize_int8_blocks, dequantize_int8_blocks (ZeRO++ int8 wire)
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
  // Every op of core/ops.def; each .cu family file listed above defines its members.
#define MOEZERO_OP(name, params, args) void do_##name params override;
#include "core/ops.def"
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
