// Shard health (docs/health.md) through the whole trainer: per-shard, per-group and global
// gradient norms in the metrics; a NaN or Inf injected into one expert's gradient on one rank
// (through TrainOptions::grad_hook) is reported with that rank, layer, expert, tensor, element
// and step, stops the run or skips the step without touching any rank's parameters; an
// allocation over train.memory_limit stops the run with an error naming the tag and group.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/error.h"
#include "core/ops.h"
#include "tests/common/tiny_config.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace moezero::train {
namespace {

// Two MoE layers of 4 experts (top-2), tiny widths; EP 2 puts experts 2 and 3 on the ranks
// with ep_rank 1.
Config tiny_moe(std::vector<std::string> overrides = {}) {
  std::vector<std::string> o = {};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return test::tiny_moe_config("health_test", o);
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Writes `value` into element `index` of parameter `param` (full name) of group `group` on
// rank `rank` at step `step`, once. `hits` counts the writes (the test checks it was reached).
struct Injection {
  int rank;
  int64_t step;
  std::string group, param;
  int64_t index;
  float value;
};
GradHook inject(const Injection& inj, int* hits, std::mutex* mu) {
  return [inj, hits, mu](const GradHookInfo& h) {
    if (h.rank != inj.rank || h.step != inj.step || h.group->name != inj.group) return;
    std::lock_guard lock(*mu);
    if (*hits > 0) return;  // the first micro-batch only
    const int64_t at = h.layout->offset(h.layout->index_of(inj.param)) + inj.index;
    h.stream->device().ops().fill(*h.stream, h.grad.view_elems(at, Shape{1}), inj.value);
    ++*hits;
  };
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

void expect_report(const NonFiniteReport& r, const Injection& inj, int layer, int expert,
                   const std::string& tensor, const std::string& value) {
  EXPECT_EQ(r.rank, inj.rank);
  EXPECT_EQ(r.group, inj.group);
  EXPECT_EQ(r.layer, layer);
  EXPECT_EQ(r.expert, expert);
  EXPECT_EQ(r.tensor, tensor);
  EXPECT_EQ(r.param, inj.param);
  EXPECT_EQ(r.index, inj.index);
  EXPECT_EQ(r.value, value);
  EXPECT_EQ(r.step, inj.step);
  EXPECT_EQ(r.count, 1);
  EXPECT_EQ(r.ranks, std::vector<int>{inj.rank}) << "only the injected rank's gradient was bad";
}

TEST(GradHealth, NanInOneExpertOnOneRankStopsNamingRankLayerExpertTensor) {
  for (int world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    // ep_rank 1 holds experts 2 and 3: rank 1 (world 2) or ranks 1 and 3 (world 4).
    const Injection inj{
        world - 1, 2,   "layers.1.experts.3", "model.layers.1.block_sparse_moe.experts.3.w1.weight",
        37,        kNaN};
    int hits = 0;
    std::mutex mu;
    TrainOptions opt;
    opt.grad_hook = inject(inj, &hits, &mu);
    opt.metrics_path = ::testing::TempDir() + "health_nan.jsonl";
    try {
      train(tiny_moe({"parallel.world_size=" + std::to_string(world), "parallel.ep_size=2",
                      "zero.stage=3", "train.steps=4"}),
            opt);
      ADD_FAILURE() << "a NaN gradient must stop the run (train.on_nonfinite = stop)";
    } catch (const Error& e) {
      const std::string m = e.what();
      for (const std::string& want :
           {std::string("non-finite gradient norm at step 2"),
            std::string("value nan on rank ") + std::to_string(inj.rank),
            std::string("group layers.1.experts.3 (layer 1, expert 3)"),
            std::string("tensor w1 (model.layers.1.block_sparse_moe.experts.3.w1.weight)"),
            std::string("element 37"), std::string("were not updated")})
        EXPECT_NE(m.find(want), std::string::npos) << "missing '" << want << "' in: " << m;
    }
    EXPECT_EQ(hits, 1);
    // The metrics file got the stopping step's line, with the report.
    const auto lines = read_lines(opt.metrics_path);
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_FALSE(lines[0].contains("nonfinite"));
    const auto& n = lines[1]["nonfinite"];
    EXPECT_EQ(lines[1]["applied"], false);
    EXPECT_EQ(n["rank"], inj.rank);
    EXPECT_EQ(n["group"], "layers.1.experts.3");
    EXPECT_EQ(n["layer"], 1);
    EXPECT_EQ(n["expert"], 3);
    EXPECT_EQ(n["tensor"], "w1");
    EXPECT_EQ(n["index"], 37);
    EXPECT_EQ(n["value"], "nan");
    EXPECT_EQ(n["step"], 2);
  }
}

// One rank: the scan waits for the step (the global norm says whether any gradient is
// non-finite) in fp32, whose gradients accumulate in place, and in bf16, where the step's
// gradient is the rounded copy of the fp32 one: the report is the same as a scan at once.
TEST(GradHealth, OneRankReportsTheInjectedElementInFp32AndBf16) {
  for (const char* dtype : {"f32", "bf16"}) {
    SCOPED_TRACE(dtype);
    const Injection inj{
        0,  2,    "layers.1.experts.3", "model.layers.1.block_sparse_moe.experts.3.w2.weight",
        11, -kInf};
    int hits = 0;
    std::mutex mu;
    TrainOptions opt;
    opt.grad_hook = inject(inj, &hits, &mu);
    opt.metrics_path = ::testing::TempDir() + "health_one_rank_" + dtype + ".jsonl";
    const TrainResult r = train(
        tiny_moe({"parallel.world_size=1", "parallel.ep_size=1", "zero.stage=3",
                  std::string("train.dtype=") + dtype, "train.on_nonfinite=skip", "train.steps=3"}),
        opt);
    EXPECT_EQ(hits, 1);
    ASSERT_EQ(r.steps.size(), 3u);
    for (size_t s = 0; s < 3; ++s)
      EXPECT_EQ(r.steps[s].nonfinite.has_value(), s == 1) << "step " << s + 1;
    if (r.steps[1].nonfinite) expect_report(*r.steps[1].nonfinite, inj, 1, 3, "w2", "-inf");
  }
}

// A run that a NaN stops leaves its checkpoints as they were: `latest` still names the last
// good step, nothing of the stopping step is written, and resuming from it without the fault
// gives the uninterrupted run's losses bit for bit.
TEST(GradHealth, NanStopLeavesTheLastCheckpointIntact) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "health_ckpt";
  fs::remove_all(dir);
  const std::vector<std::string> base = {"parallel.world_size=2", "parallel.ep_size=2",
                                         "zero.stage=3", "train.steps=4"};
  std::vector<std::string> saving = base;
  saving.push_back("train.save_dir=" + dir.string());
  saving.push_back("train.save_every=1");

  const TrainResult full = train(tiny_moe(base), TrainOptions{});
  ASSERT_EQ(full.steps.size(), 4u);

  const Injection inj{
      1, 3, "layers.0.experts.2", "model.layers.0.block_sparse_moe.experts.2.w2.weight", 5, kNaN};
  int hits = 0;
  std::mutex mu;
  TrainOptions faulty;
  faulty.grad_hook = inject(inj, &hits, &mu);
  EXPECT_THROW(train(tiny_moe(saving), faulty), Error);
  EXPECT_EQ(hits, 1);
  std::ifstream latest(dir / "latest");
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step_00000002");
  EXPECT_TRUE(fs::exists(dir / "step_00000002" / "manifest.json"));
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename().string().find("00000003"), std::string::npos)
        << "the stopping step wrote " << entry.path();
  EXPECT_EQ(checkpoint::load_full_params(dir.string()).step, 2);  // every crc32 checked

  TrainOptions resume;
  resume.resume_from = dir.string();
  const TrainResult rest = train(tiny_moe(saving), resume);
  ASSERT_EQ(rest.steps.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(rest.steps[i].step, full.steps[i + 2].step);
    EXPECT_EQ(rest.steps[i].loss, full.steps[i + 2].loss) << "step " << rest.steps[i].step;
    EXPECT_EQ(rest.steps[i].grad_norm, full.steps[i + 2].grad_norm);
  }
}

TEST(GradHealth, InfIsSkippedAndTrainingContinues) {
  // Rank 2 of 4 has ep_rank 0 (experts 0 and 1); -Inf into w2 of layer 0's expert 1.
  const Injection inj{
      2, 2, "layers.0.experts.1", "model.layers.0.block_sparse_moe.experts.1.w2.weight", 3, -kInf};
  int hits = 0;
  std::mutex mu;
  TrainOptions opt;
  opt.grad_hook = inject(inj, &hits, &mu);
  opt.metrics_path = ::testing::TempDir() + "health_inf.jsonl";
  const TrainResult r = train(tiny_moe({"parallel.world_size=4", "parallel.ep_size=2",
                                        "train.on_nonfinite=skip", "train.steps=4"}),
                              opt);
  EXPECT_EQ(hits, 1);
  ASSERT_EQ(r.steps.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_EQ(r.steps[s].applied, s != 1) << "step " << s + 1;
    EXPECT_EQ(r.steps[s].nonfinite.has_value(), s == 1) << "step " << s + 1;
    if (s != 1) {
      EXPECT_TRUE(std::isfinite(r.steps[s].grad_norm)) << "step " << s + 1;
    }
  }
  expect_report(*r.steps[1].nonfinite, inj, 0, 1, "w2", "-inf");
  const auto lines = read_lines(opt.metrics_path);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1]["nonfinite"]["value"], "-inf");
  EXPECT_EQ(lines[1]["nonfinite"]["tensor"], "w2");
  EXPECT_FALSE(lines[2].contains("nonfinite"));
  // +Inf at world 2: the value is named "inf".
  const Injection pos{
      0, 1, "layers.1.experts.0", "model.layers.1.block_sparse_moe.experts.0.w3.weight", 0, kInf};
  hits = 0;
  opt.grad_hook = inject(pos, &hits, &mu);
  const TrainResult r2 = train(tiny_moe({"parallel.world_size=2", "parallel.ep_size=2",
                                         "train.on_nonfinite=skip", "train.steps=2"}),
                               opt);
  ASSERT_TRUE(r2.steps[0].nonfinite.has_value());
  expect_report(*r2.steps[0].nonfinite, pos, 1, 0, "w3", "inf");
  EXPECT_TRUE(r2.steps[1].applied);
}

