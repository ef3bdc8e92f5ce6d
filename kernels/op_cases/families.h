// kernels/op_cases/families.h — internal: the per-family builders of the op-case table (one
// .cpp each) and small shared helpers for writing cases. Not for consumers: use op_case.h.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "kernels/op_cases/op_case.h"

namespace moezero::cases {

void add_linear_cases(std::vector<OpCase>& out);       // gemm, grouped_gemm, attention
void add_elementwise_cases(std::vector<OpCase>& out);  // add .. find_nonfinite, swiglu, adamw
void add_norm_cases(std::vector<OpCase>& out);         // embedding, rmsnorm, rope
void add_router_cases(std::vector<OpCase>& out);       // softmax, topk, CE, logsumexp, cols
void add_moe_cases(std::vector<OpCase>& out);          // histogram, sort, gather/combine rows
void add_quant_cases(std::vector<OpCase>& out);        // int8 block quantise / dequantise

// The size classes, short, as the case tables of every family write them.
inline constexpr SizeClass kT = SizeClass::Test, kC = SizeClass::CpuBench, kG = SizeClass::GpuBench;

// "(3, 17)"-style shape text and "f32" dtype text for case names.
inline std::string dt(DType t) { return std::string(dtype_name(t)); }
std::string shape_text(std::initializer_list<int64_t> dims);

// Bytes of every tensor of c, each counted once (reads + writes of a streaming op).
double tensor_bytes(const OpCase& c);

// Tolerance of an output that sums n_terms fp32 products of magnitude ~out_scale. f32: fp32
// arithmetic against the f64 reference, ~sqrt(n) * 2^-24, bounded by 1e-5 * sqrt(n). bf16:
// inputs were rounded before the reference, so what remains is the output's RNE rounding
// (2^-9 relative) plus fp32 accumulation: rtol 2^-8.
Tol sum_tol(DType t, int64_t n_terms, double out_scale = 1.0);

// A sort of expert ids in float64 terms (the reference of sort_by_expert): perm, inv_perm,
// offsets as in core/ops.def.
void ref_sort_by_expert(const std::vector<double>& ids, int num_experts, std::vector<double>* perm,
                        std::vector<double>* inv_perm, std::vector<double>* offsets);

}  // namespace moezero::cases
