// moe/local_experts.h — the expert-compute step of the MoE layer: this rank's Epr = E / ep
// experts (SwiGLU FFNs, one ZeRO parameter group each), run over the rows the token dispatcher
// received for them (moe/token_dispatcher.h), forward and backward.
//
// Only ACTIVE experts (some rank routed a token to them: the globally agreed set) are touched:
// each is acquired (an all-gather over its EDP group, which every member issues because the
// active set is agreed), run over its row blocks (one per source peer), released and, in
// backward, its gradient reduced. The order of those calls is what keeps the collectives of all
// ranks matched and the shard cache in agreement; see RunOrder.
//
// Which experts are gathered, when, and when they are released is the gather strategy's
// (MoeOptions::gather, zero.moe_gather: moe/gather_strategy.h); this class computes the waves of
// experts the strategy hands it, and names their parameter groups.
//
// Expert group j (provider index first_group + j): "layers.l.experts.e", e = ep_rank·Epr + j,
// {...experts.e.w1.weight (F, C) (gate), w2 (C, F) (down), w3 (F, C) (up)} (GroupKind::Expert).
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.h"
#include "core/param_group.h"
#include "layers/module.h"
#include "moe/gather_strategy.h"
#include "moe/moe_runtime.h"
#include "moe/token_dispatcher.h"

namespace moezero {
enum class TracePass : uint8_t;
}

namespace moezero::moe {

class LocalExperts {
 public:
  // [in] layer: decoder layer index; [in] first_group: provider index of local expert 0.
  LocalExperts(const ModelConfig& cfg, const MoeRuntime& rt, int layer, int first_group);

  int count() const { return experts_per_rank_; }                                // Epr
  int group(int j) const { return first_group_ + j; }                            // provider index
  int expert(int j) const { return rt_.comms.ep_rank * experts_per_rank_ + j; }  // global id
  int layer() const { return layer_; }                                           // decoder layer
  // zero.reshard_after_forward (the experts strategy): false keeps an active expert acquired in
  // forward until its backward, without a byte limit (ParamProvider::hold).
  bool reshard_after_forward() const { return rt_.options.reshard_after_forward; }
  std::vector<GroupSpec> param_groups() const;

  // [in] x (R, C): the received rows, laid out as `rows` says; [in] active (Epr): agreed;
  // [out] gate, up (R, F): pre-activations, allocated here (kept for backward);
  // returns y (R, C) `=` the expert outputs (rows of inactive experts: unwritten; there are none).
  // [in,out] held (Epr or empty), the gather strategy's: fsdp: forward fills it with the acquired
  // experts, backward takes and releases them; experts with reshard_after_forward=false: slot j
  // holds expert j when it was kept (undefined Tensor otherwise); empty otherwise.
  TensorBuffer forward(const layers::ModuleContext& ctx, ParamProvider& params,
                       const DispatchState& rows, const std::vector<char>& active, const Tensor& x,
                       TensorBuffer& gate, TensorBuffer& up, std::vector<Tensor>& held) const;
  // Full activation checkpointing: forward() again in backward, with the same results.
  // Experts held since forward ([in,out] held) run without an acquire (ParamProvider::use_held);
  // the other active ones go through the gather strategy's forward (which may hold them too:
  // they join `held`). With nothing held, exactly forward()'s acquires.
  TensorBuffer recompute(const layers::ModuleContext& ctx, ParamProvider& params,
                         const DispatchState& rows, const std::vector<char>& active,
                         const Tensor& x, TensorBuffer& gate, TensorBuffer& up,
                         std::vector<Tensor>& held) const;
  // [in] dy (R, C); x, gate, up: forward's; returns dx (R, C) `=`. Writes (`+=`) each active
  // expert's parameter gradient and marks it ready (grad_ready) before releasing the expert;
  // with zero.expert_grads=all then marks each inactive expert's zero gradient ready, id order.
  TensorBuffer backward(const layers::ModuleContext& ctx, ParamProvider& params,
                        const DispatchState& rows, const std::vector<char>& active, const Tensor& x,
                        const Tensor& gate, const Tensor& up, const Tensor& dy,
                        std::vector<Tensor>& held) const;
  // The provider groups of all local experts (a block, for prefetch_block).
  std::vector<int> block_groups() const;
  // Every local expert, one coalesced gather (a no-op when prefetched), acquired in id order;
  // release_block releases them all (the block strategies, moe/gather_block.h).
  std::vector<Tensor> acquire_block(const layers::ModuleContext& ctx, ParamProvider& params) const;
  void release_block(const layers::ModuleContext& ctx, ParamProvider& params) const;

 private:
  // Several experts' compute as grouped GEMMs (Ops::grouped_gemm: every ready expert's row
  // blocks in one call per GEMM of the SwiGLU FFN, elementwise ops over merged row ranges).
  // Each output element is computed by the same kernel call shape as one GEMM per expert and
  // row block, and weight gradients accumulate their row blocks in block order, so the results
  // are bit-identical to running the experts one by one. Tracing runs this same path: one
  // "experts" span around the grouped calls, per-expert spans derived from it (experts_span).
  using ExpertParams = ExpertWeights;  // one wave's experts (moe/gather_strategy.h)
  void forward_experts(const layers::ModuleContext& ctx, const DispatchState& rows,
                       const std::vector<ExpertParams>& ex, const Tensor& x, const Tensor& gate,
                       const Tensor& up, const Tensor& act, const Tensor& y) const;
  void backward_experts(const layers::ModuleContext& ctx, const DispatchState& rows,
                        const std::vector<ExpertParams>& ex, const Tensor& x, const Tensor& gate,
                        const Tensor& up, const Tensor& dy, const Tensor& act, const Tensor& dact,
                        const Tensor& dgate, const Tensor& dup, const Tensor& dx) const;
  // While tracing, a span around the grouped compute of `ex` (TraceRecorder::begin_experts:
  // each expert's rows of this micro-batch and its GEMM flops); -1 otherwise.
  int experts_span(const layers::ModuleContext& ctx, const DispatchState& rows,
                   const std::vector<ExpertParams>& ex, TracePass pass) const;

  ModelConfig cfg_;
  MoeRuntime rt_;
  int layer_, first_group_, experts_per_rank_;
};

}  // namespace moezero::moe
