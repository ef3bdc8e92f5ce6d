// moe/moe_layer.h — the MoE FFN sub-layer: out = h + sum_j w_j * expert_{e_j}(rmsnorm(h)),
// with top-k routing, expert parallelism (all-to-all token dispatch over the EP group) and
// ZeRO-3 experts that never hang.
//
// Forward on one rank (N = B*T local tokens, E experts, ep = EP width, Epr = E / ep local experts):
//   1. acquire the layer group (post_attention_layernorm + router gate); xn = rmsnorm(h).
//   2. router.forward_local -> expert id and weight per assignment (-1: dropped by capacity),
//      local statistics (3E f32). expert_histogram -> local kept counts (E).
//   3. AGREEMENT: one all-reduce (Sum) of the statistics over the world: global top-k counts,
//      global kept counts and global probability sums. The global kept count of expert e is
//      > 0 exactly when some rank routed a token to it, so every rank of e's EDP group (indeed
//      every rank) sees the same active set; the aux loss uses the same global numbers.
//      The per-peer token counts are exchanged with one all-to-all over the EP group.
//      HOST SYNC (the only one of the layer): the counts are needed on the host to size the
//      token all-to-all and to decide which experts to gather.
//   4. sort assignments by expert (stable), gather rows, all_to_all_v to the owners.
//      Received rows are laid out [source peer][local expert].
//   5. for each ACTIVE local expert in id order: acquire its group (an all-gather over its
//      EDP group, which every member issues because the active set is agreed), SwiGLU over
//      its row blocks, release. Experts no rank routed to are neither gathered nor computed.
//   6. all_to_all_v back, weighted combine, out = h + combined.
// Backward mirrors it; for inactive experts nothing is issued: no gradient, no
// reduce-scatter anywhere (their gradient is zero on every rank, and skipping is agreed).
//
// Groups (provider indices first_group, first_group + 1, ...): "layers.l.moe"
// {model.layers.l.post_attention_layernorm.weight, model.layers.l.block_sparse_moe.gate.weight}
// (Dense), then one per LOCAL expert j: "layers.l.experts.e" {...experts.e.w1.weight (F, C)
// (gate), w2 (C, F) (down), w3 (F, C) (up)} (GroupKind::Expert, expert = e).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "layers/feed_forward.h"
#include "moe/moe_runtime.h"
#include "moe/router.h"

namespace moezero {
enum class TracePass : uint8_t;
}

namespace moezero::moe {

class MoeFeedForward final : public FeedForward {
 public:
  // [in] layer: decoder layer index; moe_index: index among the MoE layers (for stats).
  MoeFeedForward(const ModelConfig& cfg, const MoeRuntime& rt, int layer, int moe_index,
                 int first_group);
  ~MoeFeedForward() override;

  std::vector<GroupSpec> param_groups() const override;
  // Routing-aware prefetch: gathers the local experts the frequency model predicts for this
  // layer (prefetch.policy), within prefetch.budget_bytes, before the attention block runs.
  void prepare(const ModuleContext& ctx, ParamProvider& params, Prepare when) override;
  // Exact backward prefetch: the forward's active experts, in the order backward runs them.
  void prepare_backward(const ModuleContext& ctx, ParamProvider& params,
                        const Saved& saved) override;
  std::unique_ptr<Saved> forward(const ModuleContext& ctx, ParamProvider& params, const Tensor& h,
                                 const Tensor& out) override;
  void backward(const ModuleContext& ctx, ParamProvider& params, std::unique_ptr<Saved> saved,
                const Tensor& h, const Tensor& dresid) override;

  int local_experts() const { return experts_per_rank_; }

 private:
  struct MoeSaved;
  int expert_group(int j) const { return first_group_ + 1 + j; }
  // The active local experts in the order to run them, in two phases. Gathers are started
  // for all of them in id order (the agreed order). Phase 1 (`first`): those whose gather was
  // started or that are resident: cached ones first in id order (acquiring them updates the
  // cache's recency, which must agree across ranks), then the others in the order their
  // parameters are ready; all are then released (and, in backward, reduced) in id order, so the
  // shard cache and the gradient buckets see the same sequence on every rank. Phase 2 (`then`):
  // those the live-parameter limit kept from prefetching; each is acquired (an on-demand gather, a
  // collective), run and released in id order, one at a time, so the limit holds.
  struct RunOrder {
    std::vector<int> first, then;
  };
  // [in] reason: Needed in forward (after the router: on demand), Predicted in backward (the
  // exact backward prefetch: the routing is known when the layer's backward starts).
  RunOrder run_order(const ModuleContext& ctx, ParamProvider& params,
                     const std::vector<char>& active, ParamProvider::FetchReason reason) const;
  // all_to_all_v of rows (C wide) with per-peer row counts; copies when ep_size == 1.
  // Runs on rt.a2a_stream when set: it waits for the compute stream's writes of `send`, and
  // the compute stream waits for `recv` (events only, no host sync).
  void exchange(const ModuleContext& ctx, TensorBuffer& send, const std::vector<int64_t>& send_rows,
                TensorBuffer& recv, const std::vector<int64_t>& recv_rows);
  // Runs call(stream) on the a2a stream ordered by events after the compute stream's writes of
  // `send` and before its reads of `recv` (both buffers recorded as used by that stream).
  void on_a2a_stream(const ModuleContext& ctx, TensorBuffer& send, TensorBuffer& recv,
                     const std::function<void(Stream&)>& call);
  // A trace span for local expert j's compute (its rows of this micro-batch) while tracing;
  // -1 otherwise.
  int expert_span(const ModuleContext& ctx, const MoeSaved& sv, int j, TracePass pass) const;
  // The stream the EP communicator runs on.
  Stream& a2a_stream(const ModuleContext& ctx) const {
    return rt_.a2a_stream ? *rt_.a2a_stream : ctx.s();
  }

  ModelConfig cfg_;
  MoeRuntime rt_;
  int layer_, moe_index_, first_group_;
  int experts_per_rank_;
  Router router_;
  std::vector<int> planned_;  // local expert ids prefetched by prepare() for this micro-batch
};

}  // namespace moezero::moe
