// report/report.h — the numbers of `moezero report`, computed from a RunInput and kept apart
// from their rendering (report_render.h), so tests can check every value.
//
// Definitions (docs/report.md says the same for users). Sums run over the steps in the file.
//   token_share[l][e]     = tokens[l][e] / sum_e' tokens[l][e']   (0 when the layer routed none):
//                           the expert's share of the layer's routed token assignments (top-k:
//                           a token counts once per chosen expert, after capacity drops).
//   active_fraction[l][e] = (steps with tokens[l][e] > 0) / steps.
//   predicted[l][e]       = mean over steps of the frequency model's P(active) for the step.
//   Prediction quality, from the trainer's per-(expert, micro-batch) record of the plans made
//   before routing (p: the probability the plan used, y: 1 if the expert turned out active):
//   brier (step, layer)   = brier_sum / brier_count of that step's moe_layers entry: mean of
//                           (p - y)^2 (0 perfect; 0.25 is what p = 0.5 everywhere scores).
//                           Absent when no plan before routing covered the step (count 0).
//   brier (layer)         = sum over steps of brier_sum / sum of brier_count.
//   calibration[layer][b] = pairs with p in bucket b ([b/n, (b+1)/n), the last also 1), those
//                           active, observed rate = active / pairs; mean_predicted is the bucket
//                           centre (the trainer records no per-bucket mean). Rows with layer -1
//                           sum all layers. Well calibrated: observed rate near mean_predicted.
//   (Means over steps of p against the active fraction agree by construction for a frequency
//   model fed with the same activity, so the report shows no such difference.)
//   overlapped_ms         = comm_ms - exposed_comm_ms; overlap_ratio = 1 - exposed / comm
//                           (absent when comm_ms == 0), recomputed from comm_ms and
//                           exposed_comm_ms.
//   comms rows            : collective spans grouped by (op, group kind, message-size bucket
//                           [2^k, 2^(k+1)) bytes); algbw = sum bytes / sum duration (GB/s,
//                           1e9 bytes/s); busbw = sum(bytes * f(op, n)) / sum duration with the
//                           nccl-tests factors f: all_gather, reduce_scatter, all_to_all(_v)
//                           (n-1)/n, all_reduce 2(n-1)/n, broadcast 1; absent when a span lacks
//                           args.group_size or the op has no factor (barrier).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "report/run_input.h"

namespace moezero::report {

// Sums over the steps for one (layer, expert). Counters absent from older files stay 0 (see
// Report::has_expert_counters).
struct ExpertRow {
  int64_t layer = 0;  // model layer index
  int64_t expert = 0;
  int64_t tokens = 0;  // sum of "tokens_per_expert"
  // The Sum counters of MOEZERO_EXPERT_STEP_COUNTERS (core/step_counters.h), summed over steps.
#define MOEZERO_DECLARE_Sum(name, type) ExpertCounterType<type> name = 0;
#define MOEZERO_DECLARE_Agreed(name, type)
#define MOEZERO_DECLARE(name, type, combine, source) MOEZERO_DECLARE_##combine(name, type)
  MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_DECLARE)
#undef MOEZERO_DECLARE
#undef MOEZERO_DECLARE_Agreed
#undef MOEZERO_DECLARE_Sum
  double token_share = 0.0;
  int64_t active_steps = 0;
  double active_fraction = 0.0;
  std::optional<double> predicted;  // with has_expert_counters only
  bool operator==(const ExpertRow&) const = default;
};

struct LayerRow {
  int64_t layer = 0;
  int64_t experts = 0;
  int64_t tokens = 0;           // sum over experts and steps
  int64_t brier_pairs = 0;      // sum of brier_count over steps
  std::optional<double> brier;  // with has_prediction_quality and brier_pairs > 0 only
  bool operator==(const LayerRow&) const = default;
};

// Brier score of one (step, MoE layer).
struct BrierCell {
  int64_t step = 0, layer = 0;  // layer: model layer index
  int64_t pairs = 0;            // brier_count
  std::optional<double> brier;  // absent when pairs == 0
  bool operator==(const BrierCell&) const = default;
};

// The load balance of one (step, MoE layer): the metrics' load_max_over_mean and load_cv
// (max / mean and std / mean of the layer's tokens per expert in the step); absent when the
// file lacks them or the step routed no token to the layer.
struct BalanceCell {
  int64_t step = 0, layer = 0;  // layer: model layer index
  std::optional<double> max_over_mean, cv;
  bool operator==(const BalanceCell&) const = default;
};

