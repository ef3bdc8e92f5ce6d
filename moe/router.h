// moe/router.h — the top-k router of an MoE layer (Mixtral's gate, with Switch / ST-MoE options,
// and DeepSeek-V3's sigmoid scores and selection bias):
//
//   xj     = x ⊙ noise                      (N, C) f32   jitter, training only (else xj = x)
//   logits = xj @ Wg^T                      (N, E) f32   "linear gate in fp32" (bf16 cast first)
//   softmax scores (Mixtral):  s = probs = softmax(logits)                       (N, E) f32
//   sigmoid scores (DeepSeek-V3): s = sigmoid(logits), probs = s / Σ_e s          (N, E) f32
//   choice = topk(s + b, k)                 (N, k)       descending, ties -> lower expert index;
//            b (E): the selection bias (auxiliary-loss-free balancing; 0 unless set_bias). It
//            changes which experts are chosen, never their weights.
//   w      = s[choice] / Σ_j s[choice]  (normalize_top_k) or s[choice] (raw)
//            (softmax: computed as the softmax of the chosen logits, the same value)
//   capacity (factor f > 0): each expert keeps at most cap = ceil(k·N·f/E) of this rank's
//            assignments; the rest are dropped lowest score first (equal scores:
//            the higher token index is dropped first); a dropped assignment has expert id -1 and
//            weight 0. Renormalisation is over all k choices, before dropping (as Mixtral + drop).
//
// Losses, over the GLOBAL batch of one micro-batch (N_g tokens on all data-parallel ranks):
//   aux = E · Σ_e F_e · P_e   (Hugging Face Mixtral load_balancing_loss_func, one layer):
//         F_e = Σ_j #{t : choice[t, j] == e} / N_g   (counts BEFORE capacity dropping; Σ_e F_e = k)
//         P_e = Σ_t probs[t, e] / N_g   (sigmoid: probs = the scores normalised per token)
//         so a perfectly balanced router gives aux = k (HF's value), not 1. HF concatenates the
//         gate logits of all layers before taking the means; we take them per layer (the caller
//         sums or averages layers). F is a constant for the gradient (as in HF/Switch):
//         d aux / d probs[t, e] = E · F_e / N_g.
//   z   = (1/N_g) Σ_t logsumexp(logits_t)^2   (ST-MoE, either score function);
//         d z / d logits_t = 2 lse_t softmax(logits_t) / N_g.
// Sigmoid backward: with G = dL/dprobs·(softmax_backward through p = s/Σs) + the weights' part,
// dlogits = G ⊙ (1 - s); normalised weights: softmax_backward(w, dw) ⊙ (1 - s_chosen); raw:
// dw ⊙ s_chosen ⊙ (1 - s_chosen) (router.cpp derives them).
//
// Two phases, so that F and P are global without the router knowing about ranks:
//   1. forward_local: routing of this rank's N tokens, and a local statistics vector `stats`;
//   2. the caller all-reduces `stats` (Sum) over every data-parallel rank (in place);
//   3. finish(N_g): the loss values; 4. backward.
//
// Host synchronisation: none on the default path (no capacity, any z, no jitter), and none with
// jitter (host-generated noise is uploaded asynchronously; the host copy is kept alive by a
// stream task). Capacity dropping is decided on the host: forward_local blocks on ctx.stream
// once (downloads top-k ids/probs) when capacity_factor > 0.
//
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/config.h"
#include "layers/module.h"

namespace moezero::moe {

struct RouterConfig {
  int num_experts = 8;           // E
  int top_k = 2;                 // k, 1 <= k <= E
  bool normalize_top_k = true;   // Mixtral: renormalise the k weights; false: raw probabilities
  float jitter = 0.0f;           // eps in [0, 1): x *= U(1-eps, 1+eps) when training; 0 = off
  float aux_coef = 0.0f;         // coefficient of the load-balancing loss
  float z_coef = 0.0f;           // coefficient of the router z-loss
  float capacity_factor = 0.0f;  // f > 0: capacity per expert ceil(k·N·f/E); 0 = dropless
  uint64_t seed = 0;             // jitter noise seed
  ScoreFunction score = ScoreFunction::Softmax;
};

// The router settings of a run (model.num_experts, model.top_k, the moe section).
RouterConfig router_config(const ModelConfig& model, const MoeConfig& moe, uint64_t seed);

enum class RouterMode : uint8_t { Train, Eval };  // Eval: no jitter

// The layout of the router's statistics vector (Router::Routing::stats), f32 (3E): the one
// definition every reader uses (router.cpp, moe_layer.cpp). Local on return of forward_local;
// the caller all-reduces it (Sum, in place) over the data-parallel ranks before finish().
// Counts are exact as floats up to 2^24 per expert.
//   [0, E)   selected: top-k selections per expert, before capacity dropping
//   [E, 2E)  kept:     kept assignments per expert (= selected when dropless)
//   [2E, 3E) prob_sum: Σ over tokens of probs[:, e]
struct RouterStats {
  int64_t experts = 0;  // E

