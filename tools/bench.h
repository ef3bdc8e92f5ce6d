// tools/bench.h — the pieces of `moezero bench` (tools/bench_cmd.cpp): the strategy table (a
// name -> config overrides), the per-step counters read by name from the one field list
// (core/step_counters.h), one measured row per strategy (medians over steps and repeats, with
// the repeats' min and max), the frontier (each incumbent against the fastest moezero row at no
// more peak state), and the table and JSON they are printed as (tools/bench_report.cpp).
//
// A strategy is a list of `--set` overrides applied after the user's; the config parser checks
// them like any other, and a strategy whose overrides it rejects (a key that does not exist in
// this build) is skipped with a note, so the table may name keys that land later.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "train/trainer.h"

namespace moezero::bench {

struct Strategy {
  std::string name;                    // "z1", "moezero-cache=25"
  std::vector<std::string> overrides;  // "section.key=value", applied after the user's --set
};

// The strategies run when --strategies is not given, in this order.
std::vector<std::string> default_strategy_names();
// The overrides of strategy `name` ("moezero-cache=P": P in [0, 1000] percent of
// local_expert_bytes(base)). Throws naming the strategy when unknown.
Strategy resolve_strategy(const std::string& name, const Config& base);
// Bytes of one rank's local experts over all MoE layers, gathered (compute dtype, padded as the
// engine pads each group: GroupLayout::padded_numel over the expert-data-parallel group).
uint64_t local_expert_bytes(const Config& cfg);

// The order repeat `rep` (0-based) runs `n` strategies in: indices into the strategy list,
// rotated left by rep mod n (repeat 0: 0, 1, ..., n-1; repeat 1: 1, ..., n-1, 0), so that over
// n repeats every strategy runs once in every position (a slow phase of a shared machine, or
// the warm caches of the previous run, favour none).
std::vector<size_t> rotated_order(size_t n, int64_t rep);

// The rows moezero's configurations produce ("moezero", "moezero-*"); the incumbents are every
// other row except the link-free denominator "compute".
bool is_moezero_row(std::string_view strategy);
bool is_incumbent_row(std::string_view strategy);

// A counter of MOEZERO_RANK_STEP_COUNTERS by name; nullopt when the list has no such name.
std::optional<double> rank_counter(const train::RankStepStats& s, std::string_view name);
// One rank's simultaneous peak, within a step, of the state tags (param_shard, full_param,
// grad, optim_state, cache, comm_buffer).
uint64_t peak_state_bytes(const train::RankStepStats& s);
// The largest peak_state_bytes of a step's ranks (0 without ranks).
uint64_t peak_state_over_ranks(const train::StepLog& s);

// One measured value: nullopt when the counter does not exist in this build.
using Value = std::optional<double>;

// The fields of a row, in column order (after "strategy"); "utilisation" and "spread" are
// filled from all rows / all repeats. Every other field is a median over the measured steps
// (rank 0, per optimizer step), then over repeats, except those of is_maximum_field; the link
// tiers' intra_node_bytes and inter_node_bytes are each step's mean over ranks (a ring's hops
// differ by rank, so rank 0 alone does not speak for the step), then medians likewise.
const std::vector<std::string>& row_fields();
// Fields aggregated by their maximum instead of a median: over ranks, measured steps and
// repeats (peak_state_bytes: the largest state any rank held in any measured step).
bool is_maximum_field(std::string_view field);

// One run of one strategy: per field, the median over the measured steps (rank 0, per step),
// or the maximum (is_maximum_field).
struct RunSummary {
  std::vector<Value> values;  // row_fields() order; utilisation and spread unset
};
// [in] steps: the run's step logs; [in] warmup: leading steps excluded (steps.size() > warmup).
RunSummary summarise_run(const std::vector<train::StepLog>& steps, int64_t warmup);

struct Row {
  std::string strategy;
  std::vector<Value> values;  // row_fields() order: medians (or maxima) over repeats
  std::vector<Value> min;     // row_fields() order: the smallest / largest repeat's value
  std::vector<Value> max;     // (utilisation and spread: unset)
};
// Medians over repeats (maxima for is_maximum_field), with the repeats' min and max; spread =
// max/min tokens/s over repeats; utilisation = the `compute` row's step_ms / this row's (unset
// when no compute row was measured).
std::vector<Row> combine(const std::vector<std::string>& names,
                         const std::vector<std::vector<RunSummary>>& runs);

// One line of the frontier table: an incumbent row and the fastest moezero row whose peak
// state is no larger than the incumbent's (none: no moezero row fits, or a value is absent).
struct FrontierEntry {
  std::string incumbent;
  double incumbent_tokens_per_s = 0.0;
  double incumbent_peak_state_bytes = 0.0;
  std::optional<std::string> moezero;  // the chosen moezero row
  Value moezero_tokens_per_s, moezero_peak_state_bytes;
  Value ratio;  // moezero tokens/s / incumbent tokens/s
  // The `compute` row's tokens/s over the incumbent's (absent without a compute row): what
  // free communication would give, about the most any strategy can gain over the incumbent on
  // this machine. A ceiling near 1 says the preset is compute-bound here, whatever the link.
  Value ceiling;
};
// One entry per incumbent row with tokens/s and peak state, in row order; ties in tokens/s go
// to the row listed first.
std::vector<FrontierEntry> frontier(const std::vector<Row>& rows);

// A cell of the table: "-" when absent; bytes in binary units, ratios to 3 places, ms to 1.
std::string cell(const std::string& field, const Value& v);
// Whether the table shows the repeats' min and max of tokens/s beside its median (`moezero
// plan` runs each strategy once: none).
enum class RepeatRange : uint8_t { Hide, Show };
// The table on stdout: one line per row, columns in row_fields() order.
void print_table(const std::vector<Row>& rows, RepeatRange range = RepeatRange::Hide);
// The frontier on stdout, one line per incumbent.
void print_frontier(const std::vector<FrontierEntry>& entries);
// Rows as flat JSON objects (numbers or null, as scripts/tables.py reads them): {"strategy",
// every row_fields() field (null: absent), then field + "_min" and field + "_max" (the smallest
// and largest repeat's value; none for utilisation and spread)}.
nlohmann::ordered_json rows_json(const std::vector<Row>& rows);
nlohmann::ordered_json frontier_json(const std::vector<FrontierEntry>& entries);
// Writes {<extra's keys>..., "rows": rows_json(rows)} to `path`; [in] who: the command, for
// errors.
void write_json(const std::vector<Row>& rows, const std::string& path, const char* who,
                const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

// A command-line count >= min; [in] what: "bench: --repeats" (names the flag in the error).
int64_t parse_count(const std::string& v, const char* what, int64_t min);
// "a,b,c" -> {a, b, c}; refuses an empty list naming `what`.
std::vector<std::string> split_list(const std::string& list, const char* what);

}  // namespace moezero::bench
