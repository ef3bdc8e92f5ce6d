// prefetch/pregate.h — pre-gating (prefetch.pregate): layer i+1's router applied to layer i's
// MoE input predicts layer i+1's active experts one layer ahead (Hwang et al., "Pre-gated MoE",
// ISCA 2024; docs/prefetch.md has the study that motivated it).
//
// What it holds, per MoE layer l >= 1: the AGREED lookahead counts of the current micro-batch
// (the number of tokens, over all data-parallel ranks, whose top-k under layer l's router,
// applied to layer l-1's MoE input, holds expert e; all-reduced with layer l-1's agreement, so
// identical on every rank), and how often such a prediction came true:
//   hit(l)   EMA of active_l(e) over the experts with a lookahead count > 0
//   miss(l)  EMA of active_l(e) over the experts with count 0
// (x <- d x + (1 - d) v per expert outcome, d = prefetch.ema_decay; priors 0.5 and 0.5, so a
// cold model neither trusts nor ignores the lookahead). probability(l, e) is hit(l) or miss(l)
// by e's count: what the expert plan ranks and the cost policy prices instead of the frequency
// model's guess, while counts of this micro-batch exist. Every input is agreed: the state is
// identical on every rank, so are the plans made from it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace moezero::prefetch {

class PregateModel {
 public:
  // [in] layers: MoE layers (>= 1); [in] experts: experts per layer (>= 1); [in] ema_decay in
  // [0, 1). Throws moezero::Error on bad arguments.
  PregateModel(int layers, int experts, double ema_decay);

  int layers() const { return layers_; }
  int experts() const { return experts_; }

  // The parameter group holding MoE layer `layer`'s router gate (set by the layers when built;
  // -1 before).
  void set_gate_group(int layer, int group);
  int gate_group(int layer) const;

  // The agreed lookahead counts (experts) of `layer` (>= 1) for global micro-batch
  // `micro_batch` (replacing any earlier ones of the layer).
  void set_counts(int layer, int64_t micro_batch, std::span<const float> counts);
  // Those counts if they are `micro_batch`'s, else null.
  const std::vector<float>* counts(int layer, int64_t micro_batch) const;
  // What one observation saw: experts predicted (count > 0), those of them active, and the
  // experts active.
  struct Outcome {
    uint64_t predicted = 0, hits = 0, active = 0;
  };
  // The agreed outcome of `layer` in `micro_batch` (kept assignments per expert, experts): the
  // calibration learns from it when that micro-batch's counts exist (else nothing, {}).
  Outcome observe(int layer, int64_t micro_batch, std::span<const float> kept);
  // P(e active | its lookahead count) for `micro_batch`: hit(l) or miss(l); -1 when no counts
  // of that micro-batch exist (the caller falls back to the frequency model).
  double probability(int layer, int expert, int64_t micro_batch) const;
  double hit_rate(int layer) const;
  double miss_rate(int layer) const;

 private:
  void check_layer(int layer, const char* what) const;
  int layers_;
  int experts_;
  double decay_;
  std::vector<int> gate_group_;             // (layers)
  std::vector<int64_t> counts_mb_;          // (layers) micro-batch of counts_, -1: none
  std::vector<std::vector<float>> counts_;  // (layers, experts)
  std::vector<double> hit_, miss_;          // (layers)
};

}  // namespace moezero::prefetch