  int64_t numel() const { return 3 * experts; }
  // Device views (1, E) into a stats tensor f32 (3E).
  Tensor selected(const Tensor& stats) const { return stats.view_elems(0, {1, experts}); }
  Tensor kept(const Tensor& stats) const { return stats.view_elems(experts, {1, experts}); }
  Tensor prob_sum(const Tensor& stats) const { return stats.view_elems(2 * experts, {1, experts}); }
  // The top-k selection counts (E) of a host copy of stats (3E).
  std::span<const float> selected(std::span<const float> host) const {
    return host.subspan(0, static_cast<size_t>(experts));
  }
  // The kept counts (E) of a host copy of stats (3E).
  std::span<const float> kept(std::span<const float> host) const {
    return host.subspan(static_cast<size_t>(experts), static_cast<size_t>(experts));
  }
};

class Router {
 public:
  // Views into the router's per-micro-batch state; valid until the next forward_local or the
  // end of backward.
  struct Routing {
    int64_t tokens = 0;    // N, this rank's tokens
    int64_t capacity = 0;  // per-expert capacity of this rank; 0 when dropless
    Tensor expert_ids;     // i32 (N*k): assignment t*k+j -> expert, -1 when dropped
    Tensor weights;        // f32 (N, k): combine weights, 0 when dropped
    Tensor probs;          // f32 (N, E): softmax of the gate logits (sigmoid: normalised scores)
    // f32 (3E), laid out as RouterStats says (Router::stats_layout()); local on return, the
    // caller all-reduces it (Sum, in place) over the data-parallel ranks before finish().
    Tensor stats;
  };

  // [in] layer: decoder layer index (part of the jitter noise key). Throws on a bad config.
  Router(const RouterConfig& cfg, int layer);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  const RouterConfig& config() const { return cfg_; }
  RouterStats stats_layout() const { return RouterStats{cfg_.num_experts}; }
  // ceil(k·tokens·f/E) (at least 1 for tokens > 0; a relative 1e-6 below an integer counts as
  // that integer, see router.cpp); 0 when dropless.
  int64_t capacity(int64_t tokens) const;

  // Routes this rank's tokens. Replaces the state of any previous micro-batch.
  // [in] x: (N, C) ctx.dtype, the router input (must stay unchanged until backward, which
  //      reads it again); [in] gate: (E, C) ctx.dtype, the acquired gate weight;
  // [in] token_offset: global index of x's first token (the noise key; tokens are contiguous);
  // [in] micro_batch: micro-batch index within the run (the noise key); [in] mode.
  // [in] forced (moe.routing_replay): empty, or E per-expert counts summing to N·k, none above
  //      N: the choices are not the top-k but fixed by the counts (forced_choices), the
  //      weights are computed from the scores of the forced experts as for top-k choices, so
  //      gradients flow; the bias plays no part. Needs capacity_factor 0.
  // [out] the routing (views; stats still local).
  Routing& forward_local(const layers::ModuleContext& ctx, const Tensor& x, const Tensor& gate,
                         int64_t token_offset, int64_t micro_batch, RouterMode mode,
                         std::span<const int64_t> forced = {});

  // The forced choices (N·k, assignment t·k+j) of per-expert counts (E) summing to N·k, none
  // above N: the assignments sorted by expert fill the slots column by column (position p goes
  // to token p mod N, slot p div N), so each token gets k distinct experts in ascending order.
  static std::vector<int32_t> forced_choices(std::span<const int64_t> counts, int64_t tokens,
                                             int top_k);

