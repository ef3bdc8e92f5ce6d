// moe/routing_source.h — routing without data, for the simulated backend (issue 18, README
// "Planning at scale"): how many token assignments every rank routes to every expert, per
// global micro-batch and MoE layer, from a recorded routing trace (moe/routing_trace.h) or a
// synthetic generator. On the simulated device no kernel computes, so the MoE layer takes the
// numbers its host reads (its own counts, what its EP peers send it, the agreed totals) from
// here; everything downstream (the agreement, the prefetcher's plans, the shard cache, the
// token all-to-all sizes, the gathers) runs unchanged on them.
//
// Every count vector of one (micro-batch, layer, rank) has E entries, sums to the rank's
// tokens x top_k and has none above its tokens (each token picks top_k distinct experts), as
// the router guarantees. Pure functions of their arguments: every rank computes every other
// rank's counts alike, which is what keeps the collectives matched and lets a few present
// ranks stand for a world of absent ones.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace moezero::moe {

class RoutingSource {
 public:
  virtual ~RoutingSource() = default;
  // [in] micro_batch: global index ((step - 1) * grad_accum_steps + j); [in] moe_index: the
  // MoE layer's index among the model's MoE layers (forward order); [in] rank: global rank.
  virtual std::vector<int64_t> counts(int64_t micro_batch, int moe_index, int rank) const = 0;
  // The agreed total of a world of `world_size` ranks: sum over ranks of counts(). Computed
  // once per (micro-batch, layer, world) and kept (up to 65,536 of them) for whoever asks next:
  // each present rank of a simulated world asks, and `moezero plan` asks again for every
  // strategy; at 1,024 ranks the sum is most of the source's cost. Thread-safe: while one
  // thread computes a total, the others wait (then read it) rather than compute it again.
  std::vector<int64_t> total(int64_t micro_batch, int moe_index, int world_size) const;

 private:
  mutable std::mutex computing_mu_;  // held while a total is computed (before totals_mu_)
  mutable std::mutex totals_mu_;
  mutable std::map<std::tuple<int64_t, int, int>, std::vector<int64_t>> totals_;
};

// What a run routes: the shape every count vector must respect.
struct RoutingShape {
  int64_t num_experts = 0;
  int top_k = 1;
  int64_t tokens_per_rank = 0;  // token rows of one rank's micro-batch
  int moe_layers = 0;
};

// Apportions tokens x top_k assignments over the experts in proportion to `weights` (>= 0, not
// all zero) with none above `tokens`: largest remainders, ties to the lower expert id, the
// excess of capped experts re-apportioned over the others. Exact and deterministic.
std::vector<int64_t> apportion(std::span<const double> weights, int64_t tokens, int top_k);

// Synthetic routing:
// - Skew: expert popularity follows Zipf's law, weight of the i-th most popular = 1/(i+1)^zipf_s
//   (0: uniform).
// - Drift: the popularity order of every layer shifts by `drift` experts per optimizer step
//   (fractional shifts accumulate), so the hot set moves as training proceeds.
// - Co-activation: layer l's popularity order is layer l-1's with a fraction 1 - coactivation
//   of its positions reshuffled (1: every layer has the same hot experts; 0: independent).
// - Rank variation: each rank's weights are multiplied by exp(rank_noise * g), g a standard
//   normal drawn per (seed, micro-batch, layer, rank, expert), so ranks differ as real batches
//   do (0: every rank routes alike).
struct SyntheticRouting {
  double zipf_s = 1.0;
  double drift = 0.0;
  double coactivation = 0.0;
  double rank_noise = 0.1;
  uint64_t seed = 1;
  int64_t grad_accum_steps = 1;  // micro-batches per step (for the drift's step number)
};

class SyntheticRoutingSource final : public RoutingSource {
 public:
  SyntheticRoutingSource(RoutingShape shape, SyntheticRouting params);
  std::vector<int64_t> counts(int64_t micro_batch, int moe_index, int rank) const override;
  // The popularity weight of every expert (before rank noise), for tests and reports.
  std::vector<double> weights(int64_t micro_batch, int moe_index) const;

 private:
  RoutingShape shape_;
  SyntheticRouting p_;
  std::vector<std::vector<int>> order_;  // per layer: experts from most to least popular
};

// A recorded routing trace (profile.routing_trace) as the source of another run, possibly of
// another shape: simulated rank r reads the trace's rank r mod world_size, MoE layer m its
// layer m mod (the trace's MoE layers), micro-batch b the recorded micro-batch b mod (those
// recorded completely); the counts are re-apportioned to this run's tokens x top_k (exact when
// the shapes agree). The expert count must match. Errors name the file, line and field.
class TraceRoutingSource final : public RoutingSource {
 public:
  TraceRoutingSource(const std::string& path, RoutingShape shape);
  std::vector<int64_t> counts(int64_t micro_batch, int moe_index, int rank) const override;
  int64_t recorded_micro_batches() const { return micro_batches_; }
  int recorded_world_size() const { return world_; }
  int recorded_top_k() const { return top_k_; }

 private:
  RoutingShape shape_;
  int world_ = 0, layers_ = 0, top_k_ = 0;
  int64_t micro_batches_ = 0;
  std::vector<int64_t> counts_;  // (micro-batches, layers, world, E)
};

}  // namespace moezero::moe
