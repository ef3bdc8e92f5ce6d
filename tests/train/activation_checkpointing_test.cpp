// train.activation_checkpointing (model/transformer.h): selective and full give the losses,
// gradient norms, routing statistics and final parameters of `none` bit for bit (dense and MoE,
// world 1 and world 4 with EP 2, ZeRO-3, bf16, capacity + jitter + expert bias, every expert
// gather strategy); the measured activation peak drops (full < selective < none); under
// ZeRO-3 a fully checkpointed block is gathered once for its recompute and backward together;
// a bad value is refused naming the key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/config.h"
#include "core/error.h"
#include "tests/common/tiny_config.h"
#include "train/memory_estimate.h"
#include "train/trainer.h"

namespace moezero::train {
namespace {

Config cfg_with(std::vector<std::string> o, const std::string& mode) {
  o.push_back("train.activation_checkpointing=" + mode);
  return test::tiny_moe_config("ckpt", o);
}

TrainResult run(const Config& c) {
  TrainOptions opt;
  opt.collect_params = true;
  return train(c, opt);
}

// Bit for bit: the same ops on the same inputs.
void expect_identical(const TrainResult& ref, const TrainResult& got, const std::string& what) {
  ASSERT_EQ(ref.steps.size(), got.steps.size()) << what;
  for (size_t s = 0; s < ref.steps.size(); ++s) {
    const std::string at = what + " step " + std::to_string(s + 1);
    EXPECT_EQ(got.steps[s].loss, ref.steps[s].loss) << at;
    EXPECT_EQ(got.steps[s].grad_norm, ref.steps[s].grad_norm) << at;
    EXPECT_EQ(got.steps[s].aux_loss, ref.steps[s].aux_loss) << at;
    // Learned and counted once per micro-batch, not again in the recompute.
    EXPECT_EQ(got.steps[s].tokens_per_expert, ref.steps[s].tokens_per_expert) << at;
  }
  ASSERT_EQ(ref.params.size(), got.params.size()) << what;
  for (size_t g = 0; g < ref.params.size(); ++g)
    EXPECT_EQ(ref.params[g], got.params[g]) << what << " parameter group " << g;
}

void expect_modes_identical(const std::vector<std::string>& o, const std::string& what) {
  const TrainResult none = run(cfg_with(o, "none"));
  for (const char* mode : {"selective", "full"})
    expect_identical(none, run(cfg_with(o, mode)), what + " " + mode);
}

TEST(ActivationCheckpointing, DenseAndMoeOneRankBitForBit) {
  expect_modes_identical({"model.num_experts=0", "parallel.world_size=1"}, "dense world 1");
  expect_modes_identical({"parallel.world_size=1", "zero.stage=3"}, "moe world 1");
}

TEST(ActivationCheckpointing, WorldFourExpertParallelZero3Bf16BitForBit) {
  const std::vector<std::string> w4 = {"parallel.world_size=4", "parallel.ep_size=2",
                                       "zero.stage=3", "zero.param_persistence_threshold=0"};
  expect_modes_identical(w4, "world 4 ep 2 z3");
  std::vector<std::string> bf16 = w4;
  bf16.push_back("train.dtype=bf16");
  bf16.push_back("train.grad_accum_steps=2");
  expect_modes_identical(bf16, "world 4 ep 2 z3 bf16 accum 2");
}

// The router's learned and counted state: capacity drops (a host decision), jitter noise, the
// z-loss, the expert-bias load (counted in backward), the frequency model behind the prefetch
// and the shard cache, and the routing trace (profile.routing_trace: per-rank counts recorded
// once per micro-batch and layer, so the files are equal).
TEST(ActivationCheckpointing, RouterStateIsNotUpdatedTwice) {
  const std::vector<std::string> o = {"parallel.world_size=2",
                                      "parallel.ep_size=2",
                                      "zero.stage=3",
                                      "train.steps=4",
                                      "moe.capacity_factor=1.0",
                                      "moe.router_jitter=0.1",
                                      "moe.z_loss_coef=0.001",
                                      "moe.expert_bias_update_rate=0.01",
                                      "shard_cache.capacity_bytes=64KiB"};
  auto traced = [&](const std::string& mode) {
    std::vector<std::string> t = o;
    t.push_back("profile.routing_trace=" + ::testing::TempDir() + "moezero_ckpt_routes_" + mode +
                ".jsonl");
    return cfg_with(t, mode);
  };
  auto read = [](const Config& c) {
    std::ifstream in(c.profile.routing_trace);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const Config none_cfg = traced("none");
  const TrainResult none = run(none_cfg);
  const std::string none_trace = read(none_cfg);
  EXPECT_FALSE(none_trace.empty());
  for (const char* mode : {"selective", "full"}) {
    const Config c = traced(mode);
    expect_identical(none, run(c), std::string("capacity jitter z bias ") + mode);
    EXPECT_EQ(read(c), none_trace) << mode << ": the routing trace";
  }
}

TEST(ActivationCheckpointing, EveryExpertGatherStrategyBitForBit) {
  for (const char* g : {"leaf", "fsdp"})
    expect_modes_identical(
        {"parallel.world_size=4", "parallel.ep_size=2", "zero.stage=3",
         "zero.param_persistence_threshold=0", std::string("zero.moe_gather=") + g},
        g);
  expect_modes_identical({"parallel.world_size=4", "parallel.ep_size=2", "zero.stage=3",
                          "zero.param_persistence_threshold=0", "zero.reshard_after_forward=false"},
                         "experts held since forward");
}

uint64_t max_over(const TrainResult& r, uint64_t (*f)(const RankStepStats&)) {
  uint64_t m = 0;
  for (const StepLog& s : r.steps)
    for (const RankStepStats& rs : s.ranks) m = std::max(m, f(rs));
  return m;
}
uint64_t activation_peak(const RankStepStats& r) {
  return r.peak_bytes[static_cast<size_t>(MemTag::Activation)];
}

// Measured peaks (the allocator's MemTag::Activation), not timing.
TEST(ActivationCheckpointing, MeasuredActivationPeakDrops) {
  const std::vector<std::string> o = {"parallel.world_size=2", "parallel.ep_size=2", "zero.stage=3",
                                      "model.n_layers=4", "train.steps=2"};
  const uint64_t none = max_over(run(cfg_with(o, "none")), activation_peak);
  const uint64_t selective = max_over(run(cfg_with(o, "selective")), activation_peak);
  const uint64_t full = max_over(run(cfg_with(o, "full")), activation_peak);
  std::printf("activation peak bytes: none %llu, selective %llu, full %llu\n",
              static_cast<unsigned long long>(none), static_cast<unsigned long long>(selective),
              static_cast<unsigned long long>(full));
  EXPECT_LT(full, selective);
  EXPECT_LT(selective, none);
  // The estimate orders the modes the same way.
  auto est = [&](const char* mode) {
    return estimate_memory(cfg_with(o, mode), false).activations;
  };
  EXPECT_LT(est("full"), est("selective"));
  EXPECT_LT(est("selective"), est("none"));
}

// A fully checkpointed block's parameters are held from its recompute to its backward: under
// ZeRO-3 backward gathers exactly what it gathers without checkpointing (one gather per group
// and pass), dense groups and experts alike.
TEST(ActivationCheckpointing, FullGathersEachBlockOnceInBackward) {
  const std::vector<std::string> o = {"parallel.world_size=4", "parallel.ep_size=2", "zero.stage=3",
                                      "zero.param_persistence_threshold=0"};
  const TrainResult none = run(cfg_with(o, "none")), full = run(cfg_with(o, "full"));
  for (size_t s = 0; s < none.steps.size(); ++s)
    for (size_t r = 0; r < none.steps[s].ranks.size(); ++r) {
      const RankStepStats &a = none.steps[s].ranks[r], &b = full.steps[s].ranks[r];
      EXPECT_EQ(b.gathered_dense_bytes, a.gathered_dense_bytes) << "step " << s << " rank " << r;
      EXPECT_EQ(b.gathered_expert_bytes, a.gathered_expert_bytes) << "step " << s << " rank " << r;
    }
}

TEST(ActivationCheckpointing, BadValueIsRefusedNamingTheKey) {
  try {
    cfg_with({}, "partial");
    FAIL() << "accepted train.activation_checkpointing=partial";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.activation_checkpointing"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace moezero::train
