// tools/bench_cmd.cpp — `moezero bench --config FILE [--set k=v ...] [--strategies LIST]
// [--repeats N] [--warmup N] [--json OUT]`: the benchmark of record. Runs the real trainer for
// each strategy (tools/bench.h), strategies alternating within each repeat, drops the warm-up
// steps, and prints one table of medians (over steps, then repeats) with the spread over
// repeats; --json writes the same rows as {"rows": [...]}.
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
  int64_t warmup = 2;  // leading steps of every run left out of the medians
};

int64_t parse_count(const std::string& v, const char* flag, int64_t min) {
  size_t used = 0;
  int64_t n = -1;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || n < min)
    MOEZERO_USER_ERROR("bench: ", flag, " needs an integer >= ", min, ", got '", v, "'");
  return n;
}

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  MOEZERO_REQUIRE(!out.empty(), "bench: --strategies needs a comma-separated list");
  return out;
}

BenchArgs parse_bench_args(const std::vector<std::string>& args) {
  BenchArgs a;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      MOEZERO_REQUIRE(i + 1 < args.size(), "bench: ", flag, " needs a value");
      return args[++i];
    };
    if (args[i] == "--config")
      a.config_path = value("--config");
    else if (args[i] == "--set")
      a.overrides.push_back(value("--set"));
    else if (args[i] == "--strategies")
      a.strategies = split_list(value("--strategies"));
    else if (args[i] == "--repeats")
      a.repeats = parse_count(value("--repeats"), "--repeats", 1);
    else if (args[i] == "--warmup")
      a.warmup = parse_count(value("--warmup"), "--warmup", 0);
    else if (args[i] == "--json")
      a.json_path = value("--json");
    else
      MOEZERO_USER_ERROR("bench: unknown option '", args[i], "' (see `moezero help`)");
  }
  MOEZERO_REQUIRE(!a.config_path.empty(), "bench: --config FILE is required");
  if (a.strategies.empty()) a.strategies = bench::default_strategy_names();
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

// Runs every planned strategy `repeats` times, alternating within each repeat; [out] runs:
// per strategy, one summary per repeat (none for a skipped strategy).
std::vector<std::vector<bench::RunSummary>> run_all(const BenchArgs& a,
                                                    const std::vector<Planned>& planned) {
  std::vector<std::vector<bench::RunSummary>> runs(planned.size());
  for (int64_t rep = 0; rep < a.repeats; ++rep)
    for (size_t s = 0; s < planned.size(); ++s) {
      if (!planned[s].cfg) continue;
      const auto t0 = std::chrono::steady_clock::now();
      const moe::TrainResult r = moe::train(*planned[s].cfg, moe::TrainOptions{});
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      runs[s].push_back(bench::summarise_run(r.steps, a.warmup));
      std::printf("  repeat %lld/%lld  %-18s %9.0f tokens/s  (%.1f s)\n", (long long)rep + 1,
                  (long long)a.repeats, planned[s].name.c_str(),
                  runs[s].back().values[0].value_or(0.0), secs);
      std::fflush(stdout);
    }
  return runs;
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
  const auto& fields = bench::row_fields();
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

void write_json(const std::vector<Row>& rows, const std::string& path) {
  nlohmann::ordered_json j;
  j["rows"] = nlohmann::ordered_json::array();
  for (const Row& r : rows) {
    nlohmann::ordered_json row;
    row["strategy"] = r.strategy;
    for (size_t f = 0; f < r.values.size(); ++f)
      row[bench::row_fields()[f]] = r.values[f] ? nlohmann::ordered_json(*r.values[f]) : nullptr;
    j["rows"].push_back(std::move(row));
  }
  std::ofstream out(path);
  MOEZERO_REQUIRE(out.good(), "bench: --json ", path, ": cannot open for writing");
  out << j.dump(2) << "\n";
  MOEZERO_REQUIRE(out.good(), "bench: --json ", path, ": write failed");
}

}  // namespace

int bench(const std::vector<std::string>& args) {
  const BenchArgs a = parse_bench_args(args);
  const Config base = load_config(a.config_path, a.overrides);  // the user's errors are fatal
  MOEZERO_REQUIRE(base.train.steps > a.warmup, "bench: train.steps (", base.train.steps,
                  ") must exceed --warmup (", a.warmup, ")");
  std::printf("moezero bench: %s, %lld repeats, steps %lld-%lld of each run measured\n",
              a.config_path.c_str(), (long long)a.repeats, (long long)a.warmup + 1,
              (long long)base.train.steps);
  std::printf("  local expert bytes per rank (all MoE layers): %s\n",
              format_bytes(bench::local_expert_bytes(base)).c_str());
  const std::vector<Planned> planned = plan(a, base);
  const auto runs = run_all(a, planned);
  std::vector<std::string> names;
  for (const Planned& p : planned) names.push_back(p.name);
  const std::vector<Row> rows = bench::combine(names, runs);
  std::printf(
      "\nmedians per optimizer step, rank 0 (exposed_comm_ms_max: the largest rank's; '-': "
      "counter not in this build);\nutilisation = compute's step_ms / step_ms; spread = max/min "
      "tokens/s over repeats\n");
  if (!bench::rank_counter(moe::RankStepStats{}, "exposed_comm_ms"))
    std::printf("  comm_ms, exposed_comm_ms: the mean over ranks (no per-rank counter yet)\n");
  print_table(rows);
  if (!a.json_path.empty()) {
    write_json(rows, a.json_path);
    std::printf("json: %s\n", a.json_path.c_str());
  }
  return 0;
}

}  // namespace moezero::cli
