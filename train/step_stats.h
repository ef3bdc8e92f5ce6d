// train/step_stats.h — a rank's counters of a training step ("ranks[r]" in the metrics: the
// field list of core/step_counters.h and the allocator's peaks), the per-expert counters of
// the step ("moe_layers", docs/trace.md) and the step's communication timing (comm_ms,
// exposed_comm_ms, overlap_ratio): collected on every rank and all-gathered as raw 8-byte
// words (one collective of a size fixed by the config, so identical on every rank); rank 0
// logs every rank's counters and sums the per-expert ones.
//
// Per MoE layer and expert, over all ranks of the step: gathers, gathered bytes and the time
// those gathers took (ZeroEngine::group_counters), cache hits/misses, prefetch
// hits/misses/waste, token assignments sent to / received from other EP ranks (MoeStats), the
// tokens routed (the globally agreed tokens_per_expert) and the frequency model's predicted
// activation probability as the step's first forward plan used it.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <type_traits>
#include <vector>

#include "comm/net_model.h"
#include "core/allocator.h"
#include "core/config.h"
#include "core/step_counters.h"
#include "core/trace.h"
#include "moe/moe_runtime.h"
#include "zero/zero_engine.h"

namespace moezero::train {

// One rank's counters of one step. The scalar counters are those of
// MOEZERO_RANK_STEP_COUNTERS (core/step_counters.h), where their sources are named; then the
// allocator's peaks. Every field is 8 bytes wide: the struct is all-gathered as raw words.
struct RankStepStats {
  uint64_t gathered_bytes = 0;          // this step
  uint64_t reduce_scattered_bytes = 0;  // this step
  uint64_t reduce_wire_bytes = 0;       // this step: what those reduce-scatters sent
  uint64_t all_reduced_bytes = 0;       // this step
  uint64_t a2a_bytes = 0;               // this step: token all-to-all bytes sent to peers
  uint64_t intra_node_bytes = 0;        // this step: bytes sent inside the node (fast tier)
  uint64_t inter_node_bytes = 0;        // this step: bytes sent to other nodes (slow link)
  uint64_t gathered_dense_bytes = 0;    // this step, split of gathered_bytes
  uint64_t gathered_expert_bytes = 0;
  uint64_t gathered_wire_bytes = 0;   // this step: gathered_bytes in the codec's wire format
  uint64_t prefetch_hits = 0;         // expert gathers planned before routing, then needed
  uint64_t prefetch_misses = 0;       // needed expert gathers started after routing
  uint64_t miss_bytes = 0;            // their bytes
  uint64_t exact_prefetches = 0;      // backward's exact expert gathers
  uint64_t wasted_bytes = 0;          // expert gathers freed unused
  uint64_t needed_expert_bytes = 0;   // full bytes of the step's expert acquires
  uint64_t active_layer_experts = 0;  // agreed active experts, summed over layers, micro-batches
  uint64_t layer_expert_slots = 0;    // E per MoE layer and micro-batch
  uint64_t cache_hits = 0, cache_misses = 0, cache_evictions = 0;
  uint64_t speculation_gated = 0;  // candidates the cost gate refused (frequency would take)
  // hpZ: re-gathers inside the partition (fast tier), their full bytes (in gathered_bytes too)
  uint64_t hpz_gathers = 0, hpz_gathered_bytes = 0;
  // prefetch.pregate: experts predicted, those active, experts active (layers with a lookahead)
  uint64_t pregate_predicted = 0, pregate_hits = 0, pregate_active = 0;
  double stall_ms = 0.0;         // compute stream waiting on parameter gathers
  double comm_ms = 0.0;          // wall time with a collective of this rank in flight (union)
  double exposed_comm_ms = 0.0;  // part of it the compute stream waits (<= comm_ms)
  double idle_link_ms = 0.0;     // no collective in flight inside the speculation windows
  std::array<uint64_t, kMemTagCount> peak_bytes{};  // peak within this step, by tag
  uint64_t peak_total_bytes = 0;                    // peak of the sum over tags, this step
  uint64_t peak_state_bytes = 0;  // peak of the sum over the state tags (is_state_tag), this step
};
static_assert(std::is_trivially_copyable_v<RankStepStats> && alignof(RankStepStats) == 8 &&
                  sizeof(RankStepStats) == (kRankStepCounterCount + kMemTagCount + 2) * 8,
              "RankStepStats: the counters of core/step_counters.h and the peaks, 8 bytes each");
constexpr size_t kRankStepStatsWords = sizeof(RankStepStats) / 8;

// This rank's counters of one step. [in] now, before: the engine's counters at the end of this
// step and of the last one; [in] moe: the step's MoE statistics; [in] mem: the allocator's,
// peaks since the step's reset_peak.
// [in] timing: the step's communication timing (TraceRecorder::finish_step). [in] link_now,
// link_before: this rank's sent bytes by tier (comm::LocalWorld::link_bytes) at the end of this
// step and of the last one (both zero where the backend does not count them).
RankStepStats rank_step_stats(const EngineCounters& now, const EngineCounters& before,
                              const moe::MoeStats& moe, const MemStats& mem,
                              const StepTiming& timing, const comm::LinkBytes& link_now = {},
                              const comm::LinkBytes& link_before = {});
// The struct as kRankStepStatsWords 8-byte words, and back.
void to_words(const RankStepStats& s, int64_t* words);
RankStepStats from_words(const int64_t* words);
// "ranks[r]" of a metrics line (without what other parts add, e.g. shard_grad_norms).
nlohmann::json rank_step_json(const RankStepStats& s);

struct MoeLayerStats {
  int layer = -1;  // model layer index
  // Each (E): the counters of MOEZERO_EXPERT_STEP_COUNTERS (core/step_counters.h), Sum ones
  // summed over all ranks, Agreed ones rank 0's.
#define MOEZERO_DECLARE(name, type, combine, source) std::vector<type> name;
  MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_DECLARE)
#undef MOEZERO_DECLARE
  // Prediction quality of the step (MoeStats: agreed, so rank 0's own): sum of (p - y)^2 over
  // (expert, micro-batch) pairs a plan before routing covered, their count, and per
  // probability bucket (MoeStats::kCalibrationBuckets of [0, 1]) pairs and active pairs.
  double brier_sum = 0.0;
  int64_t brier_count = 0;
  std::vector<int64_t> calibration_count, calibration_active;
  // Balance (MoeStats, agreed): top-k selections per expert before capacity (E), and the
  // selection bias the step routed with (E, or empty when moe.expert_bias_update_rate = 0).
  // The metrics line adds from them and `tokens`: dropped (sum of selected - tokens),
  // load_max_over_mean and load_cv (coefficient of variation) of `tokens` (null when no token).
  std::vector<int64_t> selected;
  std::vector<float> expert_bias;
};

