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
// zero.moe_gather leaf/fsdp (MoeRuntime::gather): the incumbents' way instead. Every local
// expert, active or not, is gathered as one coalesced collective (ParamProvider::prefetch_block)
// and acquired in id order; only the active ones are computed. Leaf releases them after each
// pass (forward and backward gather again); fsdp keeps forward's parameters (`held`) until the
// backward of the same micro-batch releases them. Routing, compute and reductions are the same.
//
// moe_gather=experts with zero.reshard_after_forward=false: forward keeps each active expert it
// acquired (`held`, slot j) instead of releasing it, while ParamProvider::may_hold allows (the
// live limit); backward runs the held ones without a gather (ParamProvider::use_held), among the
// first ones, and releases every expert after its gradient, in the same order as before.
//
// Expert group j (provider index first_group + j): "layers.l.experts.e", e = ep_rank·Epr + j,
// {...experts.e.w1.weight (F, C) (gate), w2 (C, F) (down), w3 (F, C) (up)} (GroupKind::Expert).
#pragma once

#include <cstdint>
#include <vector>

#include "core/config.h"
#include "core/param_group.h"
#include "layers/module.h"
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

  int count() const { return experts_per_rank_; }                          // Epr
  int group(int j) const { return first_group_ + j; }                      // provider index
  int expert(int j) const { return rt_.ep_rank * experts_per_rank_ + j; }  // global id
  std::vector<GroupSpec> param_groups() const;

  // [in] x (R, C): the received rows, laid out as `rows` says; [in] active (Epr): agreed;
  // [out] gate, up (R, F): pre-activations, allocated here (kept for backward);
  // returns y (R, C) `=` the expert outputs (rows of inactive experts: unwritten; there are none).
  // [in,out] held (Epr or empty): fsdp: forward fills it with the acquired experts, backward
  // takes and releases them; experts with reshard_after_forward=false: slot j holds expert j
  // when it was kept (undefined Tensor otherwise); empty otherwise.
  TensorBuffer forward(const ModuleContext& ctx, ParamProvider& params, const DispatchState& rows,
                       const std::vector<char>& active, const Tensor& x, TensorBuffer& gate,
                       TensorBuffer& up, std::vector<Tensor>& held) const;
  // [in] dy (R, C); x, gate, up: forward's; returns dx (R, C) `=`. Writes (`+=`) each active
  // expert's parameter gradient and marks it ready (grad_ready) before releasing the expert.
  TensorBuffer backward(const ModuleContext& ctx, ParamProvider& params, const DispatchState& rows,
                        const std::vector<char>& active, const Tensor& x, const Tensor& gate,
                        const Tensor& up, const Tensor& dy, std::vector<Tensor>& held) const;
  // The provider groups of all local experts (a block, for prefetch_block).
  std::vector<int> block_groups() const;

 private:
  // Several experts' compute as grouped GEMMs (Ops::grouped_gemm: every ready expert's row
  // blocks in one call per GEMM of the SwiGLU FFN, elementwise ops over merged row ranges).
  // Each output element is computed by the same kernel call shape as one GEMM per expert and
  // row block, and weight gradients accumulate their row blocks in block order, so the results
  // are bit-identical to running the experts one by one. Tracing runs this same path: one
  // "experts" span around the grouped calls, per-expert spans derived from it (experts_span).
  struct ExpertParams {
    int j = 0;
    const GroupLayout* layout = nullptr;
    Tensor w, gw;  // gw: backward only
  };
  void forward_experts(const ModuleContext& ctx, const DispatchState& rows,
                       const std::vector<ExpertParams>& ex, const Tensor& x, const Tensor& gate,
                       const Tensor& up, const Tensor& act, const Tensor& y) const;
  void backward_experts(const ModuleContext& ctx, const DispatchState& rows,
                        const std::vector<ExpertParams>& ex, const Tensor& x, const Tensor& gate,
                        const Tensor& up, const Tensor& dy, const Tensor& act, const Tensor& dact,
                        const Tensor& dgate, const Tensor& dup, const Tensor& dx) const;
  // leaf/fsdp: every local expert, one coalesced gather (a no-op when prefetched), acquired in
  // id order.
  std::vector<Tensor> acquire_block(const ModuleContext& ctx, ParamProvider& params) const;
  void release_block(const ModuleContext& ctx, ParamProvider& params) const;
  // The active local experts in the order to run them, in two phases. Gathers are started
  // for all of them in id order (the agreed order). Phase 1 (`first`): those whose gather was
  // started or that are resident: cached ones first in id order (acquiring them updates the
  // cache's recency, which must agree across ranks), then the others in the order their
  // gathers were issued (= complete: ParamProvider::fetch_ticket); all are then released (and, in
  // backward, reduced) in id order, so the shard cache and the gradient buckets see the same
  // sequence on every rank. Phase 2 (`then`): those the live-parameter limit kept from prefetching;
  // each is acquired (an on-demand gather, a collective), run and released in id order, one at a
  // time, so the limit holds.
  struct RunOrder {
    std::vector<int> first, then;
  };
  // [in] reason: Needed in forward (after the router: on demand), Exact in backward (the
  // exact backward prefetch: the routing is known when the layer's backward starts).
  RunOrder run_order(const ModuleContext& ctx, ParamProvider& params,
                     const std::vector<char>& active, ParamProvider::FetchReason reason) const;
  // run(wave) for phase 1 in run order, one wave per run of consecutive experts with equal
  // keys (first_keys[i] for order.first[i]: experts ready at the same time, e.g. resident ones
  // or one coalesced gather), then finish(j) in id order; then run({j}), finish(j) for each of
  // phase 2.
  template <typename Run, typename Finish>
  static void execute(const RunOrder& order, const std::vector<uint64_t>& first_keys, Run&& run,
                      Finish&& finish);
  // The wave keys of order.first: 0 for experts resident now (or held: is_held), else their
  // gather's ticket (ParamProvider::fetch_ticket), read before any of them is acquired.
  template <typename Held>
  std::vector<uint64_t> wave_keys(const RunOrder& order, const ParamProvider& params,
                                  Held&& is_held) const;
  // While tracing, a span around the grouped compute of `ex` (TraceRecorder::begin_experts:
  // each expert's rows of this micro-batch and its GEMM flops); -1 otherwise.
  int experts_span(const ModuleContext& ctx, const DispatchState& rows,
                   const std::vector<ExpertParams>& ex, TracePass pass) const;

  ModelConfig cfg_;
  MoeRuntime rt_;
  int layer_, first_group_, experts_per_rank_;
};

}  // namespace moezero::moe
