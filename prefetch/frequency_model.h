// prefetch/frequency_model.h — what the routing-aware prefetcher knows about routing: per MoE
// layer and expert, how often the expert is active and how much of the layer's traffic it takes,
// plus co-activation between consecutive MoE layers (DESIGN.md "Why it exists", point 2).
//
// Why it is safe to drive collectives from it: it is updated only from the AGREED (globally
// all-reduced) per-expert counts, by every rank, in the same order, with the same arithmetic, so
// its state is bit-identical on every rank (no rank-local routing, no time, no randomness, no
// order-dependent reductions). Two models fed the same update sequence compare == exactly.
//
// Definitions (d = ema_decay in [0, 1); "step" = one update() of that layer = one micro-batch;
// active_l(e) = [counts_l[e] > 0]; all EMAs are  x <- d * x + (1 - d) * v):
//   share(l, e)       EMA of counts_l[e] / sum_e counts_l[e]  (0 for every e when the sum is 0).
//                     Prior: 1 / E (uniform).
//   probability(l, e) EMA of active_l(e): the probability that e is active in a micro-batch.
//                     Prior: 1.0, so a cold model predicts every expert and prefetches everything
//                     the budget allows; the prior decays as d^n after n updates.
//   Co-activation between MoE layer l-1 and l (l >= 1), as EMA-smoothed counts with prior 0,
//   updated by update(l, ...) from the active set A of the latest update(l-1, ...) (the same
//   micro-batch). Only the rows of predecessors i in A move, so each row is an EMA over the
//   micro-batches in which i was active (a rarely active i keeps its evidence instead of
//   decaying it away while absent):
//     for i in A:  given(l, i) <- d * given + (1 - d)          (= 1 - d^(occurrences of i))
//                  joint(l, i, j) <- d * joint + (1 - d) * active_l(j)
//   conditional(l, i, j) = P(j active at l | i active at l-1), shrunk toward the marginal:
//     (joint(l, i, j) + s * probability(l, j)) / (given(l, i) + s),   s = (1 - d) *
//     kPriorObservations
//   i.e. the marginal counts as kPriorObservations (= 1) occurrence of evidence; with no evidence
//   about i it is the marginal (1.0 when cold); after many occurrences it is within
//   s / (1 + s) of the observed ratio (0.09 at d = 0.9).
//   predicted(l, j | A) for the active set A of layer l-1 = max over i in A of conditional(l, i, j)
//   (j is active when any token routes to it, so each active predecessor is a reason on its own;
//   the max never lets a rarely seen predecessor dilute a strong one). A empty: the marginal.
//
// What the cost plan prices (prefetch_policy.h, "cost"): priced(l, j | A) = the evidence alone
// in min(predicted(l, j | A), probability(l, j)): the cold prior's weight d^n removed after n
// updates ((p - d^n) / (1 - d^n), clamped to [0, 1]; 1 before any update), and never above the
// marginal (the max of conditionals seen a few times overstates p).
// Its calibration: before each update(l, counts), the experts whose priced probability (given
// the previous layer's latest active set) was >= 1/2 are the ones a link-bound plan would
// speculate on; per layer, EMAs over updates (x <- d * x + v) of the sum of their priced
// probabilities and of how many were active feed
//   plan_calibration(l) = (active + 1) / (priced + 1)          (1 with no evidence)
// the realised precision of confident guesses relative to what they claimed; the cost plan
// multiplies its priced p by it (capped at 1). Agreed inputs only: identical on every rank.
//
// Update order (enforced, an Error otherwise): within a micro-batch layers 0, 1, ..., L-1, each
// once; the next micro-batch starts at layer 0. This is what makes "the latest update of l-1" the
// same micro-batch on every rank.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

namespace moezero::prefetch {

class FrequencyModel {
 public:
  // Weight of the marginal in the conditional, in micro-batches of evidence.
  static constexpr double kPriorObservations = 1.0;

  // [in] layers: number of MoE layers (>= 1). [in] experts: experts per layer (>= 1).
  // [in] ema_decay: in [0, 1) (prefetch.ema_decay).
  FrequencyModel(int layers, int experts, double ema_decay);

  // One micro-batch of layer `layer`: [in] counts (experts): the agreed global token count of
  // each expert (>= 0). Call for layers 0..L-1 in order, once per micro-batch (see above).
  void update(int layer, std::span<const int64_t> counts);

  int layers() const { return layers_; }
  int experts() const { return experts_; }
  double ema_decay() const { return decay_; }
  // Micro-batches seen by layer 0 (every layer has seen this many, or one fewer mid-batch).
  int64_t micro_batches() const { return updates_[0]; }
  int64_t updates(int layer) const;

  double share(int layer, int expert) const;
  double probability(int layer, int expert) const;
  double joint(int layer, int prev_expert, int expert) const;        // layer >= 1
  double given(int layer, int prev_expert) const;                    // layer >= 1
  double conditional(int layer, int prev_expert, int expert) const;  // layer >= 1
  // [in] prev_active (experts, or nullptr): active flags of layer-1 in the current micro-batch.
  // nullptr (or layer 0): the marginal probability. See predicted(l, j | A) above.
  double predicted(int layer, int expert, const std::vector<char>* prev_active) const;
  // The active flags of `layer` at its latest update (all 0 before any update).
  const std::vector<char>& last_active(int layer) const;
  // The cost plan's probability and its calibration (see above). evidence(l, p): p without
  // the cold prior's weight; priced = evidence of min(predicted, probability).
  double evidence(int layer, double p) const;
  double priced(int layer, int expert, const std::vector<char>* prev_active) const;
  double plan_calibration(int layer) const;

  // Exact state as JSON (doubles stored as they are: dump() round-trips them bit for bit).
  nlohmann::json to_json() const;
  // Builds a model from to_json() output; throws moezero::Error naming the field
  // ("frequency_model.share[2]: expected 16 values, got 15") on any missing/mistyped/bad field.
  static FrequencyModel from_json(const nlohmann::json& j);
  // Replaces this model's state with a checkpoint's (all-or-nothing). The checkpoint must have
  // this model's layers and experts (else an Error naming the field and both values); this
  // model's ema_decay is kept (the config of the resumed run wins).
  void restore(const nlohmann::json& j);

  bool operator==(const FrequencyModel& o) const = default;

 private:
  size_t at(int layer, int expert) const {
    return size_t(layer) * size_t(experts_) + size_t(expert);
  }
  size_t at3(int layer, int i, int j) const {
    return (size_t(layer) * size_t(experts_) + size_t(i)) * size_t(experts_) + size_t(j);
  }
  void check_layer(int layer, const char* what) const;
  void check_expert(int expert, const char* what) const;

  int layers_;
  int experts_;
  double decay_;
  std::vector<int64_t> updates_;  // (layers) updates seen per layer
  std::vector<double> share_;     // (layers, experts)
  std::vector<double> prob_;      // (layers, experts)
  std::vector<double> joint_;     // (layers, prev experts, experts); layer 0 unused (stays 0)
  std::vector<double> given_;     // (layers, prev experts); layer 0 unused (stays 0)
  std::vector<std::vector<char>> last_active_;  // (layers, experts)
  std::vector<double> confident_priced_;        // (layers) EMA: sum of priced p >= 1/2
  std::vector<double> confident_active_;        // (layers) EMA: how many of those were active
};

}  // namespace moezero::prefetch