// The step's communication time, over all ranks.
struct CommStepStats {
  double comm_ms = 0.0;          // sum over ranks of RankStepStats::comm_ms
  double exposed_comm_ms = 0.0;  // sum over ranks of RankStepStats::exposed_comm_ms (<= comm_ms)
  // 1 - exposed / comm, in [0, 1]; nullopt when comm_ms == 0.
  std::optional<double> overlap_ratio() const;
};

// One per rank, for the whole run.
class StepStatsCollector {
 public:
  // [in] engine: its group counters are the baseline of the first step.
  StepStatsCollector(const ModelConfig& model, const ZeroEngine& engine);

  // The frequency model's probabilities now (call before the step's first forward); (layers,
  // E); empty without a model.
  std::vector<std::vector<double>> predicted(const prefetch::FrequencyModel* frequency) const;

  // This rank's contribution to the step (counter deltas since the last call), as words.
  // Every rank returns the same number of words.
  std::vector<uint64_t> rank_words(const ZeroEngine& engine, const moe::MoeStats& stats,
                                   const StepTiming& timing);

  // Rank 0: the words summed over every rank (an integer all-reduce of rank_words) into
  // per-layer stats and the step's comm timing.
  void sum(const std::vector<uint64_t>& words, const moe::MoeStats& stats,
           const std::vector<std::vector<double>>& predicted, std::vector<MoeLayerStats>& layers,
           CommStepStats& comm) const;

 private:
  int experts_ = 0;
  std::vector<int> moe_layers_;  // model layer of each MoE layer
  std::vector<int> moe_index_;   // per model layer: its MoE index, -1 for dense layers
  std::vector<GroupCounters> last_;
};

// Adds "moe_layers", "comm_ms", "exposed_comm_ms" and "overlap_ratio" to a metrics line.
void add_step_stats_json(nlohmann::json& j, const std::vector<MoeLayerStats>& layers,
                         const CommStepStats& comm);

// Makes `compute` wait (an event wait, no host sync) until every stream in `others` has
// finished what was enqueued so far, so that one synchronisation of `compute` covers the
// step's work on every stream (null entries are skipped). [in] timing: when not null, the
// waits are timed as waits on communication (exposed_comm_ms).
void join_streams(Stream& compute, const std::vector<Stream*>& others, TraceRecorder* timing);

}  // namespace moezero::train
