// moe/moe_layer.h — the MoE FFN sub-layer: out = h + sum_j w_j * expert_{e_j}(rmsnorm(h)),
// with top-k routing, expert parallelism (all-to-all token dispatch over the EP group) and
// ZeRO-3 experts that never hang. It composes three parts, as Megatron-Core's MoE layer does:
// the router (moe/router.h), the token dispatcher (moe/token_dispatcher.h) and this rank's
// experts (moe/local_experts.h); forward is route -> agree -> dispatch -> compute -> combine.
//
// Forward on one rank (N = B*T local tokens, E experts, ep = EP width, Epr = E / ep local experts):
//   1. route: acquire the layer group (post_attention_layernorm + router gate);
//      xn = rmsnorm(h); router.forward_local -> expert id and weight per assignment (-1: dropped
//      by capacity) and local statistics (RouterStats, 3E f32). Dispatch preprocess: the local
//      kept counts per expert (E).
//   2. agree: one all-reduce (Sum) of the statistics over the world: global top-k counts,
//      global kept counts and global probability sums. The global kept count of expert e is
//      > 0 exactly when some rank routed a token to it, so every rank of e's EDP group (indeed
//      every rank) sees the same active set; the aux loss uses the same global numbers. Then the
//      dispatcher exchanges the per-peer token counts (one all-to-all over the EP group).
//      HOST SYNC (the only one of the layer): the counts are needed on the host to size the
//      token all-to-all and to decide which experts to gather. The agreed kept counts feed the
//      frequency model, the shard cache's keep scores and the routing statistics.
//   3. dispatch: sort assignments by expert (stable), gather rows, all_to_all_v to the owners.
//      Received rows are laid out [source peer][local expert].
//   4. compute: for each ACTIVE local expert: acquire its group (an all-gather over its EDP
//      group, which every member issues because the active set is agreed), SwiGLU over its row
//      blocks, release (LocalExperts says in which order). Experts no rank routed to are
//      neither gathered nor computed.
//   5. combine: all_to_all_v back, weighted combine, out = h + combined.
// Backward mirrors it; for inactive experts nothing is issued: no gradient, no
// reduce-scatter anywhere (their gradient is zero on every rank, and skipping is agreed).
//
// Groups (provider indices first_group, first_group + 1, ...): "layers.l.moe"
// {model.layers.l.post_attention_layernorm.weight, model.layers.l.block_sparse_moe.gate.weight}
// (Dense), then one per LOCAL expert (moe/local_experts.h), then (model.num_shared_experts > 0)
// the shared experts' dense group (moe/shared_experts.h): out = h + routed + shared(xn).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "layers/feed_forward.h"
#include "moe/local_experts.h"
#include "moe/moe_runtime.h"
#include "moe/router.h"
#include "moe/shared_experts.h"
#include "moe/token_dispatcher.h"

namespace moezero::moe {

class MoeFeedForward final : public layers::FeedForward {
 public:
  // [in] layer: decoder layer index; moe_index: index among the MoE layers (for stats).
  MoeFeedForward(const ModelConfig& cfg, const MoeRuntime& rt, int layer, int moe_index,
                 int first_group);
  ~MoeFeedForward() override;

  std::vector<GroupSpec> param_groups() const override;
  // Routing-aware prefetch: gathers the local experts the frequency model predicts for this
  // layer (prefetch.policy), within prefetch.budget_bytes, before the attention block runs.
  // Only when the gather strategy's prefetch is Routed (zero.moe_gather=experts); otherwise the
  // strategy prefetches (leaf, fsdp: the coalesced block, one module ahead).
  void prepare(const layers::ModuleContext& ctx, ParamProvider& params, Prepare when) override;
  // Exact backward prefetch: the forward's active experts, in the order backward runs them.
  void prepare_backward(const layers::ModuleContext& ctx, ParamProvider& params,
                        const Saved& saved) override;
  std::unique_ptr<Saved> forward(const layers::ModuleContext& ctx, ParamProvider& params,
                                 const Tensor& h, const Tensor& out) override;
  void backward(const layers::ModuleContext& ctx, ParamProvider& params,
                std::unique_ptr<Saved> saved, const Tensor& h, const Tensor& dresid) override;
  // Full checkpointing keeps the forward's agreed routing: the router's state (expert ids,
  // weights, probabilities, agreed statistics), the token layout's counts and the active set
  // (and experts held since forward); it frees the norm output, the dispatched rows, the
  // experts' pre-activations, the combine's saved outputs and the shared experts'.
  void drop_for_recompute(Saved& saved) const override;
  // Norm, dispatch, experts, combine and shared experts again from the kept routing: the
  // router, the agreement all-reduce, the host sync and every statistic (frequency model,
  // MoE stats, capacity drops, routing traces) are not run again. The token all-to-alls and
  // the experts' acquires are (every rank recomputes, so they stay matched).
  void recompute(const layers::ModuleContext& ctx, ParamProvider& params, Saved& saved,
                 const Tensor& h, const Tensor& out) override;

