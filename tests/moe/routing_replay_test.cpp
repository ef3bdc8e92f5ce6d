// tests/moe/routing_replay_test.cpp — moe.routing_replay (README "MoE layers of today"): a run
// replaying a routing trace with other data routes exactly the recorded per-rank per-expert
// counts (in its metrics and in the trace it records itself), trains with finite losses, does so
// at world 1 and at world 4 with EP 2 and ZeRO-3 (a trace rescaled from world 1), and refuses a
// trace that does not match the run, naming the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "moe/router.h"
#include "tests/common/tiny_config.h"
#include "train/trainer.h"

namespace moezero::moe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

train::TrainResult run(const Config& c) { return train::train(c, train::TrainOptions{}); }

// 2 MoE layers, 4 experts, top-2 softmax, aux loss; 12 sequences of 16 tokens per micro-batch.
Config replay_cfg(std::vector<std::string> overrides = {}) {
  std::vector<std::string> o = {"moe.aux_loss_coef=0.01", "train.grad_accum_steps=2",
                                "parallel.world_size=1"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return test::tiny_moe_config("routing_replay", o);
}

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("moezero_routing_replay_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);) v.push_back(l);
  return v;
}

void write_lines(const fs::path& p, const std::vector<std::string>& v) {
  std::ofstream out(p);
  for (const auto& l : v) out << l << "\n";
}

// Each token gets k distinct experts and the per-expert counts are the given ones.
TEST(RoutingReplay, ForcedChoicesHaveTheCountsAndDistinctExperts) {
  const std::vector<int64_t> counts = {5, 0, 2, 3, 6};  // 8 tokens x top-2
  const std::vector<int32_t> ids = Router::forced_choices(counts, 8, 2);
  ASSERT_EQ(ids.size(), 16u);
  std::vector<int64_t> got(5, 0);
  for (int t = 0; t < 8; ++t) {
    EXPECT_LT(ids[t * 2], ids[t * 2 + 1]) << "token " << t;
    for (int j = 0; j < 2; ++j) ++got[static_cast<size_t>(ids[t * 2 + j])];
  }
  EXPECT_EQ(got, counts);
  EXPECT_THROW(Router::forced_choices(std::vector<int64_t>{9, 7, 0, 0, 0}, 8, 2),
               Error);  // 9 > 8 tokens
  EXPECT_THROW(Router::forced_choices(std::vector<int64_t>{5, 0, 2, 3, 5}, 8, 2),
               Error);  // sums to 15
}

// Record at seed 1, replay at seed 2 (other data and initial weights) while recording again:
// the same trace, the same tokens_per_expert, finite losses that change over the steps.
TEST(RoutingReplay, ReplayWithOtherDataRoutesTheRecordedCounts) {
  const fs::path dir = scratch("same");
  const fs::path rec = dir / "rec.jsonl", again = dir / "again.jsonl";
  const train::TrainResult a =
      run(replay_cfg({"train.seed=1", "profile.routing_trace=" + rec.string()}));
  const train::TrainResult b = run(replay_cfg({"train.seed=2", "moe.routing_replay=" + rec.string(),
                                               "profile.routing_trace=" + again.string()}));
  const train::TrainResult c = run(replay_cfg({"train.seed=2"}));  // the same run without replay
  ASSERT_EQ(a.steps.size(), 3u);
  ASSERT_EQ(b.steps.size(), 3u);
  ASSERT_EQ(c.steps.size(), 3u);
  const auto ra = lines_of(rec), rb = lines_of(again);
  ASSERT_EQ(ra.size(), 1u + 3 * 2 * 2);  // header + steps x micro-batches x layers (1 rank)
  EXPECT_EQ(ra, rb);
  bool differs = false;
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(b.steps[s].tokens_per_expert, a.steps[s].tokens_per_expert) << "step " << s + 1;
    differs = differs || c.steps[s].tokens_per_expert != a.steps[s].tokens_per_expert;
    EXPECT_TRUE(std::isfinite(b.steps[s].loss)) << "step " << s + 1;
  }
  EXPECT_TRUE(differs) << "seed 2 routes like seed 1 anyway: the test shows nothing";
  EXPECT_NE(b.steps[0].loss, b.steps[2].loss);  // training proceeds
  EXPECT_LT(b.steps[2].loss, b.steps[0].loss);
  fs::remove_all(dir);
}

