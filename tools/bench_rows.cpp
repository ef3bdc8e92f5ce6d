// tools/bench_rows.cpp — the strategy table of `moezero bench`, the reduction of step logs to
// one row per strategy and the frontier (tools/bench.h); tools/bench_report.cpp prints them.
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

// The incumbents' gradient reduction: every local expert's, inactive ones as zeros.
constexpr const char* kAllExperts = "zero.expert_grads=all";

// The strategy table: name -> overrides (README, "Benchmark: moezero bench"). `moezero` is the
// config as given; `moezero-cache=P` is resolved in resolve_strategy.
const std::map<std::string, std::vector<std::string>>& strategy_table() {
  static const std::map<std::string, std::vector<std::string>> table = {
      // The denominator: ZeRO-1 (the optimizer work every strategy shares: sharded AdamW) with
      // the emulated link off, so communication costs only in-process copies. Not stage 0: its
      // replicated AdamW does world_size times the optimizer work of every other row.
      {"compute", {"zero.stage=1", "comm_emulation.link_gbps=0"}},
      // Every incumbent row reduces every local expert's gradient, the inactive ones as zeros
      // (zero.expert_grads=all, kAllExperts): DeepSpeed-MoE pads each expert to its capacity,
      // FSDP2 reduces torchtitan's stacked expert weights whole and Megatron-Core its contiguous
      // gradient buffers; skipping an expert needs the ranks to agree that nobody routed to it,
      // which only moezero (and its z3-none ablations) does.
      {"z1", {"zero.stage=1", kAllExperts}},
      {"z2", {"zero.stage=2", kAllExperts}},
      // The incumbents' ZeRO-3 for MoE: DeepSpeed leaf module, FSDP2 unresharded block.
      // Both regather dense blocks in every micro-batch (keep_dense_bytes=0).
      {"z3-leaf",
       {"zero.stage=3", "zero.moe_gather=leaf", "prefetch.policy=none",
        "shard_cache.capacity_bytes=0", "zero.keep_dense_bytes=0", kAllExperts}},
      {"z3-fsdp",
       {"zero.stage=3", "zero.moe_gather=fsdp", "prefetch.policy=none",
        "shard_cache.capacity_bytes=0", "zero.keep_dense_bytes=0", kAllExperts}},
      // The incumbents at their best documented tuning (issue 27). DeepSpeed with
      // stage3_max_reuse_distance above the model: the leaf block kept from its forward to its
      // backward (the fsdp gather), gathered again in every micro-batch (no cache); dense groups
      // kept within the config's zero.keep_dense_bytes (DeepSpeed would keep them from forward
      // to backward only: fewer dense bytes than DeepSpeed moves, in the incumbent's favour).
      {"z3-leaf-reuse",
       {"zero.stage=3", "zero.moe_gather=fsdp", "prefetch.policy=none",
        "shard_cache.capacity_bytes=0", kAllExperts}},
      // FSDP2 with reshard_after_forward=False and set_reshard_after_backward(False) under
      // gradient accumulation: everything gathered once per step and kept across its
      // micro-batches, within the same byte budgets as the `moezero` row (the config's
      // shard_cache.capacity_bytes for the experts, zero.keep_dense_bytes for dense groups).
      {"z3-fsdp-keep",
       {"zero.stage=3", "zero.moe_gather=fsdp", "prefetch.policy=none", kAllExperts}},
      // DeepSpeed ZeRO++ (Wang et al. 2023): z3-leaf-reuse with its three communication
      // reductions as this build has them. qwZ, block-quantised int8 weight gathers:
      // zero.quantized_weights=true (zero.quantization_block as configured, 2048 by default).
      // qgZ (int8 gradient reduction across nodes, zero.quantized_gradients=true) and hpZ (a
      // secondary shard inside the node, zero.hpz_partition_size = the preset's
      // comm_emulation.ranks_per_node when above 1) are added by resolve_strategy (zeropp_extras).
      {"zeropp",
       {"zero.stage=3", "zero.moe_gather=fsdp", "prefetch.policy=none",
        "shard_cache.capacity_bytes=0", "zero.quantized_weights=true", kAllExperts}},
      // moezero's agreement on active experts only (gathers and gradient reductions): no
      // prefetch, no cache, nothing kept.
      {"z3-none",
       {"zero.stage=3", "prefetch.policy=none", "shard_cache.capacity_bytes=0",
        "zero.keep_dense_bytes=0"}},
      // The same, each active expert held from its forward to its backward (FSDP2's
      // reshard_after_forward=False, per expert, without a byte limit).
      {"z3-none-hold",
       {"zero.stage=3", "prefetch.policy=none", "shard_cache.capacity_bytes=0",
        "zero.keep_dense_bytes=0", "zero.reshard_after_forward=false"}},
      {"moezero", {}},
      // The ablation: moezero without the routing prediction (cache and dense keep stay).
      {"moezero-nopredict", {"prefetch.policy=none"}},
      // moezero with ZeRO++'s quantised weight gathers (qwZ).
      {"moezero-qw", {"zero.quantized_weights=true"}},
      // moezero with ZeRO++'s quantised gradient reduction only (qgZ): two hops, full precision
      // inside a node, int8 across nodes; no extra state and no weight quantisation.
      {"moezero-qg", {"zero.quantized_gradients=true"}},
      // moezero with all three of ZeRO++'s reductions, as the zeropp row has them.
      {"moezero-zeropp", {"zero.quantized_weights=true"}},
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

// Maximum of values that are all present; nullopt when any is absent (as median_of).
Value max_of(const std::vector<Value>& values) {
  Value best;
  for (const Value& x : values) {
    if (!x) return std::nullopt;
    best = std::max(best.value_or(*x), *x);
  }
  return best;
}

Value min_of(const std::vector<Value>& values) {
  Value least;
  for (const Value& x : values) {
    if (!x) return std::nullopt;
    least = std::min(least.value_or(*x), *x);
  }
  return least;
}

size_t field_index(std::string_view name) {
  const auto& f = row_fields();
  const auto it = std::find(f.begin(), f.end(), name);
  MOEZERO_CHECK(it != f.end(), "bench: no field ", name);
  return static_cast<size_t>(it - f.begin());
}

// Rank 0's value of a per-rank time (comm_ms, exposed_comm_ms) when the field list has it per
// rank; else the step's total over ranks divided by the world size (the mean rank).
Value rank0_time(const train::StepLog& s, std::string_view name, double step_total) {
  if (const Value v = rank_counter(s.ranks.at(0), name)) return v;
  return step_total / static_cast<double>(s.ranks.size());
}

Value max_over_ranks(const train::StepLog& s, std::string_view name) {
  Value best;
  for (const train::RankStepStats& r : s.ranks) {
    const Value v = rank_counter(r, name);
    if (!v) return std::nullopt;
    best = std::max(best.value_or(*v), *v);
  }
  return best;
}

// The mean over the step's ranks of a counter (nullopt when absent or without ranks). The link
// tiers' bytes are taken so: a ring's hops differ by rank (under 2 ranks per node, ranks 0 and 2
// send only inside their node, ranks 1 and 3 only across), so no one rank speaks for the step.
Value mean_over_ranks(const train::StepLog& s, std::string_view name) {
  if (s.ranks.empty()) return std::nullopt;
  double sum = 0.0;
  for (const train::RankStepStats& r : s.ranks) {
    const Value v = rank_counter(r, name);
    if (!v) return std::nullopt;
    sum += *v;
  }
  return sum / static_cast<double>(s.ranks.size());
}

// Every field of one step (rank 0, except the means and maxima over ranks), row_fields() order.
std::vector<Value> step_values(const train::StepLog& s) {
  const train::RankStepStats& r0 = s.ranks.at(0);
  std::vector<Value> v(row_fields().size());
  auto set = [&](std::string_view name, Value x) { v[field_index(name)] = x; };
  set("tokens_per_s", s.tokens_per_s);
  set("step_ms", s.tokens_per_s > 0 ? Value{1000.0 * double(s.tokens) / s.tokens_per_s} : Value{});
  set("exposed_comm_ms", rank0_time(s, "exposed_comm_ms", s.comm.exposed_comm_ms));
  set("exposed_comm_ms_max", max_over_ranks(s, "exposed_comm_ms"));
  set("comm_ms", rank0_time(s, "comm_ms", s.comm.comm_ms));
  set("peak_state_bytes", double(peak_state_over_ranks(s)));
  for (const char* name :
       {"gathered_expert_bytes", "gathered_dense_bytes", "gathered_wire_bytes", "a2a_bytes",
        "reduce_scattered_bytes", "all_reduced_bytes", "prefetch_hits", "prefetch_misses",
        "miss_bytes", "exact_prefetches", "wasted_bytes", "needed_expert_bytes"})
    set(name, rank_counter(r0, name));
  for (const char* name : {"intra_node_bytes", "inter_node_bytes"})
    set(name, mean_over_ranks(s, name));
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
          "z3-leaf-reuse",
          "zeropp",
          "z3-fsdp",
          "z3-fsdp-keep",
          "z3-none",
          "z3-none-hold",
          "moezero",
          "moezero-nopredict",
          "moezero-qw",
          "moezero-qg",
          "moezero-zeropp",
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
  for (const GroupSpec& g : model::Transformer(cfg.model).param_groups()) {
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
  for (const GroupSpec& g : model::Transformer(cfg.model).param_groups())
    if (g.kind == GroupKind::Expert) elems += uint64_t(GroupLayout(g).padded_numel(edp));
  return elems * dtype_size_bytes(cfg.train.dtype) / uint64_t(ep);
}

// ZeRO++'s qgZ and hpZ for the zeropp rows: quantised gradients always (one rank per node on a
// one-tier preset: every hop crosses nodes), a secondary partition per node on a two-tier one.
static std::vector<std::string> zeropp_extras(const Config& base) {
  std::vector<std::string> v = {"zero.quantized_gradients=true"};
  if (base.comm_emulation.ranks_per_node > 1)
    v.push_back("zero.hpz_partition_size=" + std::to_string(base.comm_emulation.ranks_per_node));
  return v;
}

Strategy resolve_strategy(const std::string& name, const Config& base) {
  const auto& table = strategy_table();
  if (const auto it = table.find(name); it != table.end()) {
    Strategy s{name, it->second};
    if (name == "zeropp" || name == "moezero-zeropp")
      for (std::string& o : zeropp_extras(base)) s.overrides.push_back(std::move(o));
    return s;
  }
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

std::optional<double> rank_counter(const train::RankStepStats& s, std::string_view name) {
#define MOEZERO_BENCH_COUNTER(field, unit, source) \
  if (name == #field) return static_cast<double>(s.field);
  MOEZERO_RANK_STEP_COUNTERS(MOEZERO_BENCH_COUNTER)
#undef MOEZERO_BENCH_COUNTER
  return std::nullopt;
}

uint64_t peak_state_bytes(const train::RankStepStats& s) { return s.peak_state_bytes; }

uint64_t peak_state_over_ranks(const train::StepLog& s) {
  uint64_t peak = 0;
  for (const train::RankStepStats& r : s.ranks) peak = std::max(peak, peak_state_bytes(r));
  return peak;
}

std::vector<size_t> rotated_order(size_t n, int64_t rep) {
  std::vector<size_t> order(n);
  const size_t shift = n == 0 ? 0 : static_cast<size_t>(rep % static_cast<int64_t>(n));
  for (size_t k = 0; k < n; ++k) order[k] = (k + shift) % n;
  return order;
}

bool is_moezero_row(std::string_view strategy) {
  return strategy == "moezero" || strategy.rfind("moezero-", 0) == 0;
}

bool is_incumbent_row(std::string_view strategy) {
  return strategy != "compute" && !is_moezero_row(strategy);
}

bool is_maximum_field(std::string_view field) { return field == "peak_state_bytes"; }

const std::vector<std::string>& row_fields() {
  static const std::vector<std::string> fields = {"tokens_per_s",
                                                  "utilisation",
                                                  "step_ms",
                                                  "exposed_comm_ms",
                                                  "exposed_comm_ms_max",
                                                  "comm_ms",
                                                  "gathered_expert_bytes",
                                                  "gathered_dense_bytes",
                                                  "gathered_wire_bytes",
                                                  "a2a_bytes",
                                                  "intra_node_bytes",
                                                  "inter_node_bytes",
                                                  "reduce_scattered_bytes",
                                                  "all_reduced_bytes",
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

RunSummary summarise_run(const std::vector<train::StepLog>& steps, int64_t warmup) {
  MOEZERO_CHECK(int64_t(steps.size()) > warmup, "bench: ", steps.size(), " steps, warmup ", warmup);
  std::vector<std::vector<Value>> per_field(row_fields().size());
  for (size_t i = size_t(warmup); i < steps.size(); ++i) {
    const std::vector<Value> v = step_values(steps[i]);
    for (size_t f = 0; f < v.size(); ++f) per_field[f].push_back(v[f]);
  }
  RunSummary r;
  for (size_t f = 0; f < per_field.size(); ++f)
    r.values.push_back(is_maximum_field(row_fields()[f]) ? max_of(per_field[f])
                                                         : median_of(per_field[f]));
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
    const size_t n = row_fields().size();
    Row row{names[s], std::vector<Value>(n), std::vector<Value>(n), std::vector<Value>(n)};
    for (size_t f = 0; f < n; ++f) {
      std::vector<Value> over_repeats;
      for (const RunSummary& r : runs[s]) over_repeats.push_back(r.values[f]);
      row.values[f] =
          is_maximum_field(row_fields()[f]) ? max_of(over_repeats) : median_of(over_repeats);
      row.min[f] = min_of(over_repeats);
      row.max[f] = max_of(over_repeats);
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

std::vector<FrontierEntry> frontier(const std::vector<Row>& rows) {
  const size_t tps = field_index("tokens_per_s"), peak = field_index("peak_state_bytes");
  std::vector<FrontierEntry> out;
  Value compute;  // the lower bound's tokens/s, when measured
  for (const Row& r : rows)
    if (r.strategy == "compute" && r.values[tps]) compute = r.values[tps];
  for (const Row& inc : rows) {
    if (!is_incumbent_row(inc.strategy) || !inc.values[tps] || !inc.values[peak]) continue;
    FrontierEntry e;
    e.incumbent = inc.strategy;
    e.incumbent_tokens_per_s = *inc.values[tps];
    e.incumbent_peak_state_bytes = *inc.values[peak];
    for (const Row& m : rows) {
      if (!is_moezero_row(m.strategy) || !m.values[tps] || !m.values[peak]) continue;
      if (*m.values[peak] > e.incumbent_peak_state_bytes) continue;  // more state: not a peer
      if (e.moezero_tokens_per_s && *m.values[tps] <= *e.moezero_tokens_per_s) continue;
      e.moezero = m.strategy;
      e.moezero_tokens_per_s = m.values[tps];
      e.moezero_peak_state_bytes = m.values[peak];
    }
    if (e.moezero && e.incumbent_tokens_per_s > 0)
      e.ratio = *e.moezero_tokens_per_s / e.incumbent_tokens_per_s;
    if (compute && e.incumbent_tokens_per_s > 0) e.ceiling = *compute / e.incumbent_tokens_per_s;
    out.push_back(std::move(e));
  }
  return out;
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
