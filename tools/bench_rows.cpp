// tools/bench_rows.cpp — the strategy table of `moezero bench` and the reduction of step logs to
// one row per strategy (tools/bench.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/allocator.h"
#include "core/error.h"
#include "core/param_group.h"
#include "core/step_counters.h"
#include "model/transformer.h"
#include "tools/bench.h"

namespace moezero::bench {

namespace {

// The strategy table: name -> overrides (README, "Benchmark: moezero bench"). `moezero` is the
// config as given; `moezero-cache=P` is resolved in resolve_strategy.
const std::map<std::string, std::vector<std::string>>& strategy_table() {
  static const std::map<std::string, std::vector<std::string>> table = {
      // The denominator: ZeRO-1 (the optimizer work every strategy shares: sharded AdamW) with
      // the emulated link off, so communication costs only in-process copies. Not stage 0: its
      // replicated AdamW does world_size times the optimizer work of every other row.
      {"compute", {"zero.stage=1", "comm_emulation.link_gbps=0"}},
      {"z1", {"zero.stage=1"}},
      {"z2", {"zero.stage=2"}},
      // The incumbents' ZeRO-3 for MoE: DeepSpeed leaf module, FSDP2 unresharded block.
      // Both regather dense blocks in every micro-batch (keep_dense_bytes=0).
      {"z3-leaf",
       {"zero.stage=3", "zero.moe_gather=leaf", "prefetch.policy=none",
        "shard_cache.capacity_bytes=0", "zero.keep_dense_bytes=0"}},
      {"z3-fsdp",
       {"zero.stage=3", "zero.moe_gather=fsdp", "prefetch.policy=none",
        "shard_cache.capacity_bytes=0", "zero.keep_dense_bytes=0"}},
      // moezero's agreement on active experts only: no prefetch, no cache, nothing kept.
      {"z3-none",
       {"zero.stage=3", "prefetch.policy=none", "shard_cache.capacity_bytes=0",
        "zero.keep_dense_bytes=0"}},
      {"moezero", {}},
  };
  return table;
}

constexpr std::string_view kCachePrefix = "moezero-cache=";

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median of values that are all present; nullopt when any is absent (a counter missing in this
// build is missing in every step).
Value median_of(const std::vector<Value>& values) {
  std::vector<double> v;
  for (const Value& x : values) {
    if (!x) return std::nullopt;
    v.push_back(*x);
  }
  return v.empty() ? Value{} : Value{median(v)};
}

size_t field_index(std::string_view name) {
  const auto& f = row_fields();
  const auto it = std::find(f.begin(), f.end(), name);
  MOEZERO_CHECK(it != f.end(), "bench: no field ", name);
  return static_cast<size_t>(it - f.begin());
}

// Rank 0's value of a per-rank time (comm_ms, exposed_comm_ms) when the field list has it per
// rank; else the step's total over ranks divided by the world size (the mean rank).
Value rank0_time(const moe::StepLog& s, std::string_view name, double step_total) {
  if (const Value v = rank_counter(s.ranks.at(0), name)) return v;
  return step_total / static_cast<double>(s.ranks.size());
}

Value max_over_ranks(const moe::StepLog& s, std::string_view name) {
  Value best;
  for (const moe::RankStepStats& r : s.ranks) {
    const Value v = rank_counter(r, name);
    if (!v) return std::nullopt;
    best = std::max(best.value_or(*v), *v);
  }
  return best;
}

// Every field of one step (rank 0), row_fields() order.
std::vector<Value> step_values(const moe::StepLog& s) {
  const moe::RankStepStats& r0 = s.ranks.at(0);
  std::vector<Value> v(row_fields().size());
  auto set = [&](std::string_view name, Value x) { v[field_index(name)] = x; };
  set("tokens_per_s", s.tokens_per_s);
  set("step_ms", s.tokens_per_s > 0 ? Value{1000.0 * double(s.tokens) / s.tokens_per_s} : Value{});
  set("exposed_comm_ms", rank0_time(s, "exposed_comm_ms", s.comm.exposed_comm_ms));
  set("exposed_comm_ms_max", max_over_ranks(s, "exposed_comm_ms"));
  set("comm_ms", rank0_time(s, "comm_ms", s.comm.comm_ms));
  set("peak_state_bytes", double(peak_state_bytes(r0)));
  for (const char* name :
       {"gathered_expert_bytes", "gathered_dense_bytes", "a2a_bytes", "prefetch_hits",
        "prefetch_misses", "miss_bytes", "exact_prefetches", "wasted_bytes", "needed_expert_bytes"})
    set(name, rank_counter(r0, name));
  // A ratio, not a counter: the agreed active layer-experts over the slots, both summed over the
  // step's MoE layers and micro-batches (the same on every rank of an EDP group).
  const Value active = rank_counter(r0, "active_layer_experts");
  const Value slots = rank_counter(r0, "layer_expert_slots");
  if (active && slots && *slots > 0) set("active_fraction", *active / *slots);
  return v;
}

}  // namespace

std::vector<std::string> default_strategy_names() {
  return {"compute",
          "z1",
          "z2",
          "z3-leaf",
          "z3-fsdp",
          "z3-none",
          "moezero",
          "moezero-cache=0",
          "moezero-cache=25",
          "moezero-cache=50",
          "moezero-cache=100"};
}

// The dense groups that stage 3 shards (at least zero.param_persistence_threshold elements),
// each padded over the world, in the compute dtype: what zero.keep_dense_bytes can keep.
static uint64_t dense_sharded_bytes(const Config& cfg) {
  const int world = static_cast<int>(cfg.parallel.world_size);
  uint64_t elems = 0;
  for (const GroupSpec& g : moe::Transformer(cfg.model).param_groups()) {
    const GroupLayout layout(g);
    if (g.kind != GroupKind::Expert &&
        layout.numel() >= static_cast<int64_t>(cfg.zero.param_persistence_threshold))
      elems += uint64_t(layout.padded_numel(world));
  }
  return elems * dtype_size_bytes(cfg.train.dtype);
}

uint64_t local_expert_bytes(const Config& cfg) {
  const int ep = static_cast<int>(cfg.parallel.ep_size);
  const int edp = static_cast<int>(cfg.parallel.world_size) / ep;
  uint64_t elems = 0;  // all experts of all MoE layers, each padded as the engine pads it
  for (const GroupSpec& g : moe::Transformer(cfg.model).param_groups())
    if (g.kind == GroupKind::Expert) elems += uint64_t(GroupLayout(g).padded_numel(edp));
  return elems * dtype_size_bytes(cfg.train.dtype) / uint64_t(ep);
}

Strategy resolve_strategy(const std::string& name, const Config& base) {
  const auto& table = strategy_table();
  if (const auto it = table.find(name); it != table.end()) return {name, it->second};
  if (name.rfind(kCachePrefix, 0) == 0) {
    const std::string p = name.substr(kCachePrefix.size());
    size_t used = 0;
    int pct = -1;
    try {
      pct = std::stoi(p, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MOEZERO_REQUIRE(used == p.size() && pct >= 0 && pct <= 1000, "bench: strategy '", name,
                    "': P must be a whole percentage in [0, 1000]");
    // Round up: P% of the bytes must fit whole. The dial covers both kinds of reuse within a
    // step: experts in the shard cache, dense groups kept between micro-batches.
    const uint64_t bytes = (local_expert_bytes(base) * uint64_t(pct) + 99) / 100;
    const uint64_t dense = (dense_sharded_bytes(base) * uint64_t(pct) + 99) / 100;
    return {name,
            {"shard_cache.capacity_bytes=" + std::to_string(bytes),
             "zero.keep_dense_bytes=" + std::to_string(dense)}};
  }
  std::string known;
  for (const auto& [n, o] : table) known += n + ", ";
  MOEZERO_USER_ERROR("bench: unknown strategy '", name, "' (known: ", known, "moezero-cache=P)");
}

std::optional<double> rank_counter(const moe::RankStepStats& s, std::string_view name) {
#define MOEZERO_BENCH_COUNTER(field, unit, source) \
  if (name == #field) return static_cast<double>(s.field);
  MOEZERO_RANK_STEP_COUNTERS(MOEZERO_BENCH_COUNTER)
#undef MOEZERO_BENCH_COUNTER
  return std::nullopt;
}

uint64_t peak_state_bytes(const moe::RankStepStats& s) { return s.peak_state_bytes; }

const std::vector<std::string>& row_fields() {
  static const std::vector<std::string> fields = {"tokens_per_s",
                                                  "utilisation",
                                                  "step_ms",
                                                  "exposed_comm_ms",
                                                  "exposed_comm_ms_max",
                                                  "comm_ms",
                                                  "gathered_expert_bytes",
                                                  "gathered_dense_bytes",
                                                  "a2a_bytes",
                                                  "peak_state_bytes",
                                                  "prefetch_hits",
                                                  "prefetch_misses",
                                                  "miss_bytes",
                                                  "exact_prefetches",
                                                  "wasted_bytes",
                                                  "needed_expert_bytes",
                                                  "active_fraction",
                                                  "spread"};
  return fields;
}

RunSummary summarise_run(const std::vector<moe::StepLog>& steps, int64_t warmup) {
  MOEZERO_CHECK(int64_t(steps.size()) > warmup, "bench: ", steps.size(), " steps, warmup ", warmup);
  std::vector<std::vector<Value>> per_field(row_fields().size());
  for (size_t i = size_t(warmup); i < steps.size(); ++i) {
    const std::vector<Value> v = step_values(steps[i]);
    for (size_t f = 0; f < v.size(); ++f) per_field[f].push_back(v[f]);
  }
  RunSummary r;
  for (const auto& values : per_field) r.values.push_back(median_of(values));
  r.values[field_index("utilisation")].reset();
  r.values[field_index("spread")].reset();
  return r;
}

std::vector<Row> combine(const std::vector<std::string>& names,
                         const std::vector<std::vector<RunSummary>>& runs) {
  const size_t tps = field_index("tokens_per_s"), ms = field_index("step_ms");
  std::vector<Row> rows;
  for (size_t s = 0; s < names.size(); ++s) {
    if (runs[s].empty()) continue;  // skipped strategy
    Row row{names[s], std::vector<Value>(row_fields().size())};
    for (size_t f = 0; f < row.values.size(); ++f) {
      std::vector<Value> over_repeats;
      for (const RunSummary& r : runs[s]) over_repeats.push_back(r.values[f]);
      row.values[f] = median_of(over_repeats);
    }
    double lo = INFINITY, hi = 0.0;
    for (const RunSummary& r : runs[s]) {
      lo = std::min(lo, r.values[tps].value_or(0.0));
      hi = std::max(hi, r.values[tps].value_or(0.0));
    }
    if (lo > 0) row.values[field_index("spread")] = hi / lo;
    rows.push_back(std::move(row));
  }
  const auto compute =
      std::find_if(rows.begin(), rows.end(), [](const Row& r) { return r.strategy == "compute"; });
  if (compute != rows.end() && compute->values[ms])
    for (Row& r : rows)
      if (r.values[ms] && *r.values[ms] > 0)
        r.values[field_index("utilisation")] = *compute->values[ms] / *r.values[ms];
  return rows;
}

// A cell of the table: "-" when the counter is absent; bytes in binary units.
std::string cell(const std::string& field, const Value& v) {
  if (!v) return "-";
  char buf[64];
  if (field.find("bytes") != std::string::npos)
    return format_bytes(static_cast<uint64_t>(std::llround(*v)));
  if (field == "utilisation" || field == "spread" || field == "active_fraction")
    std::snprintf(buf, sizeof buf, "%.3f", *v);
  else if (field.find("_ms") != std::string::npos)
    std::snprintf(buf, sizeof buf, "%.1f", *v);
  else
    std::snprintf(buf, sizeof buf, "%.0f", *v);
  return buf;
}

// The table: one line per strategy, columns in row_fields() order, each as wide as its widest.
void print_table(const std::vector<Row>& rows) {
  const auto& fields = row_fields();
  std::vector<std::vector<std::string>> lines{{"strategy"}};
  lines[0].insert(lines[0].end(), fields.begin(), fields.end());
  for (const Row& r : rows) {
    std::vector<std::string> l{r.strategy};
    for (size_t f = 0; f < fields.size(); ++f) l.push_back(cell(fields[f], r.values[f]));
    lines.push_back(std::move(l));
  }
  std::vector<size_t> width(lines[0].size(), 0);
  for (const auto& l : lines)
    for (size_t c = 0; c < l.size(); ++c) width[c] = std::max(width[c], l[c].size());
  for (const auto& l : lines) {
    std::string out;
    for (size_t c = 0; c < l.size(); ++c) {
      std::string pad(width[c] - l[c].size(), ' ');
      out += c == 0 ? l[c] + pad : "  " + pad + l[c];
    }
    std::printf("%s\n", out.c_str());
  }
}

void write_json(const std::vector<Row>& rows, const std::string& path, const char* who) {
  nlohmann::ordered_json j;
  j["rows"] = nlohmann::ordered_json::array();
  for (const Row& r : rows) {
    nlohmann::ordered_json row;
    row["strategy"] = r.strategy;
    for (size_t f = 0; f < r.values.size(); ++f)
      row[row_fields()[f]] = r.values[f] ? nlohmann::ordered_json(*r.values[f]) : nullptr;
    j["rows"].push_back(std::move(row));
  }
  std::ofstream out(path);
  MOEZERO_REQUIRE(out.good(), who, ": --json ", path, ": cannot open for writing");
  out << j.dump(2) << "\n";
  MOEZERO_REQUIRE(out.good(), who, ": --json ", path, ": write failed");
}

int64_t parse_count(const std::string& v, const char* what, int64_t min) {
  size_t used = 0;
  int64_t n = -1;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || n < min)
    MOEZERO_USER_ERROR(what, " needs an integer >= ", min, ", got '", v, "'");
  return n;
}

std::vector<std::string> split_list(const std::string& list, const char* what) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  MOEZERO_REQUIRE(!out.empty(), what, " needs a comma-separated list");
  return out;
}

}  // namespace moezero::bench