// A world-1 trace rescaled to world 4 (each rank's quarter of the forced choices), replayed at
// world 4 with EP 2 and ZeRO-3: the same agreed counts per step as the world-1 replay.
TEST(RoutingReplay, WorldOneAndWorldFourEpTwoZeroThreeReplayTheSameCounts) {
  const fs::path dir = scratch("world");
  const fs::path rec = dir / "rec.jsonl", four = dir / "four.jsonl";
  run(replay_cfg({"train.seed=1", "profile.routing_trace=" + rec.string()}));
  const auto lines = lines_of(rec);
  ASSERT_FALSE(lines.empty());
  std::vector<std::string> out;
  json h = json::parse(lines[0]);
  h["world_size"] = 4;
  h["ep_size"] = 2;
  out.push_back(h.dump());
  const int64_t N = 12 * 16, n = N / 4;
  for (size_t i = 1; i < lines.size(); ++i) {
    json j = json::parse(lines[i]);
    const auto ids = Router::forced_choices(j["counts"].get<std::vector<int64_t>>(), N, 2);
    for (int r = 0; r < 4; ++r) {
      std::vector<int64_t> c(4, 0);
      for (int64_t a = r * n * 2; a < (r + 1) * n * 2; ++a) ++c[static_cast<size_t>(ids[a])];
      j["rank"] = r;
      j["counts"] = c;
      out.push_back(j.dump());
    }
  }
  write_lines(four, out);
  const train::TrainResult one =
      run(replay_cfg({"train.seed=2", "moe.routing_replay=" + rec.string()}));
  const train::TrainResult w4 =
      run(replay_cfg({"train.seed=2", "parallel.world_size=4", "parallel.ep_size=2", "zero.stage=3",
                      "moe.routing_replay=" + four.string()}));
  ASSERT_EQ(one.steps.size(), 3u);
  ASSERT_EQ(w4.steps.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(w4.steps[s].tokens_per_expert, one.steps[s].tokens_per_expert) << "step " << s + 1;
    EXPECT_TRUE(std::isfinite(w4.steps[s].loss));
  }
  fs::remove_all(dir);
}

// The message of the UserError the run throws ("" when none).
std::string refusal(const Config& c) {
  try {
    run(c);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// Every mismatch is refused before training with one line naming the field.
TEST(RoutingReplay, RefusesATraceThatDoesNotMatchTheRun) {
  const fs::path dir = scratch("refuse");
  const fs::path rec = dir / "rec.jsonl";
  run(replay_cfg({"train.steps=2", "profile.routing_trace=" + rec.string()}));
  const auto lines = lines_of(rec);
  ASSERT_EQ(lines.size(), 1u + 2 * 2 * 2);
  auto with_header = [&](const char* key, json value) {
    auto v = lines;
    json h = json::parse(v[0]);
    h[key] = value;
    v[0] = h.dump();
    const fs::path p = dir / (std::string(key) + ".jsonl");
    write_lines(p, v);
    return refusal(replay_cfg({"train.steps=2", "moe.routing_replay=" + p.string()}));
  };
  const std::string replay = "moe.routing_replay=" + rec.string();
  EXPECT_EQ(refusal(replay_cfg({"train.steps=2", replay})), "");  // the trace itself is fine
  EXPECT_NE(with_header("world_size", 2).find("world_size is 2"), std::string::npos);
  EXPECT_NE(with_header("ep_size", 2).find("ep_size is 2"), std::string::npos);
  EXPECT_NE(with_header("num_experts", 8).find("num_experts is 8"), std::string::npos);
  EXPECT_NE(with_header("top_k", 1).find("top_k is 1"), std::string::npos);
  EXPECT_NE(with_header("grad_accum_steps", 1).find("grad_accum_steps is 1"), std::string::npos);
  EXPECT_NE(with_header("moe_layers", json::array({1})).find("moe_layers"), std::string::npos);
  EXPECT_NE(with_header("version", 2).find("version"), std::string::npos);
  // Fewer tokens per rank than recorded.
  EXPECT_NE(refusal(replay_cfg({"train.steps=2", "train.micro_batch_size=6", replay}))
                .find("token count"),
            std::string::npos);
  // A count moved off its rank's total.
  {
    auto v = lines;
    json j = json::parse(v[3]);
    j["counts"][0] = j["counts"][0].get<int64_t>() + 1;
    v[3] = j.dump();
    write_lines(dir / "sum.jsonl", v);
    const std::string e = refusal(
        replay_cfg({"train.steps=2", "moe.routing_replay=" + (dir / "sum.jsonl").string()}));
    EXPECT_NE(e.find("line 4"), std::string::npos) << e;
    EXPECT_NE(e.find("token counts sum to"), std::string::npos) << e;
  }
  // More steps than recorded, and a run with capacity dropping.
  EXPECT_NE(refusal(replay_cfg({"train.steps=3", replay})).find("train.steps is 3"),
            std::string::npos);
  EXPECT_NE(refusal(replay_cfg({"train.steps=2", "moe.capacity_factor=1.5", replay}))
                .find("moe.capacity_factor"),
            std::string::npos);
  EXPECT_NE(refusal(replay_cfg({"train.steps=2", "moe.routing_replay=" + (dir / "no").string()}))
                .find("cannot read"),
            std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moezero::moe
