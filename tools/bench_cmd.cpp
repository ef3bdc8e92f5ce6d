// tools/bench_cmd.cpp — `moezero bench --config FILE [--set k=v ...] [--strategies LIST]
// [--repeats N] [--steps N] [--warmup N] [--json OUT]`: the benchmark of record. Runs the real
// trainer for each strategy (tools/bench.h), the strategy order rotated from one repeat to the
// next, runs warmup + steps optimizer steps and drops the warm-up ones, and prints one table of
// medians (over steps, then repeats; peak state: the maximum over steps, ranks and repeats)
// with the repeats' min and max, then the frontier table; --json writes the same rows, the
// frontier and the run's parameters.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/allocator.h"
#include "core/config.h"
#include "core/error.h"
#include "tools/bench.h"
#include "tools/cli.h"
#include "train/trainer.h"

namespace moezero::cli {

namespace {

using ::moezero::bench::Row;
using ::moezero::bench::Value;

struct BenchArgs {
  std::string config_path, json_path;
  std::vector<std::string> overrides, strategies;
  int64_t repeats = 3;
  int64_t steps = 10;  // measured steps of every run (train.steps = warmup + steps)
  int64_t warmup = 2;  // leading steps of every run left out of the medians
};

BenchArgs parse_bench_args(const std::vector<std::string>& args) {
  BenchArgs a;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      MOEZERO_USAGE_REQUIRE(i + 1 < args.size(), "bench: ", flag, " needs a value");
      return args[++i];
    };
    if (args[i] == "--config")
      a.config_path = value("--config");
    else if (args[i] == "--set")
      a.overrides.push_back(value("--set"));
    else if (args[i] == "--strategies")
      a.strategies = bench::split_list(value("--strategies"), "bench: --strategies");
    else if (args[i] == "--repeats")
      a.repeats = bench::parse_count(value("--repeats"), "bench: --repeats", 1);
    else if (args[i] == "--steps")
      a.steps = bench::parse_count(value("--steps"), "bench: --steps", 1);
    else if (args[i] == "--warmup")
      a.warmup = bench::parse_count(value("--warmup"), "bench: --warmup", 0);
    else if (args[i] == "--json")
      a.json_path = value("--json");
    else
      MOEZERO_USAGE_ERROR("bench: unknown option '", args[i], "'");
  }
  MOEZERO_USAGE_REQUIRE(!a.config_path.empty(), "bench: --config FILE is required");
  if (a.strategies.empty()) a.strategies = bench::default_strategy_names();
  // Every run's length comes from the flags, after the user's --set (the preset's train.steps
  // serves `moezero train`).
  a.overrides.push_back("train.steps=" + std::to_string(a.warmup + a.steps));
  return a;
}

// A strategy ready to run: its config, or empty when the parser rejected its overrides.
struct Planned {
  std::string name;
  std::optional<Config> cfg;
};

// Each strategy's config: the file, the user's --set, then the strategy's overrides. A config
// the parser rejects is skipped with one line saying why (e.g. a key this build lacks).
std::vector<Planned> plan(const BenchArgs& a, const Config& base) {
  std::vector<Planned> out;
  for (const std::string& name : a.strategies) {
    const bench::Strategy s = bench::resolve_strategy(name, base);
    std::vector<std::string> overrides = a.overrides;
    overrides.insert(overrides.end(), s.overrides.begin(), s.overrides.end());
    Planned p{name, std::nullopt};
    try {
      p.cfg = load_config(a.config_path, overrides);
      // One bench run writes nothing: no metrics file, trace or checkpoints.
      p.cfg->train.metrics_file.clear();
      p.cfg->train.save_dir.clear();
      p.cfg->profile.trace.clear();
    } catch (const Error& e) {
      std::printf("  skip     %s: the config rejects its overrides: %s\n", name.c_str(),
                  e.message().c_str());
    }
    out.push_back(std::move(p));
  }
  return out;
}