  int local_experts() const { return experts_.count(); }

  // Auxiliary-loss-free balancing (moe.expert_bias_update_rate > 0; DeepSeek-V3): the router's
  // per-expert selection bias b (E). After each optimizer step the trainer calls
  // update_expert_bias: b_e += rate · sign(mean_e' load_e' - load_e), load_e = the globally
  // agreed top-k selections (before capacity) of expert e summed over the step's trained
  // micro-batches (counted in backward, so evaluation forwards do not count); identical on
  // every rank. A no-op when the rate is 0 (then the bias is empty).
  void update_expert_bias();
  const std::vector<float>& expert_bias() const { return router_.bias(); }
  // Restores a saved bias (E finite values, else throws). With the rate 0 the bias is off and
  // stays empty whatever is given; with a rate > 0 an empty list means zeros.
  void set_expert_bias(std::vector<float> bias);

 private:
  struct MoeSaved;
  // The steps of forward (moe_layer.cpp), in order.
  // Route: norm and router; the layer group stays acquired until agree().
  Router::Routing& route(const layers::ModuleContext& ctx, ParamProvider& params, const Tensor& h,
                         MoeSaved& sv);
  // prefetch.pregate: the next MoE layer's lookahead counts of this rank's tokens (its gate on
  // this layer's router input, top-k), beside a copy of the router statistics in
  // sv.agreement; nothing when off or for the last MoE layer.
  void pregate(const layers::ModuleContext& ctx, ParamProvider& params,
               const Router::Routing& routing, MoeSaved& sv);
  // Agree: all-reduce of the router statistics (with pregate's counts in sv.agreement), the
  // router's losses; releases the layer group.
  void agree(const layers::ModuleContext& ctx, ParamProvider& params,
             const Router::Routing& routing, const MoeSaved& sv);
  // HOST SYNC: downloads the dispatch counts and the agreed router statistics (returned, 3E);
  // hands pregate's agreed counts to the PregateModel.
  std::vector<float> synchronize(const layers::ModuleContext& ctx, DispatchCounts& counts,
                                 const Router::Routing& routing, const MoeSaved& sv) const;
  // The simulated backend: overwrites what synchronize() read with the routing source's counts
  // (MoeRoutingInputs::source): this rank's, its EP peers' for its experts, the world's total.
  void simulated_counts(const layers::ModuleContext& ctx, DispatchCounts& counts,
                        std::vector<float>& h_stats) const;
  // From the agreed kept counts (E), identical on every rank: the active local experts (Epr),
  // the frequency model and keep scores, dropped unneeded prefetches, routing statistics.
  std::vector<char> apply_agreement(ParamProvider& params, std::span<const float> kept);
  // Adds the plan's probabilities against the agreed outcome (kept: (E) kept counts) to the
  // step's prediction-quality sums (MoeStats); no-op when no plan ran before routing.
  void record_prediction(std::span<const float> kept);

  ModelConfig cfg_;
  MoeRuntime rt_;
  int layer_, moe_index_, first_group_;
  Router router_;
  TokenDispatcher dispatcher_;
  LocalExperts experts_;                   // provider groups first_group_ + 1, ...
  std::unique_ptr<SharedExperts> shared_;  // model.num_shared_experts > 0: the last group
  std::vector<int> planned_;    // (global) expert ids prefetched by prepare() for this micro-batch
  std::vector<double> plan_p_;  // (E) P(active) the plan of this micro-batch used; empty: none
  int window_ = -1;             // the speculation window prepare() opened (TraceRecorder); -1: none
  std::vector<double> load_;    // (E) agreed selections of this step's trained micro-batches
};

}  // namespace moezero::moe
