// tools/bench.h — the pieces of `moezero bench` (tools/bench_cmd.cpp): the strategy table (a
// name -> config overrides), the per-step counters read by name from the one field list
// (core/step_counters.h), and one measured row per strategy (medians over steps and repeats).
//
// A strategy is a list of `--set` overrides applied after the user's; the config parser checks
// them like any other, and a strategy whose overrides it rejects (a key that does not exist in
// this build) is skipped with a note, so the table may name keys that land later.
#pragma once

#include <cstdint>
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

// A counter of MOEZERO_RANK_STEP_COUNTERS by name; nullopt when the list has no such name.
std::optional<double> rank_counter(const moe::RankStepStats& s, std::string_view name);
// Sum of the per-step peaks of the state tags (param_shard, full_param, grad, optim_state,
// cache, comm_buffer).
uint64_t peak_state_bytes(const moe::RankStepStats& s);

// One measured value: nullopt when the counter does not exist in this build.
using Value = std::optional<double>;

// The fields of a row, in column order (after "strategy"); "utilisation" and "spread" are
// filled from all rows / all repeats, the others are medians over steps then repeats.
const std::vector<std::string>& row_fields();

// One run of one strategy: per field, the median over the measured steps (rank 0, per step).
struct RunSummary {
  std::vector<Value> values;  // row_fields() order; utilisation and spread unset
};
// [in] steps: the run's step logs; [in] warmup: leading steps excluded (steps.size() > warmup).
RunSummary summarise_run(const std::vector<moe::StepLog>& steps, int64_t warmup);

struct Row {
  std::string strategy;
  std::vector<Value> values;  // row_fields() order
};
// Medians over repeats; spread = max/min tokens/s over repeats; utilisation = the `compute`
// row's step_ms / this row's (unset when no compute row was measured).
std::vector<Row> combine(const std::vector<std::string>& names,
                         const std::vector<std::vector<RunSummary>>& runs);

// A cell of the table: "-" when absent; bytes in binary units, ratios to 3 places, ms to 1.
std::string cell(const std::string& field, const Value& v);
// The table on stdout: one line per row, columns in row_fields() order.
void print_table(const std::vector<Row>& rows);
// {"rows": [{"strategy": ..., field: value or null, ...}]}; [in] who: the command, for errors.
void write_json(const std::vector<Row>& rows, const std::string& path, const char* who);

// A command-line count >= min; [in] what: "bench: --repeats" (names the flag in the error).
int64_t parse_count(const std::string& v, const char* what, int64_t min);
// "a,b,c" -> {a, b, c}; refuses an empty list naming `what`.
std::vector<std::string> split_list(const std::string& list, const char* what);

}  // namespace moezero::bench
