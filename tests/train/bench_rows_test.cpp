// tools/bench_rows.cpp and tools/bench_report.cpp without running the trainer: the strategy
// table's incumbents at their best (issue 27), the rotated strategy order, the peak state as the
// maximum over ranks, measured steps and repeats (made-up per-rank samples), the frontier's
// choice (made-up rows), the JSON fields, and the bench presets loading with every strategy.
//
// MOEZERO_SOURCE_DIR (from CMake): the presets under benchmarks/configs.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/config.h"
#include "tools/bench.h"

namespace moezero::bench {
namespace {

const std::string kPresets = std::string(MOEZERO_SOURCE_DIR) + "/benchmarks/configs/";

size_t at(std::string_view field) {
  const auto& f = row_fields();
  return static_cast<size_t>(std::find(f.begin(), f.end(), field) - f.begin());
}

bool has(const Strategy& s, const std::string& override_) {
  return std::find(s.overrides.begin(), s.overrides.end(), override_) != s.overrides.end();
}

TEST(BenchRows, IncumbentsAtTheirBestAreDefaultRows) {
  const Config base = load_config(kPresets + "ethernet.json");
  const std::vector<std::string> names = default_strategy_names();
  for (const char* n : {"z3-leaf-reuse", "z3-fsdp-keep", "z3-none-hold", "moezero-nopredict",
                        "zeropp", "moezero-qw", "moezero-qg"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  // FSDP2 kept across micro-batches: the fsdp gather within moezero's own budgets (no cache or
  // dense-keep override, so the config's values apply to both rows alike).
  const Strategy keep = resolve_strategy("z3-fsdp-keep", base);
  EXPECT_TRUE(has(keep, "zero.moe_gather=fsdp"));
  for (const std::string& o : keep.overrides) {
    EXPECT_EQ(o.find("shard_cache.capacity_bytes"), std::string::npos) << o;
    EXPECT_EQ(o.find("zero.keep_dense_bytes"), std::string::npos) << o;
  }
  // DeepSpeed's reuse distance: the block held from forward to backward, nothing cached.
  const Strategy reuse = resolve_strategy("z3-leaf-reuse", base);
  EXPECT_TRUE(has(reuse, "zero.moe_gather=fsdp"));
  EXPECT_TRUE(has(reuse, "shard_cache.capacity_bytes=0"));
  // z3-none's overrides plus holding.
  const Strategy none = resolve_strategy("z3-none", base);
  const Strategy hold = resolve_strategy("z3-none-hold", base);
  for (const std::string& o : none.overrides) EXPECT_TRUE(has(hold, o)) << o;
  EXPECT_TRUE(has(hold, "zero.reshard_after_forward=false"));
  EXPECT_EQ(hold.overrides.size(), none.overrides.size() + 1);
  // The ablation: the default with the prediction off, nothing else.
  EXPECT_EQ(resolve_strategy("moezero-nopredict", base).overrides,
            std::vector<std::string>{"prefetch.policy=none"});
  // ZeRO++: DeepSpeed's reuse distance plus quantised weight gathers (qwZ) and quantised
  // gradients (qgZ); one tier (ethernet): no secondary partition (hpZ).
  const Strategy zpp = resolve_strategy("zeropp", base);
  for (const std::string& o : reuse.overrides) EXPECT_TRUE(has(zpp, o)) << o;
  EXPECT_TRUE(has(zpp, "zero.quantized_weights=true"));
  EXPECT_TRUE(has(zpp, "zero.quantized_gradients=true"));
  EXPECT_EQ(zpp.overrides.size(), reuse.overrides.size() + 2);
  // Two tiers of 2 ranks per node: hpZ over the node, on zeropp and moezero-zeropp alike.
  const Config two_tier = load_config(kPresets + "ethernet2tier.json");
  EXPECT_TRUE(has(resolve_strategy("zeropp", two_tier), "zero.hpz_partition_size=2"));
  EXPECT_EQ(
      resolve_strategy("moezero-zeropp", two_tier).overrides,
      (std::vector<std::string>{"zero.quantized_weights=true", "zero.quantized_gradients=true",
                                "zero.hpz_partition_size=2"}));
  // moezero's default plus quantised weight gathers, nothing else.
  EXPECT_EQ(resolve_strategy("moezero-qw", base).overrides,
            std::vector<std::string>{"zero.quantized_weights=true"});
  // moezero's default plus quantised gradient reduction (qgZ) only: no hpZ state, no qwZ.
  EXPECT_EQ(resolve_strategy("moezero-qg", two_tier).overrides,
            std::vector<std::string>{"zero.quantized_gradients=true"});
  EXPECT_TRUE(is_incumbent_row("zeropp"));
  EXPECT_FALSE(is_incumbent_row("moezero-qw"));
  EXPECT_FALSE(is_incumbent_row("moezero-qg"));
  // The incumbents reduce every local expert's gradient (zeros for the inactive ones): none of
  // DeepSpeed, FSDP2 or Megatron-Core agrees on the active experts. moezero's rows and its
  // agreement ablations (z3-none, z3-none-hold) reduce the active ones only.
  for (const char* n :
       {"z1", "z2", "z3-leaf", "z3-leaf-reuse", "zeropp", "z3-fsdp", "z3-fsdp-keep"})
    EXPECT_TRUE(has(resolve_strategy(n, base), "zero.expert_grads=all")) << n;
  for (const std::string& n : names) {
    if (!is_incumbent_row(n) || n.starts_with("z3-none")) {
      EXPECT_FALSE(has(resolve_strategy(n, base), "zero.expert_grads=all")) << n;
    }
  }
}

TEST(BenchRows, EveryPresetLoadsWithEveryStrategy) {
  for (const char* preset : {"ethernet.json", "sparse.json", "ethernet2tier.json"}) {
    const Config base = load_config(kPresets + preset);
    for (const std::string& name : default_strategy_names()) {
      const Config c = load_config(kPresets + preset, resolve_strategy(name, base).overrides);
      EXPECT_EQ(c.parallel.world_size, 4) << preset << " " << name;
    }
  }
  // The two-tier preset: 2 nodes of 2 ranks, a faster link inside a node than between.
  const Config two = load_config(kPresets + "ethernet2tier.json");
  EXPECT_EQ(two.comm_emulation.ranks_per_node, 2);
  EXPECT_GT(two.comm_emulation.intra_node_gbps, two.comm_emulation.link_gbps);
  EXPECT_GT(two.comm_emulation.link_gbps, 0.0);
}

TEST(BenchRows, RepeatsRotateTheStrategyOrder) {
  EXPECT_EQ(rotated_order(3, 0), (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(rotated_order(3, 1), (std::vector<size_t>{1, 2, 0}));
  EXPECT_EQ(rotated_order(3, 2), (std::vector<size_t>{2, 0, 1}));
  EXPECT_EQ(rotated_order(3, 3), rotated_order(3, 0));
  EXPECT_TRUE(rotated_order(0, 5).empty());
  // Over n repeats every strategy runs once in every position.
  const size_t n = 5;
  for (size_t pos = 0; pos < n; ++pos) {
    std::set<size_t> seen;
    for (int64_t rep = 0; rep < int64_t(n); ++rep) seen.insert(rotated_order(n, rep)[pos]);
    EXPECT_EQ(seen.size(), n) << "position " << pos;
  }
}

// A step of `peaks.size()` ranks with these peak states and rank 0's tokens/s.
train::StepLog step(double tokens_per_s, std::vector<uint64_t> peaks) {
  train::StepLog s;
  s.tokens = 1000;
  s.tokens_per_s = tokens_per_s;
  for (uint64_t p : peaks) {
    train::RankStepStats r;
    r.peak_state_bytes = p;
    r.gathered_expert_bytes = 7;
    s.ranks.push_back(r);
  }
  return s;
}

TEST(BenchRows, PeakStateIsTheMaximumOverRanksStepsAndRepeats) {
  EXPECT_EQ(peak_state_over_ranks(step(1, {10, 40, 30, 20})), 40u);
  EXPECT_EQ(peak_state_over_ranks(train::StepLog{}), 0u);
  // The warm-up step's larger peak (999) is left out; rank 2's 50 in step 3 is the run's peak,
  // though rank 0's own peaks are all 10 and no step's median reaches it.
  const std::vector<train::StepLog> run1 = {step(100, {999, 1, 1, 1}), step(200, {10, 20, 30, 40}),
                                            step(300, {10, 20, 50, 40}),
                                            step(400, {10, 20, 30, 40})};
  const RunSummary a = summarise_run(run1, 1);
  EXPECT_EQ(a.values[at("peak_state_bytes")], 50.0);
  EXPECT_EQ(a.values[at("tokens_per_s")], 300.0);  // the median of the measured steps
  EXPECT_EQ(a.values[at("gathered_expert_bytes")], 7.0);
  EXPECT_FALSE(a.values[at("utilisation")]);
  const RunSummary b = summarise_run({step(100, {60, 1}), step(500, {1, 1})}, 0);
  const RunSummary c = summarise_run({step(150, {5, 1})}, 0);
  EXPECT_EQ(b.values[at("tokens_per_s")], 300.0);
  const std::vector<Row> rows = combine({"z2"}, {{a, b, c}});
  ASSERT_EQ(rows.size(), 1u);
  const Row& r = rows[0];
  EXPECT_EQ(r.values[at("peak_state_bytes")], 60.0);  // max over repeats, not their median
  EXPECT_EQ(r.values[at("tokens_per_s")], 300.0);     // median of 300, 300, 150
  EXPECT_EQ(r.min[at("tokens_per_s")], 150.0);
  EXPECT_EQ(r.max[at("tokens_per_s")], 300.0);
  EXPECT_EQ(r.min[at("peak_state_bytes")], 5.0);
  EXPECT_EQ(r.values[at("spread")], 2.0);
}

// The link counters are columns: each step's mean over ranks of the bytes on each tier (a ring's
// rank 0 may send only inside its node while rank 1 sends only across), medians over the
// measured steps.
TEST(BenchRows, LinkTierBytesAreMeansOverRanks) {
  std::vector<train::StepLog> run;
  for (uint64_t k : {1, 2, 3}) {
    train::StepLog s = step(100, {1, 1});
    s.ranks[0].intra_node_bytes = 10 * k;
    s.ranks[1].intra_node_bytes = 30 * k;
    s.ranks[1].inter_node_bytes = 1000 * k;
    run.push_back(s);
  }
  const RunSummary a = summarise_run(run, 0);
  EXPECT_EQ(a.values[at("intra_node_bytes")], 40.0);    // median of 20, 40, 60
  EXPECT_EQ(a.values[at("inter_node_bytes")], 1000.0);  // median of 500, 1000, 1500
}

Row made_up(const std::string& name, double tokens_per_s, double peak) {
  const size_t n = row_fields().size();
  Row r{name, std::vector<Value>(n), std::vector<Value>(n), std::vector<Value>(n)};
  r.values[at("tokens_per_s")] = tokens_per_s;
  r.values[at("peak_state_bytes")] = peak;
  return r;
}

TEST(BenchRows, FrontierPicksTheFastestMoezeroAtNoMorePeakState) {
  EXPECT_TRUE(is_moezero_row("moezero"));
  EXPECT_TRUE(is_moezero_row("moezero-cache=25"));
  EXPECT_FALSE(is_moezero_row("moezerox"));
  EXPECT_FALSE(is_incumbent_row("compute"));
  EXPECT_TRUE(is_incumbent_row("z3-fsdp-keep"));
  const std::vector<Row> rows = {
      made_up("compute", 500, 10),  // not an incumbent: no entry, never a candidate
      made_up("z2", 100, 50),
      made_up("z3-fsdp", 80, 40),
      made_up("z3-leaf", 60, 30),
      made_up("z1", 90, 20),
      made_up("moezero", 120, 45),
      made_up("moezero-cache=0", 70, 30),
      made_up("moezero-cache=50", 90, 40),
      made_up("moezero-nopredict", 90, 40)};
  const std::vector<FrontierEntry> f = frontier(rows);
  ASSERT_EQ(f.size(), 4u);
  EXPECT_EQ(f[0].incumbent, "z2");
  EXPECT_EQ(f[0].moezero, "moezero");  // the fastest with 45 <= 50
  EXPECT_DOUBLE_EQ(*f[0].ratio, 1.2);
  EXPECT_EQ(f[1].incumbent, "z3-fsdp");
  EXPECT_EQ(f[1].moezero, "moezero-cache=50");  // equal peak counts; the tie to the first
  EXPECT_DOUBLE_EQ(*f[1].ratio, 90.0 / 80.0);
  EXPECT_EQ(f[2].moezero, "moezero-cache=0");
  EXPECT_DOUBLE_EQ(*f[2].moezero_peak_state_bytes, 30.0);
  EXPECT_EQ(f[3].incumbent, "z1");
  EXPECT_FALSE(f[3].moezero) << "no moezero row fits in 20";
  EXPECT_FALSE(f[3].ratio);
  // The ceiling: the compute row (500 tokens/s) over each incumbent, whatever fits.
  EXPECT_DOUBLE_EQ(*f[0].ceiling, 5.0);
  EXPECT_DOUBLE_EQ(*f[3].ceiling, 500.0 / 90.0);
  const nlohmann::ordered_json j = frontier_json(f);
  EXPECT_EQ(j[0]["moezero"], "moezero");
  EXPECT_TRUE(j[3]["moezero"].is_null());
  EXPECT_TRUE(j[3]["ratio"].is_null());
  EXPECT_DOUBLE_EQ(j[3]["ceiling"].get<double>(), 500.0 / 90.0);
  // Without a compute row there is no ceiling.
  const std::vector<Row> no_compute(rows.begin() + 1, rows.end());
  EXPECT_FALSE(frontier(no_compute)[0].ceiling);
  EXPECT_TRUE(frontier_json(frontier(no_compute))[0]["ceiling"].is_null());
}

TEST(BenchRows, JsonRowsCarryMediansMinAndMax) {
  Row r = made_up("z2", 100, 50);
  r.min[at("tokens_per_s")] = 90;
  r.max[at("tokens_per_s")] = 110;
  const nlohmann::ordered_json j = rows_json({r});
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["strategy"], "z2");
  EXPECT_EQ(j[0]["tokens_per_s"], 100.0);
  EXPECT_EQ(j[0]["peak_state_bytes"], 50.0);
  EXPECT_TRUE(j[0]["step_ms"].is_null());
  EXPECT_EQ(j[0]["tokens_per_s_min"], 90.0);
  EXPECT_EQ(j[0]["tokens_per_s_max"], 110.0);
  EXPECT_TRUE(j[0]["peak_state_bytes_max"].is_null());
  EXPECT_FALSE(j[0].contains("spread_min"));
  for (const std::string& f : row_fields()) EXPECT_TRUE(j[0].contains(f)) << f;
  for (const auto& [key, value] : j[0].items())  // flat: what scripts/tables.py accepts
    EXPECT_TRUE(key == "strategy" || value.is_null() || value.is_number()) << key;
}

}  // namespace
}  // namespace moezero::bench
