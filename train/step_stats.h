// train/step_stats.h — the per-expert counters of a training step ("moe_layers" in the metrics,
// docs/trace.md) and the step's communication timing (comm_ms, exposed_comm_ms,
// overlap_ratio): collected on every rank, all-gathered as raw 8-byte words (one collective of
// a size fixed by the config, so identical on every rank), summed on rank 0.
//
// Per MoE layer and expert, over all ranks of the step: gathers, gathered bytes and the time
// those gathers took (ZeroEngine::group_counters), cache hits/misses, prefetch
// hits/misses/waste, token assignments sent to / received from other EP ranks (MoeStats), the
// tokens routed (the globally agreed tokens_per_expert) and the frequency model's predicted
// activation probability as the step's first forward plan used it.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <vector>

#include "core/config.h"
#include "core/trace.h"
#include "zero/zero_engine.h"
#include "moe/moe_runtime.h"

namespace moezero::moe {

struct MoeLayerStats {
  int layer = -1;  // model layer index
  // Each (E), summed over all ranks.
  std::vector<int64_t> tokens;
  std::vector<uint64_t> gathers, gathered_bytes;
  std::vector<double> gather_ms;
  std::vector<uint64_t> cache_hits, cache_misses;
  std::vector<uint64_t> prefetch_hits, prefetch_misses, prefetch_wasted_bytes;
  std::vector<int64_t> a2a_tokens_in, a2a_tokens_out;
  std::vector<double> predicted;
};

// The step's communication time, over all ranks.
struct CommStepStats {
  double comm_ms = 0.0;          // collectives on non-compute streams, summed over ranks
  double exposed_comm_ms = 0.0;  // sum of ranks' stall_ms plus compute's waits on the a2a
  // 1 - exposed / comm; nullopt when comm_ms == 0.
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
  std::vector<uint64_t> rank_words(const ZeroEngine& engine, const MoeStats& stats,
                                   const StepTiming& timing);

  // Rank 0: sums every rank's words (world * word count, rank-major) into per-layer stats and
  // the step's comm timing. [in] stall_ms: the ranks' RankStepStats::stall_ms.
  void sum(const std::vector<uint64_t>& all_words, int world, const MoeStats& stats,
           const std::vector<std::vector<double>>& predicted, const std::vector<double>& stall_ms,
           std::vector<MoeLayerStats>& layers, CommStepStats& comm) const;

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
// step's work on every stream (null entries are skipped).
void join_streams(Stream& compute, const std::vector<Stream*>& others);

}  // namespace moezero::moe
