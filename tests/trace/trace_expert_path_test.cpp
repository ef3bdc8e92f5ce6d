// tests/trace/trace_expert_path_test.cpp — a trace measures the path that runs untraced: with
// tracing on, the experts still run as grouped GEMMs (the same gemm / grouped_gemm calls, counted
// by each device's op table at every gradient hand-over, and bit-identical losses), and the
// trace's per-expert spans are shares of the measured "experts" span around those calls.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "core/config.h"
#include "core/ops.h"
#include "train/grad_health.h"
#include "train/trainer.h"

namespace moezero::moe {
namespace {

using nlohmann::json;

Config tiny_moe() {
  return parse_config(
      "{}", "tiny_moe",
      {"model.vocab_size=256", "model.d_model=32", "model.n_layers=2", "model.n_heads=4",
       "model.n_kv_heads=2", "model.d_ff=128", "model.seq_len=16", "model.num_experts=4",
       "model.top_k=2", "train.micro_batch_size=8", "train.grad_accum_steps=2", "train.steps=3",
       "train.warmup_steps=1", "train.lr=0.01", "zero.stage=3", "parallel.world_size=2",
       "parallel.ep_size=2", "comm.timeout_s=60"});
}

// (rank, step, micro-batch, group) -> the rank's GEMM calls so far when that gradient is ready.
using Key = std::tuple<int, int64_t, int64_t, std::string>;
struct RunRecord {
  train::TrainResult result;
  std::map<Key, Ops::GemmCalls> calls;
};

RunRecord run_once(const Config& cfg, const std::string& trace_path) {
  RunRecord r;
  std::mutex mu;
  train::TrainOptions opt;
  opt.trace_path = trace_path;
  opt.grad_hook = [&](const train::GradHookInfo& g) {
    const Ops::GemmCalls c = g.stream->device().ops().gemm_calls();
    std::lock_guard lock(mu);
    r.calls[{g.rank, g.step, g.micro_batch, g.group->name}] = c;
  };
  r.result = train::train(cfg, opt);
  return r;
}

TEST(TraceExpertPath, TracingRunsTheSameGemmCallsAndLosses) {
  const Config cfg = tiny_moe();
  const std::string path = ::testing::TempDir() + "moezero_expert_path.trace.json";
  const RunRecord off = run_once(cfg, "");
  const RunRecord on = run_once(cfg, path);
  ASSERT_EQ(off.result.steps.size(), 3u);
  ASSERT_EQ(on.result.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(std::bit_cast<uint64_t>(on.result.steps[i].loss),
              std::bit_cast<uint64_t>(off.result.steps[i].loss))
        << "step " << i + 1 << ": " << on.result.steps[i].loss << " traced vs "
        << off.result.steps[i].loss;
  ASSERT_FALSE(off.calls.empty());
  EXPECT_EQ(on.calls.size(), off.calls.size());
  bool grouped = false;
  for (const auto& [key, c] : off.calls) {
    auto it = on.calls.find(key);
    ASSERT_NE(it, on.calls.end()) << std::get<3>(key);
    EXPECT_EQ(it->second.gemm, c.gemm) << "rank " << std::get<0>(key) << " step "
                                       << std::get<1>(key) << " group " << std::get<3>(key);
    EXPECT_EQ(it->second.grouped_gemm, c.grouped_gemm)
        << "rank " << std::get<0>(key) << " step " << std::get<1>(key) << " group "
        << std::get<3>(key);
    grouped = grouped || c.grouped_gemm > 0;
  }
  EXPECT_TRUE(grouped) << "the experts ran no grouped GEMM";

  // Every "experts" span holds its experts' derived spans, back to back, flops adding up.
  std::ifstream f(path);
  const json trace = json::parse(f);
  int calls = 0;
  const json& ev = trace["traceEvents"];
  for (size_t i = 0; i < ev.size(); ++i) {
    const json& e = ev[i];
    if (e.value("cat", "") != "experts") continue;
    ++calls;
    const json& a = e["args"];
    const double ts = e["ts"], dur = e["dur"];
    const int n = a["experts"];
    ASSERT_GE(n, 1);
    ASSERT_LE(i + static_cast<size_t>(n), ev.size() - 1);
    double at = ts;
    uint64_t flops = 0, tokens = 0;
    for (int k = 1; k <= n; ++k) {
      const json& x = ev[i + static_cast<size_t>(k)];
      ASSERT_EQ(x["cat"], "expert") << x.dump();
      EXPECT_EQ(x["args"]["timing"], "flops share");
      EXPECT_EQ(x["args"]["layer"], a["layer"]);
      EXPECT_EQ(x["args"]["pass"], a["pass"]);
      EXPECT_EQ(x["pid"], e["pid"]);
      EXPECT_NEAR(x["ts"].get<double>(), at, 1e-3);
      at = x["ts"].get<double>() + x["dur"].get<double>();
      flops += x["args"].value("flops", uint64_t{0});
      tokens += x["args"]["tokens"].get<uint64_t>();
    }
    EXPECT_NEAR(at, ts + dur, 1e-3);
    EXPECT_EQ(flops, a["flops"].get<uint64_t>());
    EXPECT_EQ(tokens, a["tokens"].get<uint64_t>());
    // Forward: 3 GEMMs of 2 C F per row; backward 6.
    const uint64_t per_row = 2 * 32 * 128 * (a["pass"] == "fwd" ? 3 : 6);
    EXPECT_EQ(a["flops"].get<uint64_t>(), a["tokens"].get<uint64_t>() * per_row);
  }
  EXPECT_GT(calls, 0) << "no experts spans in the trace";
}

}  // namespace
}  // namespace moezero::moe