// A skipped step leaves every rank's parameters exactly as they were: 2 steps with a NaN in
// step 2 (skipped) end bit for bit where 1 clean step ends, on every rank (each rank's own
// groups, gathered from all of their shards).
TEST(GradHealth, SkippedStepLeavesEveryRanksParametersBitIdentical) {
  for (const char* stage : {"zero.stage=3", "zero.stage=1"}) {
    SCOPED_TRACE(stage);
    const Injection inj{
        1, 2, "layers.1.experts.3", "model.layers.1.block_sparse_moe.experts.3.w1.weight", 5, kNaN};
    int hits = 0;
    std::mutex mu;
    TrainOptions opt;
    opt.collect_params = true;
    opt.grad_hook = inject(inj, &hits, &mu);
    const TrainResult skipped = train(tiny_moe({"parallel.world_size=4", "parallel.ep_size=2",
                                                stage, "train.on_nonfinite=skip", "train.steps=2"}),
                                      opt);
    EXPECT_EQ(hits, 1);
    ASSERT_FALSE(skipped.steps[1].applied);
    TrainOptions clean;
    clean.collect_params = true;
    const TrainResult one = train(
        tiny_moe({"parallel.world_size=4", "parallel.ep_size=2", stage, "train.steps=1"}), clean);
    ASSERT_EQ(skipped.rank_params.size(), 4u);
    ASSERT_EQ(one.rank_params.size(), 4u);
    for (size_t rank = 0; rank < 4; ++rank) {
      ASSERT_EQ(skipped.rank_group_names[rank], one.rank_group_names[rank]);
      for (size_t g = 0; g < one.rank_params[rank].size(); ++g) {
        const auto& a = skipped.rank_params[rank][g];
        const auto& b = one.rank_params[rank][g];
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
            << "rank " << rank << " group " << one.rank_group_names[rank][g];
      }
    }
  }
}

