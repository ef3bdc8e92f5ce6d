// tests/moe/moe_layers_train_test.cpp — the MoE layers of today (README "MoE layers of today")
// through the whole trainer: fine-grained experts (model.expert_d_ff), shared experts, sigmoid
// scores, the auxiliary-loss-free selection bias and Qwen2's q/k/v biases together give the same
// losses at world 1 and at world 4 with EP 2 and ZeRO-3; every prefetch policy and cache size stays
// bit-identical with them on; the bias follows DeepSeek-V3's rule from the agreed loads exactly,
// lives in checkpoints and a resumed run continues as an uninterrupted one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "tests/common/tiny_config.h"
#include "train/trainer.h"

namespace moezero::moe {
namespace {

namespace fs = std::filesystem;

// A 2-layer model with 4 fine-grained experts (width 24, dense width 48), 2 shared experts
// (width 8), top-2 sigmoid scores, aux and z losses, the selection bias (rate 0.01) and q/k/v
// biases (model.qkv_bias: in the attention groups, so sharded by ZeRO-3 and checkpointed).
Config layers_cfg(std::vector<std::string> overrides = {}) {
  std::vector<std::string> o = {"model.expert_d_ff=24",
                                "model.num_shared_experts=2",
                                "model.shared_expert_d_ff=8",
                                "model.shared_expert_gate=true",
                                "model.qkv_bias=true",
                                "moe.score_function=sigmoid",
                                "moe.aux_loss_coef=0.01",
                                "moe.z_loss_coef=0.001",
                                "moe.expert_bias_update_rate=0.01",
                                "train.steps=4"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return test::tiny_moe_config("moe_layers", o);
}

train::TrainResult run(const Config& c, train::TrainOptions opt = {}) {
  opt.collect_params = opt.resume_from.empty() && opt.stop_at_step == 0;
  return train::train(c, opt);
}

// A fresh scratch folder of this test (tests run in parallel).
fs::path scratch(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("moezero_moe_layers_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

TEST(MoeLayersTrain, WorldOneAndWorldFourEpTwoZeroThreeGiveTheSameLosses) {
  const train::TrainResult ref = run(layers_cfg({"parallel.world_size=1", "zero.stage=3"}));
  ASSERT_EQ(ref.steps.size(), 4u);
  // The experts have the fine-grained width: 3 x 24 x 32 per expert group.
  bool saw_expert = false;
  for (size_t g = 0; g < ref.group_names.size(); ++g)
    if (ref.group_names[g].find(".experts.") != std::string::npos) {
      EXPECT_EQ(ref.params[g].size(), 3u * 24 * 32) << ref.group_names[g];
      saw_expert = true;
    }
  EXPECT_TRUE(saw_expert);
  // The attention groups hold the q/k/v biases after the weights (norm 32, q 32x32, k and v
  // 16x32, o 32x32, then biases 32 + 16 + 16), and training moved them off their zero init.
  for (size_t g = 0; g < ref.group_names.size(); ++g)
    if (ref.group_names[g].ends_with(".attn")) {
      ASSERT_EQ(ref.params[g].size(), 3104u + 64u) << ref.group_names[g];
      const auto nonzero = std::count_if(ref.params[g].begin() + 3104, ref.params[g].end(),
                                         [](float v) { return v != 0.0f; });
      EXPECT_EQ(nonzero, 64) << ref.group_names[g] << ": the biases were not trained";
    }
  for (const char* grad_accum : {"1", "2"}) {
    const train::TrainResult one = grad_accum[0] == '1'
                                       ? ref
                                       : run(layers_cfg({"parallel.world_size=1", "zero.stage=3",
                                                         "train.grad_accum_steps=2"}));
    const train::TrainResult r =
        run(layers_cfg({"parallel.world_size=4", "parallel.ep_size=2", "zero.stage=3",
                        std::string("train.grad_accum_steps=") + grad_accum}));
    ASSERT_EQ(r.steps.size(), one.steps.size());
    for (size_t s = 0; s < one.steps.size(); ++s) {
      SCOPED_TRACE(std::string("grad_accum ") + grad_accum + " step " + std::to_string(s + 1));
      EXPECT_NEAR(r.steps[s].loss, one.steps[s].loss, 1e-5 * one.steps[s].loss);
      EXPECT_NEAR(r.steps[s].grad_norm, one.steps[s].grad_norm, 1e-4 * one.steps[s].grad_norm);
      EXPECT_NEAR(r.steps[s].aux_loss, one.steps[s].aux_loss, 1e-5 * one.steps[s].aux_loss);
      EXPECT_EQ(r.steps[s].tokens_per_expert, one.steps[s].tokens_per_expert);
    }
  }
  // The features change the math: a Mixtral-style run of the same model differs.
  const train::TrainResult plain =
      run(layers_cfg({"parallel.world_size=1", "zero.stage=3", "moe.score_function=softmax",
                      "moe.expert_bias_update_rate=0"}));
  EXPECT_NE(plain.steps[1].loss, ref.steps[1].loss);
}

TEST(MoeLayersTrain, EveryPolicyAndCacheSizeGivesIdenticalLosses) {
  std::vector<std::string> base = {"parallel.world_size=4", "parallel.ep_size=2",
                                   "train.grad_accum_steps=2", "train.steps=3"};
  auto with = [&](std::vector<std::string> extra) {
    auto o = base;
    o.insert(o.end(), extra.begin(), extra.end());
    return run(layers_cfg(o));
  };
  const train::TrainResult ref = with({"prefetch.policy=none", "shard_cache.capacity_bytes=0"});
  for (const char* policy : {"none", "all", "frequency", "cost", "cost-priced"})
    for (const char* cache : {"0", "12000", "64MiB"}) {  // an expert group is 9 KiB
      // cost-priced: the cost policy with prefetch.speculate=priced (the gate's alternative).
      const bool priced = std::string(policy) == "cost-priced";
      const train::TrainResult r =
          with({std::string("prefetch.policy=") + (priced ? "cost" : policy),
                std::string("prefetch.speculate=") + (priced ? "priced" : "idle"),
                std::string("shard_cache.capacity_bytes=") + cache, "prefetch.min_probability=0.5",
                "prefetch.budget_bytes=8000", "prefetch.link_gbps=1"});
      const std::string what = std::string(policy) + " cache " + cache;
      ASSERT_EQ(r.steps.size(), ref.steps.size());
      for (size_t s = 0; s < r.steps.size(); ++s)
        EXPECT_EQ(r.steps[s].loss, ref.steps[s].loss) << what << " step " << s + 1;
      for (size_t g = 0; g < r.params.size(); ++g)
        EXPECT_EQ(r.params[g], ref.params[g]) << what << " group " << g;
    }
}

// The bias after the run equals DeepSeek-V3's rule replayed from the metrics' agreed loads
// (dropless: tokens_per_expert are the top-k selections), bit for bit; with aux loss 0 it is
// what balances.
TEST(MoeLayersTrain, BiasFollowsTheRuleFromAgreedLoadsAndIsCheckpointed) {
  const fs::path dir = scratch("bias");
  const double rate = 0.01;
  const Config cfg =
      layers_cfg({"parallel.world_size=2", "parallel.ep_size=2", "moe.aux_loss_coef=0",
                  "train.steps=5", "train.save_dir=" + (dir / "ckpt").string()});
  train::TrainOptions opt;
  opt.metrics_path = (dir / "m.jsonl").string();
  const train::TrainResult r = run(cfg, opt);
  ASSERT_EQ(r.steps.size(), 5u);
  std::vector<std::vector<float>> want(2, std::vector<float>(4, 0.0f));
  std::ifstream metrics(dir / "m.jsonl");
  for (const train::StepLog& s : r.steps) {
    ASSERT_EQ(s.tokens_per_expert.size(), 2u);
    // The metrics line shows the bias the step routed with (the rule's value before the step)
    // and the balance of the agreed loads.
    std::string line;
    ASSERT_TRUE(std::getline(metrics, line)) << "step " << s.step;
    const nlohmann::json j = nlohmann::json::parse(line);
    for (size_t l = 0; l < 2; ++l) {
      const nlohmann::json& L = j["moe_layers"][l];
      EXPECT_EQ(L["expert_bias"].get<std::vector<float>>(), want[l]) << "step " << s.step;
      EXPECT_EQ(L["selected"].get<std::vector<int64_t>>(), s.tokens_per_expert[l]);  // dropless
      EXPECT_EQ(L["dropped"].get<int64_t>(), 0);
      const std::vector<int64_t>& t = s.tokens_per_expert[l];
      const double mean = (t[0] + t[1] + t[2] + t[3]) / 4.0;
      double var = 0.0;
      for (int64_t x : t) var += (x - mean) * (x - mean) / 4.0;
      EXPECT_DOUBLE_EQ(L["load_max_over_mean"].get<double>(),
                       *std::max_element(t.begin(), t.end()) / mean);
      EXPECT_NEAR(L["load_cv"].get<double>(), std::sqrt(var) / mean, 1e-12);
    }
    for (size_t l = 0; l < 2; ++l) {
      double mean = 0.0;
      for (int64_t n : s.tokens_per_expert[l]) mean += static_cast<double>(n);
      mean /= 4.0;
      for (size_t e = 0; e < 4; ++e) {
        const double d = mean - static_cast<double>(s.tokens_per_expert[l][e]);
        want[l][e] = static_cast<float>(want[l][e] + rate * ((d > 0.0) - (d < 0.0)));
      }
    }
  }
  std::ifstream in(dir / "ckpt" / "step_00000005" / "manifest.json");
  ASSERT_TRUE(in) << "no manifest";
  const nlohmann::json m = nlohmann::json::parse(in);
  ASSERT_TRUE(m.contains("expert_bias"));
  const auto got = m["expert_bias"].get<std::vector<std::vector<float>>>();
  EXPECT_EQ(got, want);
  bool moved = false;
  for (const auto& l : got)
    for (float b : l) moved |= b != 0.0f;
  EXPECT_TRUE(moved) << "the bias never moved";
  fs::remove_all(dir);
}

// Capacity drops show in every metrics line: dropped = selected - kept tokens, > 0 here; no bias
// (rate 0): expert_bias is empty.
TEST(MoeLayersTrain, MetricsCountDroppedTokens) {
  const fs::path dir = scratch("drops");
  train::TrainOptions opt;
  opt.metrics_path = (dir / "m.jsonl").string();
  const train::TrainResult r = run(layers_cfg({"parallel.world_size=2", "moe.capacity_factor=0.5",
                                               "moe.expert_bias_update_rate=0", "train.steps=2"}),
                                   opt);
  std::ifstream metrics(dir / "m.jsonl");
  int64_t dropped = 0;
  for (const train::StepLog& s : r.steps) {
    std::string line;
    ASSERT_TRUE(std::getline(metrics, line));
    const nlohmann::json j = nlohmann::json::parse(line);
    for (size_t l = 0; l < 2; ++l) {
      const nlohmann::json& L = j["moe_layers"][l];
      const auto sel = L["selected"].get<std::vector<int64_t>>();
      int64_t want = 0;
      for (size_t e = 0; e < 4; ++e) {
        EXPECT_GE(sel[e], s.tokens_per_expert[l][e]);
        want += sel[e] - s.tokens_per_expert[l][e];
      }
      EXPECT_EQ(L["dropped"].get<int64_t>(), want);
      EXPECT_TRUE(L["expert_bias"].empty());
      EXPECT_GE(L["load_max_over_mean"].get<double>(), 1.0);
      dropped += want;
    }
  }
  EXPECT_GT(dropped, 0) << "capacity 0.5 dropped nothing";
  fs::remove_all(dir);
}

// The experts run as grouped GEMMs (moe/local_experts.cpp: every ready expert's row blocks in
// one grouped_gemm), except while a Chrome trace records, when they run one by one so that each
// keeps its span. The two paths must give the same bits: losses, gradient norms and every final
// parameter, at world 1 and with EP 2 and 4 (several row blocks per expert: weight gradients
// summed over blocks in rounds, in block order), for every gather strategy, and in bf16.
TEST(MoeLayersTrain, GroupedExpertGemmsAreBitIdenticalToThePerExpertPath) {
  const fs::path dir = scratch("grouped");
  struct Case {
    std::vector<std::string> set;
  };
  const std::vector<Case> cases = {
      {{"parallel.world_size=1", "zero.stage=3"}},
      {{"parallel.world_size=4", "parallel.ep_size=2", "zero.stage=3", "train.grad_accum_steps=2"}},
      {{"parallel.world_size=4", "parallel.ep_size=4", "zero.stage=3"}},
      {{"parallel.world_size=2", "parallel.ep_size=2", "zero.stage=3", "zero.moe_gather=leaf"}},
      {{"parallel.world_size=2", "parallel.ep_size=1", "zero.stage=3", "zero.moe_gather=fsdp"}},
      {{"parallel.world_size=2", "parallel.ep_size=2", "zero.stage=3",
        "zero.reshard_after_forward=false", "train.dtype=bf16"}},
  };
  int n = 0;
  for (const Case& c : cases) {
    std::string what;
    for (const std::string& s : c.set) what += s + " ";
    SCOPED_TRACE(what);
    std::vector<std::string> traced = c.set;
    const fs::path trace = dir / ("trace" + std::to_string(n++) + ".json");
    traced.push_back("profile.trace=" + trace.string());
    const train::TrainResult grouped = run(layers_cfg(c.set)), one_by_one = run(layers_cfg(traced));
    // The traced run recorded per-expert spans: it took the one-by-one path.
    std::ifstream in(trace);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find(".experts.0 fwd"), std::string::npos) << "no expert span in " << trace;
    ASSERT_EQ(grouped.steps.size(), one_by_one.steps.size());
    for (size_t s = 0; s < grouped.steps.size(); ++s) {
      EXPECT_EQ(grouped.steps[s].loss, one_by_one.steps[s].loss) << "step " << s + 1;
      EXPECT_EQ(grouped.steps[s].grad_norm, one_by_one.steps[s].grad_norm) << "step " << s + 1;
    }
    ASSERT_EQ(grouped.params.size(), one_by_one.params.size());
    for (size_t g = 0; g < grouped.params.size(); ++g)
      EXPECT_EQ(grouped.params[g], one_by_one.params[g]) << grouped.group_names[g];
  }
  fs::remove_all(dir);
}

// profile.routing_trace: a header with the version and the world, then one line per step,
// micro-batch, MoE layer and rank; summed over micro-batches and ranks, the counts are the
// step's agreed tokens_per_expert, and each rank's counts sum to its k assignments per token.
TEST(MoeLayersTrain, RoutingTraceRecordsEveryRanksCounts) {
  const fs::path dir = scratch("trace");
  const fs::path path = dir / "routing.jsonl";
  const train::TrainResult r =
      run(layers_cfg({"parallel.world_size=2", "parallel.ep_size=2", "train.grad_accum_steps=2",
                      "train.steps=2", "profile.routing_trace=" + path.string()}));
  std::ifstream in(path);
  ASSERT_TRUE(in) << "no trace";
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const nlohmann::json h = nlohmann::json::parse(line);
  EXPECT_EQ(h["format"], "moezero routing trace");
  EXPECT_EQ(h["version"], 1);
  EXPECT_EQ(h["world_size"], 2);
  EXPECT_EQ(h["num_experts"], 4);
  EXPECT_EQ(h["moe_layers"], nlohmann::json::array({0, 1}));
  // (step, layer) -> summed counts
  std::vector<std::vector<std::vector<int64_t>>> sum(
      2, std::vector<std::vector<int64_t>>(2, std::vector<int64_t>(4, 0)));
  int lines = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    const int64_t step = j["step"], mb = j["micro_batch"], layer = j["layer"], rank = j["rank"];
    ASSERT_TRUE(step >= 1 && step <= 2 && layer >= 0 && layer <= 1 && rank >= 0 && rank <= 1);
    EXPECT_EQ(mb / 2, step - 1);
    const auto c = j["counts"].get<std::vector<int64_t>>();
    ASSERT_EQ(c.size(), 4u);
    int64_t total = 0;
    for (size_t e = 0; e < 4; ++e) {
      sum[step - 1][layer][e] += c[e];
      total += c[e];
    }
    EXPECT_EQ(total, 2 * (12 / 2) * 16);  // dropless: k x this rank's rows x seq_len
    ++lines;
  }
  EXPECT_EQ(lines, 2 * 2 * 2 * 2);  // steps x micro-batches x layers x ranks
  for (size_t s = 0; s < 2; ++s)
    for (size_t l = 0; l < 2; ++l) EXPECT_EQ(sum[s][l], r.steps[s].tokens_per_expert[l]);
  fs::remove_all(dir);
}

// The bias of a checkpoint's manifest (per MoE layer).
std::vector<std::vector<float>> saved_bias(const fs::path& step_dir) {
  std::ifstream in(step_dir / "manifest.json");
  EXPECT_TRUE(in) << "no manifest in " << step_dir;
  if (!in) return {};
  const nlohmann::json m = nlohmann::json::parse(in);
  return m.value("expert_bias", std::vector<std::vector<float>>{});
}

// 2 steps, save, resume for 2 more == 4 steps in one go: the same losses and routing, and the
// same final bias (it was restored, then moved on). The resumed world size differs (4 with
// EP 2 vs 2).
TEST(MoeLayersTrain, ResumeRestoresTheBias) {
  const fs::path dir = scratch("resume");
  const std::vector<std::string> base = {"moe.aux_loss_coef=0", "moe.expert_bias_update_rate=0.05"};
  auto cfg = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), base.begin(), base.end());
    return layers_cfg(extra);
  };
  const train::TrainResult whole =
      run(cfg({"parallel.world_size=2", "train.save_dir=" + (dir / "whole").string()}));
  const std::string save = "train.save_dir=" + (dir / "ckpt").string();
  train::TrainOptions first;
  first.stop_at_step = 2;
  run(cfg({"parallel.world_size=2", save}), first);
  const auto at_two = saved_bias(dir / "ckpt" / "step_00000002");
  ASSERT_EQ(at_two.size(), 2u);
  train::TrainOptions second;
  second.resume_from = (dir / "ckpt").string();
  const train::TrainResult rest =
      run(cfg({"parallel.world_size=4", "parallel.ep_size=2", save}), second);
  ASSERT_EQ(rest.steps.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_NEAR(rest.steps[s].loss, whole.steps[s + 2].loss, 1e-5 * whole.steps[s + 2].loss)
        << "step " << s + 3;
    EXPECT_EQ(rest.steps[s].tokens_per_expert, whole.steps[s + 2].tokens_per_expert)
        << "step " << s + 3;
  }
  const auto want = saved_bias(dir / "whole" / "step_00000004");
  EXPECT_EQ(saved_bias(dir / "ckpt" / "step_00000004"), want);
  // Restored, not restarted: a run from zeros over steps 3-4 alone would end within 2 rate
  // steps of 0, while the bias at step 2 already moved.
  bool moved = false;
  for (const auto& l : at_two)
    for (float b : l) moved |= b != 0.0f;
  EXPECT_TRUE(moved);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moezero::moe