// Runs every planned strategy `repeats` times, alternating within each repeat in the rotated
// order (bench::rotated_order); [out] runs: per strategy, one summary per repeat (none for a
// skipped strategy); [out] orders: the names in the order each repeat ran them.
std::vector<std::vector<bench::RunSummary>> run_all(const BenchArgs& a,
                                                    const std::vector<Planned>& planned,
                                                    std::vector<std::vector<std::string>>& orders) {
  std::vector<std::vector<bench::RunSummary>> runs(planned.size());
  for (int64_t rep = 0; rep < a.repeats; ++rep) {
    orders.emplace_back();
    for (size_t s : bench::rotated_order(planned.size(), rep)) {
      if (!planned[s].cfg) continue;
      orders.back().push_back(planned[s].name);
      const auto t0 = std::chrono::steady_clock::now();
      const train::TrainResult r = train::train(*planned[s].cfg, train::TrainOptions{});
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      runs[s].push_back(bench::summarise_run(r.steps, a.warmup));
      std::printf("  repeat %lld/%lld  %-18s %9.0f tokens/s  (%.1f s)\n", (long long)rep + 1,
                  (long long)a.repeats, planned[s].name.c_str(),
                  runs[s].back().values[0].value_or(0.0), secs);
      std::fflush(stdout);
    }
  }
  return runs;
}

// What --json writes beside the rows: how they were measured, and the frontier.
nlohmann::ordered_json json_meta(const BenchArgs& a, const Config& base,
                                 const std::vector<std::vector<std::string>>& orders,
                                 const std::vector<bench::FrontierEntry>& frontier) {
  nlohmann::ordered_json j;
  j["config"] = a.config_path;
  j["overrides"] = a.overrides;
  j["repeats"] = a.repeats;
  j["warmup_steps"] = a.warmup;
  j["measured_steps"] = a.steps;
  j["world_size"] = base.parallel.world_size;
  j["local_expert_bytes"] = bench::local_expert_bytes(base);
  j["orders"] = orders;
  j["frontier"] = bench::frontier_json(frontier);
  return j;
}

}  // namespace

int bench(const std::vector<std::string>& args) {
  const BenchArgs a = parse_bench_args(args);
  const Config base = load_config(a.config_path, a.overrides);  // the user's errors are fatal
  std::printf(
      "moezero bench: %s, %lld repeats (strategy order rotated), steps %lld-%lld of each run "
      "measured\n",
      a.config_path.c_str(), (long long)a.repeats, (long long)a.warmup + 1,
      (long long)base.train.steps);
  std::printf("  local expert bytes per rank (all MoE layers): %s\n",
              format_bytes(bench::local_expert_bytes(base)).c_str());
  const std::vector<Planned> planned = plan(a, base);
  std::vector<std::vector<std::string>> orders;
  const auto runs = run_all(a, planned, orders);
  std::vector<std::string> names;
  for (const Planned& p : planned) names.push_back(p.name);
  const std::vector<Row> rows = bench::combine(names, runs);
  std::printf(
      "\nmedians per optimizer step, rank 0, over the measured steps then the repeats; min, max: "
      "the slowest and\nfastest repeat's tokens/s; peak_state_bytes: the largest of any rank in "
      "any measured step and repeat;\nexposed_comm_ms_max: the largest rank's; '-': counter not "
      "in this build; utilisation = compute's step_ms / step_ms;\nspread = max/min tokens/s over "
      "repeats; intra_node_bytes, inter_node_bytes: the mean over ranks\n");
  if (!bench::rank_counter(train::RankStepStats{}, "exposed_comm_ms"))
    std::printf("  comm_ms, exposed_comm_ms: the mean over ranks (no per-rank counter yet)\n");
  bench::print_table(rows, bench::RepeatRange::Show);
  const std::vector<bench::FrontierEntry> front = bench::frontier(rows);
  std::printf(
      "\nfrontier: each incumbent against the fastest moezero row with no more peak state "
      "(ratio: its tokens/s over the incumbent's; ceiling: the compute row's over the "
      "incumbent's, what free communication would give: about the most any strategy can gain "
      "on this machine)\n");
  bench::print_frontier(front);
  if (!a.json_path.empty()) {
    bench::write_json(rows, a.json_path, "bench", json_meta(a, base, orders, front));
    std::printf("json: %s\n", a.json_path.c_str());
  }
  return 0;
}

}  // namespace moezero::cli