  // After the caller all-reduced routing().stats. Fixes N_g and `scale` for backward.
  // [in] global_tokens: N_g, the micro-batch's tokens on all data-parallel ranks (>= N);
  // [in] scale: multiplies both losses and their gradients (e.g. 1 / micro-batches per step);
  // [out] loss_out f32 (1) `+=` this rank's share of scale·(aux_coef·aux + z_coef·z):
  //       scale·(aux_coef·aux·N/N_g + z_coef·z_local), z_local = (1/N_g) Σ_{local t} lse_t², so
  //       the sum over ranks is the global value (as a per-token loss would be);
  // [out] aux_out f32 (1) `+=` aux, unscaled and global (same on every rank); may be undefined;
  // [out] z_out f32 (1) `+=` z_local, unscaled; may be undefined (then z is not computed unless
  //       z_coef > 0).
  void finish(const layers::ModuleContext& ctx, int64_t global_tokens, float scale,
              const Tensor& loss_out, const Tensor& aux_out, const Tensor& z_out = Tensor());

  // Backward of everything: the combine weights, the aux loss and the z-loss. Frees the state.
  // [in] dweights f32 (N, k): dL/dw (combine_rows_backward); entries of dropped assignments
  //      are ignored; [in] x, gate: the tensors of forward_local;
  // [out] dx (N, C) ctx.dtype `+=`; [out] dgate f32 (E, C) `+=`.
  // The gradient is of the loss summed over ranks: this rank's tokens' part.
  void backward(const layers::ModuleContext& ctx, const Tensor& dweights, const Tensor& x,
                const Tensor& gate, const Tensor& dx, const Tensor& dgate);

  // The routing of the current micro-batch (throws when there is none).
  Routing& routing();

  // The per-expert selection bias b (E) added to the scores for top-k only (auxiliary-loss-free
  // balancing); empty: none (the default). Applies from the next forward_local.
  void set_bias(std::vector<float> bias);
  const std::vector<float>& bias() const { return bias_; }

  // The jitter factor of element (token, channel), a pure function of its arguments, uniform in
  // [1-eps, 1+eps). The device applies silu(g) with g = silu^-1(this) in f32 (see router.cpp),
  // which equals it to ~1e-7 relative.
  static double jitter_noise(uint64_t seed, int layer, int64_t micro_batch, int64_t token,
                             int64_t channel, double eps);

 private:
  struct State;
  // The steps of forward_local, in order (router.cpp):
  std::unique_ptr<State> new_state(const layers::ModuleContext& ctx, int64_t N, int64_t C) const;
  void make_noise(const layers::ModuleContext& ctx, State& st, int64_t token_offset,
                  int64_t micro_batch) const;  // jitter, training only
  // logits, scores, probs, top-k (with the bias), weights; returns the logits f32 (N, E).
  TensorBuffer select(const layers::ModuleContext& ctx, State& st, const Tensor& x,
                      const Tensor& gate, std::span<const int64_t> forced) const;
  void local_statistics(const layers::ModuleContext& ctx, State& st) const;  // selected, prob_sum
  void logsumexp(const layers::ModuleContext& ctx, State& st,
                 const Tensor& logits) const;  // z_coef > 0
  void drop_over_capacity(const layers::ModuleContext& ctx,
                          State& st) const;  // capacity > 0: host sync
  // The f32 (N) column of ones (column sums, row broadcasts), made on first use.
  Tensor ones(const layers::ModuleContext& ctx, State& st) const;
  // The steps of backward, in order:
  // dweights with dropped assignments masked (in `tmp`), or dweights itself when dropless.
  Tensor kept_dweights(const layers::ModuleContext& ctx, const State& st, const Tensor& dweights,
                       TensorBuffer& tmp) const;
  // dlogits f32 (N, E) from the combine weights, the aux loss and the z-loss.
  TensorBuffer logits_backward(const layers::ModuleContext& ctx, const State& st,
                               const Tensor& dw) const;
  // Sigmoid scores: dlogits `=` from dw (N, k) and dprobs (N, E) (the aux part; may be
  // undefined) through probs = s / Σs, the weights and s = sigmoid(logits).
  void sigmoid_scores_backward(const layers::ModuleContext& ctx, const State& st, const Tensor& dw,
                               const Tensor& dprobs, const Tensor& dlogits) const;
  // dgate `+=` dlogits^T @ xj; dx `+=` (dlogits @ Wg) · noise.
  void input_backward(const layers::ModuleContext& ctx, const State& st, const Tensor& dlogits,
                      const Tensor& x, const Tensor& gate, const Tensor& dx,
                      const Tensor& dgate) const;

  RouterConfig cfg_;
  int layer_;
  std::vector<float> bias_;  // (E) or empty
  std::unique_ptr<State> st_;
};

}  // namespace moezero::moe