// profile.grad_norms: the global norm is the one used for clipping; each group's norm is the
// root of the sum of its shards' squares over the ranks holding it; group norms do not depend
// on the world size, EP width or ZeRO stage (the shards of stages 0-1 are slices of the
// replicated gradient).
TEST(GradHealth, GradNormsPerShardPerGroupAndGlobal) {
  auto norms_of = [](const std::string& world, const std::string& ep, const std::string& stage,
                     bool on) {
    TrainOptions opt;
    opt.metrics_path = ::testing::TempDir() + "health_norms.jsonl";
    const TrainResult r = train(
        tiny_moe({"parallel.world_size=" + world, "parallel.ep_size=" + ep, "zero.stage=" + stage,
                  std::string("profile.grad_norms=") + (on ? "true" : "false")}),
        opt);
    return std::make_pair(r, read_lines(opt.metrics_path));
  };
  const auto [ref, ref_lines] = norms_of("1", "1", "0", true);
  const size_t n_groups = 2 /*embed, head*/ + 1 /*final norm*/ + 2 * (2 + 4);
  for (auto [world, ep, stage] : {std::tuple{"4", "2", "3"}, std::tuple{"2", "2", "0"},
                                  std::tuple{"2", "1", "1"}, std::tuple{"4", "4", "2"}}) {
    const std::string what = std::string("world ") + world + " ep " + ep + " stage " + stage;
    const auto [r, lines] = norms_of(world, ep, stage, true);
    ASSERT_EQ(lines.size(), 3u) << what;
    for (size_t s = 0; s < lines.size(); ++s) {
      const auto& j = lines[s];
      ASSERT_TRUE(j.contains("grad_norms")) << what;
      const double global = j["grad_norms"]["global"];
      EXPECT_NEAR(global, r.steps[s].grad_norm, 1e-9 * global) << what << " step " << s + 1;
      EXPECT_NEAR(global, ref.steps[s].grad_norm, 1e-4 * global) << what << " step " << s + 1;
      const auto& groups = j["grad_norms"]["groups"];
      const auto& ref_groups = ref_lines[s]["grad_norms"]["groups"];
      EXPECT_LE(groups.size(), n_groups) << what;
      EXPECT_EQ(groups.size(), ref_groups.size()) << what;
      std::map<std::string, double> from_shards;
      double total = 0.0;
      for (size_t rank = 0; rank < j["ranks"].size(); ++rank)
        for (auto& [name, v] : j["ranks"][rank]["shard_grad_norms"].items())
          from_shards[name] += double(v) * double(v);
      for (auto& [name, v] : groups.items()) {
        const double g = v;
        total += g * g;
        EXPECT_NEAR(g, std::sqrt(from_shards[name]), 1e-9 * (g + 1e-30)) << what << " " << name;
        EXPECT_NEAR(g, double(ref_groups[name]), 1e-4 * g + 1e-9) << what << " " << name;
      }
      EXPECT_NEAR(std::sqrt(total), global, 1e-9 * global) << what;
      EXPECT_EQ(from_shards.size(), groups.size()) << what << ": every group has shards";
    }
  }
  // The flag only adds fields: the same norms and losses with it off.
  const auto [on, on_lines] = norms_of("4", "2", "3", true);
  const auto [off, off_lines] = norms_of("4", "2", "3", false);
  for (size_t s = 0; s < on.steps.size(); ++s) {
    EXPECT_EQ(on.steps[s].grad_norm, off.steps[s].grad_norm);
    EXPECT_EQ(on.steps[s].loss, off.steps[s].loss);
    EXPECT_FALSE(off_lines[s].contains("grad_norms"));
    EXPECT_FALSE(off_lines[s]["ranks"][0].contains("shard_grad_norms"));
  }
}

