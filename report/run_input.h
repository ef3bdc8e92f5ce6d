// report/run_input.h — reads what a training run wrote (a metrics file or a Chrome trace) into
// typed records, checking the fields the trainer writes (README "Training", docs/trace.md,
// docs/health.md).
//
// Input kinds, told apart by content (never by file name):
//   - metrics file: JSON lines, one object per step (train/trainer.cpp step_json);
//   - trace: one JSON object with "traceEvents" (profile.trace); its per-step metrics are the
//     args of the "step_metrics" instant events, its collectives the "X" spans of cat
//     "collective" (args op, group, bytes, optional group_size).
// Every error names the file and the line (metrics) or traceEvents[i] (trace) and the field
// that is wrong: bad JSON, a missing or mistyped field, inconsistent lengths (an expert array
// whose length differs from tokens_per_expert, a layer count or rank count that changes
// between steps). Of a step number that appears more than once (a resumed run appending to the
// metrics of the run it continues) the last record is kept.
// Fields that newer trainers added are optional: a file written before them still reads, and
// what it lacks is absent (never zero pretending to be measured). A rank counter of
// MOEZERO_RANK_STEP_COUNTERS may be absent, but then from every rank of every step (a record
// that lacks one its neighbours have is damaged, and refused); likewise the prediction-quality
// fields of moe_layers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/step_counters.h"

namespace moezero::report {

// How well the plans made before routing predicted the step (train/step_stats.h MoeLayerStats):
// over the (expert, micro-batch) pairs such a plan covered, with p the probability the plan used
// and y = 1 when the expert turned out active, else 0.
struct PredictionCounts {
  double brier_sum = 0.0;   // sum of (p - y)^2
  int64_t brier_count = 0;  // pairs
  // Per probability bucket (n = calibration_count.size() equal-width buckets of [0, 1]: bucket b
  // holds b/n <= p < (b+1)/n, the last also p == 1): pairs, and those with y == 1 (<= pairs).
  std::vector<int64_t> calibration_count, calibration_active;  // (n)
};

// The type report/ keeps a per-expert counter of element type T in: double or int64_t.
template <typename T>
using ExpertCounterType = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

// One MoE layer's per-expert counters of one step (metrics "moe_layers"), summed over ranks.
// Every vector has E entries (E = experts of the layer).
struct LayerStepCounters {
  int64_t layer = 0;  // model layer index
  // The counters of MOEZERO_EXPERT_STEP_COUNTERS (core/step_counters.h), in list order: a
  // double stays double (gather_ms: ms on the gather streams, all ranks; predicted: the
  // frequency model's P(active) used for the step's first plan), the others are int64_t.
#define MOEZERO_DECLARE(name, type, combine, source) std::vector<ExpertCounterType<type>> name;
  MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_DECLARE)
#undef MOEZERO_DECLARE
  std::optional<PredictionCounts> prediction;  // absent in files older than these fields
  // The layer's balance of the step (metrics moe_layers: load_max_over_mean, load_cv); absent
  // in older files and when the step routed no token to the layer (null).
  std::optional<double> load_max_over_mean, load_cv;
};

// One rank's counters of one step (metrics "ranks[r]"): the counters of
// MOEZERO_RANK_STEP_COUNTERS (core/step_counters.h), then the allocator's peaks.
struct RankStepCounters {
  int64_t gathered_bytes = 0, reduce_scattered_bytes = 0, reduce_wire_bytes = 0,
          all_reduced_bytes = 0, a2a_bytes = 0, intra_node_bytes = 0, inter_node_bytes = 0,
          gathered_dense_bytes = 0, gathered_expert_bytes = 0, gathered_wire_bytes = 0,
          prefetch_hits = 0, prefetch_misses = 0, miss_bytes = 0, exact_prefetches = 0,
          wasted_bytes = 0, needed_expert_bytes = 0, active_layer_experts = 0,
          layer_expert_slots = 0, cache_hits = 0, cache_misses = 0, cache_evictions = 0,
          speculation_gated = 0, hpz_gathers = 0, hpz_gathered_bytes = 0, pregate_predicted = 0,
          pregate_hits = 0, pregate_active = 0;
  double stall_ms = 0.0, comm_ms = 0.0, exposed_comm_ms = 0.0, idle_link_ms = 0.0;
  std::vector<std::pair<std::string, int64_t>> peak_bytes;  // tag -> bytes, in file order
  int64_t peak_total_bytes = 0;
  // Counters of the list this record lacks (written before they existed), in list order; their
  // fields above stay 0.
  std::vector<std::string> absent;
};

// One step's metrics (one metrics line, or the args of one step_metrics event).
struct StepRecord {
  std::string where;  // "FILE:LINE" or "FILE: traceEvents[i]", for messages
  int64_t step = 0;
  std::optional<double> loss;
  std::optional<double> val_loss;                       // train.eval_every steps only
  std::vector<std::vector<int64_t>> tokens_per_expert;  // (MoE layers, E)
  bool has_moe_layers = false;                          // false: file predates the counters
  std::vector<LayerStepCounters> moe_layers;            // (MoE layers) when has_moe_layers
  std::optional<double> comm_ms, exposed_comm_ms;       // absent in older files
  std::vector<RankStepCounters> ranks;
};

// One "X" span of cat "collective" in a trace.
struct CollectiveSpan {
  int64_t rank = 0;   // pid
  std::string op;     // "all_gather", "reduce_scatter", "all_reduce", "all_to_all_v", ...
  std::string group;  // "world", "edp0", "ep1", ...
  int64_t bytes = 0;
  double ts_us = 0.0, dur_us = 0.0;
  std::optional<int64_t> group_size;  // ranks in the group (args.group_size), when recorded
};

enum class InputKind { Metrics, Trace };
const char* input_kind_name(InputKind k);  // "metrics", "trace"

struct RunInput {
  std::string path;
  InputKind kind = InputKind::Metrics;
  std::vector<StepRecord> steps;      // sorted by step, one record per step
  size_t repeated_steps_dropped = 0;  // earlier records of a repeated step, not in `steps`
  std::vector<CollectiveSpan> collectives;
};

// Reads and checks `path`. Throws moezero::Error naming the file, line or event, and field.
RunInput read_run(const std::string& path);
// Same, from text already in memory (`path` is only used in messages).
RunInput parse_run(const std::string& text, const std::string& path);

}  // namespace moezero::report