// One probability bucket of the calibration table, summed over steps.
struct CalibrationRow {
  int64_t layer = -1;  // model layer index; -1: all layers
  int64_t bucket = 0;
  double lo = 0.0, hi = 0.0;    // the bucket's probabilities [lo, hi)
  double mean_predicted = 0.0;  // bucket centre
  int64_t pairs = 0, active = 0;
  std::optional<double> observed_rate;  // active / pairs; absent when pairs == 0
  bool operator==(const CalibrationRow&) const = default;
};

struct StepRow {
  int64_t step = 0;
  std::optional<double> loss;
  std::optional<double> val_loss;  // validation loss (train.eval_every steps only)
  double stall_ms = 0.0;           // sum of ranks[].stall_ms
  std::optional<double> comm_ms, exposed_comm_ms, overlapped_ms, overlap_ratio;
  bool operator==(const StepRow&) const = default;
};

struct CommRow {
  std::string op;     // as in the trace
  std::string group;  // group kind: the group name without its trailing index ("edp0" -> "edp")
  int64_t bucket_lo_bytes = 0, bucket_hi_bytes = 0;  // message sizes in [lo, hi); [0, 1) for 0
  int64_t count = 0;
  int64_t total_bytes = 0;
  double total_ms = 0.0, avg_ms = 0.0;
  std::optional<double> algbw_gbps, busbw_gbps;  // absent when total_ms == 0 (or see header)
  bool operator==(const CommRow&) const = default;
};

struct RankRow {
  int64_t rank = 0;
  // sums over steps
  int64_t gathered_bytes = 0, gathered_dense_bytes = 0, gathered_expert_bytes = 0,
          gathered_wire_bytes = 0, reduce_scattered_bytes = 0, reduce_wire_bytes = 0,
          all_reduced_bytes = 0, a2a_bytes = 0, intra_node_bytes = 0, inter_node_bytes = 0,
          prefetch_hits = 0, prefetch_misses = 0, miss_bytes = 0, exact_prefetches = 0,
          wasted_bytes = 0, needed_expert_bytes = 0, active_layer_experts = 0,
          layer_expert_slots = 0, cache_hits = 0, cache_misses = 0, cache_evictions = 0,
          speculation_gated = 0, hpz_gathers = 0, hpz_gathered_bytes = 0, pregate_predicted = 0,
          pregate_hits = 0, pregate_active = 0;
  double stall_ms = 0.0, comm_ms = 0.0, exposed_comm_ms = 0.0, idle_link_ms = 0.0;
  // maxima over steps
  std::vector<std::pair<std::string, int64_t>> peak_bytes;  // tag -> bytes, first step's order
  int64_t peak_total_bytes = 0;
  std::vector<std::string> absent;  // counters the file lacks (their sums above are 0: n/a)
  bool has(const std::string& counter) const;
  bool operator==(const RankRow&) const = default;
};

struct Report {
  std::string source;  // the input file
  std::string kind;    // "metrics" | "trace"
  int64_t steps = 0, ranks = 0;
  int64_t first_step = 0, last_step = 0;
  bool has_expert_counters = false;     // the file has moe_layers
  bool has_overlap = false;             // the file has comm_ms / exposed_comm_ms
  bool has_collectives = false;         // a trace with collective spans
  bool has_group_size = false;          // every collective span carries args.group_size
  bool has_prediction_quality = false;  // moe_layers carry brier_sum ... calibration_active
  std::vector<LayerRow> layers;
  std::vector<ExpertRow> experts;  // layer-major, then expert
  std::vector<StepRow> step_rows;
  std::vector<BrierCell> brier_cells;       // step-major, then layer (has_prediction_quality)
  std::vector<CalibrationRow> calibration;  // all layers (-1), then per layer, bucket order
  std::vector<BalanceCell> balance_cells;   // step-major, then layer (has_balance)
  bool has_balance = false;                 // some step has load_max_over_mean or load_cv
  double total_stall_ms = 0.0;
  std::optional<double> total_comm_ms, total_exposed_comm_ms, total_overlap_ratio;
  std::vector<CommRow> comms;
  std::vector<RankRow> rank_rows;
  bool operator==(const Report&) const = default;

  const ExpertRow& expert(size_t layer_pos, size_t e) const;  // layer_pos: index in `layers`
};

Report compute_report(const RunInput& in);

// nccl-tests bus-bandwidth factor of `op` on a group of `n` ranks; nullopt for ops without one.
std::optional<double> busbw_factor(const std::string& op, int64_t n);
// Message-size bucket [lo, hi) of `bytes`: powers of two; 0 bytes -> [0, 1).
std::pair<int64_t, int64_t> size_bucket(int64_t bytes);
// "edp0" -> "edp", "world" -> "world".
std::string group_kind(const std::string& group);

// --json output: every field of Report, and back (throws Error naming `where` and the field).
std::string report_to_json(const Report& r);
Report report_from_json(const std::string& text, const std::string& where);

}  // namespace moezero::report