// train.memory_limit: the first allocation past the limit (here: gathering the first expert,
// the largest buffer of this model) fails on that rank with an error naming the tag, the
// group, the request, the limit and the bytes in use by tag; the other ranks are woken, so
// train() returns instead of hanging.
TEST(GradHealth, MemoryLimitNamesTagGroupAndStopsCleanly) {
  const std::vector<std::string> o = {"parallel.world_size=2",
                                      "model.d_ff=512",
                                      "model.d_model=64",
                                      "model.seq_len=8",
                                      "train.micro_batch_size=2",
                                      "prefetch.policy=none",
                                      "shard_cache.capacity_bytes=0",
                                      "train.steps=1"};
  TrainOptions opt;
  opt.metrics_path = ::testing::TempDir() + "health_mem.jsonl";
  const TrainResult free_run = train(tiny_moe(o), opt);
  const auto line = read_lines(opt.metrics_path).at(0);
  const auto& peak = line["ranks"][0]["peak_bytes"];
  // Model states stay allocated all run: the fp32 master is the parameter shard, the gradient
  // shard has its size, the moments are optim_state.
  const uint64_t states = 2 * uint64_t(peak["param_shard"]) + uint64_t(peak["optim_state"]);
  const uint64_t expert_full = 3ull * 512 * 64 * 4;
  ASSERT_GT(uint64_t(line["ranks"][0]["peak_total_bytes"]), states + expert_full);
  std::vector<std::string> limited = o;
  // Room for everything before the first expert gather (activations, dense gathers: less
  // than one expert), not for that gather on top of it.
  limited.push_back("train.memory_limit=" + std::to_string(states + expert_full));
  try {
    train(tiny_moe(limited), {});
    FAIL() << "expected an out-of-memory error";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    // The layer's active experts are gathered as one coalesced collective: the request that
    // fails is its staging buffer (a whole number of experts), or one expert's full buffer.
    const bool names_gather = m.find("comm_buffer buffer 'block gather'") != std::string::npos ||
                              m.find("full_param buffer 'layers.0.experts.") != std::string::npos;
    EXPECT_TRUE(names_gather) << m;
    const size_t at = m.find("asked for ");
    ASSERT_NE(at, std::string::npos) << m;
    const uint64_t asked = std::stoull(m.substr(at + 10));
    EXPECT_EQ(asked % expert_full, 0u) << m;
    EXPECT_GE(asked, expert_full) << m;
    for (const std::string& want :
         {std::string("train.memory_limit"), std::string("by tag: "), std::string("param_shard ")})
      EXPECT_NE(m.find(want), std::string::npos) << "missing '" << want << "' in: " << m;
  }
}

}  // namespace
}  // namespace moezero::train
