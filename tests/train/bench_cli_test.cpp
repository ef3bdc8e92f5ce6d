// `moezero bench` end to end: the real trainer on the tiny config under two strategies
// (compute, z3-none), 2 repeats of 1 warm-up and 2 measured steps (--steps), --json into this
// test's scratch folder; the rows must carry every field with the repeats' min and max,
// compute's utilisation is exactly 1 (its own step time over itself), byte counters are >= 0,
// compute (stage 0) gathers nothing; the second repeat runs the strategies in rotated order,
// and the frontier names the incumbent z3-none. A second run checks that the default list has
// issue 27's rows (each skipped or run, never unknown).
//
// Paths come from CMake: MOEZERO_BIN, MOEZERO_SOURCE_DIR, MOEZERO_WORK_DIR (a scratch folder).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace fs = std::filesystem;

namespace {

const fs::path kWork = MOEZERO_WORK_DIR;

// Runs a shell command, output to `log`; returns the exit status.
int run(const std::string& cmd, const fs::path& log) {
  const std::string full = cmd + " >" + log.string() + " 2>&1";
  const int rc = std::system(full.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

const char* const kFields[] = {"strategy",
                               "tokens_per_s",
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
                               "peak_state_bytes",
                               "prefetch_hits",
                               "prefetch_misses",
                               "miss_bytes",
                               "exact_prefetches",
                               "wasted_bytes",
                               "needed_expert_bytes",
                               "active_fraction",
                               "spread"};

TEST(BenchCli, TwoStrategiesGiveSaneRows) {
  fs::create_directories(kWork);
  const fs::path json = kWork / "bench.json";
  fs::remove(json);
  const int rc = run(std::string(MOEZERO_BIN) + " bench --config " + MOEZERO_SOURCE_DIR +
                         "/examples/configs/tiny.json --set train.steps=3 --set "
                         "zero.shard_single_rank=true --set comm_emulation.link_gbps=8 "
                         "--strategies compute,z3-none --repeats 2 "
                         "--warmup 1 --steps 2 --json " +
                         json.string(),
                     kWork / "bench.log");
  ASSERT_EQ(rc, 0) << "see " << (kWork / "bench.log");
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j.at("rows").size(), 2u);
  const nlohmann::json& compute = j["rows"][0];
  const nlohmann::json& z3 = j["rows"][1];
  EXPECT_EQ(compute["strategy"], "compute");
  EXPECT_EQ(z3["strategy"], "z3-none");
  for (const nlohmann::json& row : j["rows"]) {
    for (const char* f : kFields) EXPECT_TRUE(row.contains(f)) << row["strategy"] << ": " << f;
    EXPECT_GT(row["tokens_per_s"].get<double>(), 0.0);
    EXPECT_GT(row["step_ms"].get<double>(), 0.0);
    EXPECT_GE(row["spread"].get<double>(), 1.0);
    EXPECT_GT(row["utilisation"].get<double>(), 0.0);
    for (const auto& [key, value] : row.items())
      if (key.find("bytes") != std::string::npos && !value.is_null()) {
        EXPECT_GE(value.get<double>(), 0.0) << row["strategy"] << ": " << key;
      }
    EXPECT_GE(row["exposed_comm_ms"].get<double>(), 0.0);
    EXPECT_LE(row["exposed_comm_ms"].get<double>(), row["comm_ms"].get<double>() + 1e-9);
    const double active = row["active_fraction"].get<double>();  // a MoE model: never null
    EXPECT_GT(active, 0.0);
    EXPECT_LE(active, 1.0);
  }
  EXPECT_EQ(compute["utilisation"].get<double>(), 1.0);
  EXPECT_EQ(compute["gathered_expert_bytes"].get<double>(), 0.0);
  EXPECT_EQ(compute["gathered_dense_bytes"].get<double>(), 0.0);
  EXPECT_GT(z3["gathered_expert_bytes"].get<double>(), 0.0);  // stage 3 gathers its experts
  // One tier (no comm_emulation.ranks_per_node): every byte sent is inter_node_bytes.
  EXPECT_GT(z3["inter_node_bytes"].get<double>(), 0.0);
  for (const nlohmann::json& row : j["rows"]) EXPECT_EQ(row["intra_node_bytes"].get<double>(), 0.0);
  for (const nlohmann::json& row : j["rows"]) {
    const double tps = row["tokens_per_s"].get<double>();
    EXPECT_LE(row["tokens_per_s_min"].get<double>(), tps);
    EXPECT_GE(row["tokens_per_s_max"].get<double>(), tps);
    // The maximum over steps, ranks and repeats: no repeat's is larger.
    EXPECT_EQ(row["peak_state_bytes_max"], row["peak_state_bytes"]);
  }
  EXPECT_EQ(j["measured_steps"], 2);
  EXPECT_EQ(j["warmup_steps"], 1);
  EXPECT_EQ(j["orders"],
            nlohmann::json::parse(R"([["compute", "z3-none"], ["z3-none", "compute"]])"));
  ASSERT_EQ(j["frontier"].size(), 1u);
  EXPECT_EQ(j["frontier"][0]["incumbent"], "z3-none");
  EXPECT_TRUE(j["frontier"][0]["moezero"].is_null()) << "no moezero row was run";
}

TEST(BenchCli, NewRowsResolve) {
  fs::create_directories(kWork);
  // One step of the cheapest new rows on the tiny config: they exist and run.
  const int rc = run(std::string(MOEZERO_BIN) + " bench --config " + MOEZERO_SOURCE_DIR +
                         "/examples/configs/tiny.json --set zero.shard_single_rank=true "
                         "--strategies z3-fsdp-keep,z3-none-hold,z3-leaf-reuse,moezero-nopredict "
                         "--repeats 1 --warmup 0 --steps 1",
                     kWork / "bench_new.log");
  ASSERT_EQ(rc, 0) << "see " << (kWork / "bench_new.log");
  std::ifstream in(kWork / "bench_new.log");
  const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* row : {"z3-fsdp-keep", "z3-none-hold", "z3-leaf-reuse", "moezero-nopredict"})
    EXPECT_NE(log.find(std::string("repeat 1/1  ") + row), std::string::npos) << row;
  EXPECT_EQ(log.find("skip"), std::string::npos) << log;
  EXPECT_NE(log.find("frontier"), std::string::npos);
}

}  // namespace
