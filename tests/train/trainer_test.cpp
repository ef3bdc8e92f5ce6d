// The whole training path: every ZeRO stage at world sizes 2, 3 and 4 gives the losses and
// final parameters of one rank; accumulation; the loss falls; metrics; the LR schedule.
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/allocator.h"
#include "core/config.h"
#include "core/error.h"
#include "kernels/backend.h"
#include "tests/common/tiny_config.h"

namespace moezero::train {
namespace {

Config tiny(std::vector<std::string> overrides = {}) {
  std::vector<std::string> o = {"model.num_experts=0"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return test::tiny_config("tiny", o);
}

TrainResult run(const Config& c) {
  TrainOptions opt;
  opt.collect_params = true;
  return train(c, opt);
}

// Sums are taken in other orders across world sizes: agreement to float rounding. Adam
// normalises each gradient element, so a parameter whose gradient is pure rounding noise can
// move by up to 2 lr differently; such elements are counted and must be rare.
void expect_equivalent(const TrainResult& ref, const TrainResult& got, const std::string& what) {
  ASSERT_EQ(ref.steps.size(), got.steps.size());
  for (size_t s = 0; s < ref.steps.size(); ++s) {
    EXPECT_NEAR(got.steps[s].loss, ref.steps[s].loss, 1e-5 * std::abs(ref.steps[s].loss))
        << what << " step " << s + 1;
    EXPECT_NEAR(got.steps[s].grad_norm, ref.steps[s].grad_norm, 1e-4 * ref.steps[s].grad_norm)
        << what << " step " << s + 1;
  }
  ASSERT_EQ(ref.params.size(), got.params.size());
  size_t total = 0, off = 0;
  double worst = 0;
  for (size_t g = 0; g < ref.params.size(); ++g) {
    ASSERT_EQ(ref.params[g].size(), got.params[g].size());
    for (size_t i = 0; i < ref.params[g].size(); ++i) {
      double d = std::abs(double(ref.params[g][i]) - got.params[g][i]);
      worst = std::max(worst, d);
      off += d > 1e-5 * (1.0 + std::abs(ref.params[g][i]));
      ++total;
    }
  }
  EXPECT_LE(off, total / 10000 + 1)
      << what << ": " << off << " of " << total << " parameters differ by more than 1e-5 (worst "
      << worst << ")";
}

TEST(Trainer, EveryStageAtWorldSizes2To4MatchesOneRank) {
  const TrainResult ref = run(tiny({"parallel.world_size=1", "zero.stage=0"}));
  ASSERT_EQ(ref.steps.size(), 3u);
  for (int stage = 0; stage <= 3; ++stage)
    for (int world : {2, 3, 4}) {
      const std::string what = "stage " + std::to_string(stage) + " world " + std::to_string(world);
      expect_equivalent(ref,
                        run(tiny({"parallel.world_size=" + std::to_string(world),
                                  "zero.stage=" + std::to_string(stage)})),
                        what);
    }
}

TEST(Trainer, GradientAccumulationIsWorldSizeIndependent) {
  const TrainResult a =
      run(tiny({"parallel.world_size=1", "train.grad_accum_steps=2", "zero.stage=3"}));
  const TrainResult b =
      run(tiny({"parallel.world_size=4", "train.grad_accum_steps=2", "zero.stage=3"}));
  expect_equivalent(a, b, "accumulation");
  // Two micro-batches are twice the tokens of one.
  EXPECT_EQ(a.steps[0].tokens, 2 * 12 * 16);
}

TEST(Trainer, TinyConfigLossFallsClearly) {
  TrainResult r = train(
      tiny({"train.steps=40", "parallel.world_size=2", "train.lr=0.003", "train.warmup_steps=4"}),
      {});
  ASSERT_EQ(r.steps.size(), 40u);
  double last = 0;
  for (size_t s = 35; s < 40; ++s) last += r.steps[s].loss / 5;
  EXPECT_LT(last, r.steps[0].loss - 1.5) << "first " << r.steps[0].loss << ", last five " << last;
  EXPECT_NEAR(r.steps[0].loss, std::log(256.0), 0.3) << "a fresh model predicts ~uniformly";
}

TEST(Trainer, Bf16TrainsAndStaysCloseToFp32) {
  TrainResult f = train(tiny({"train.steps=10", "parallel.world_size=2"}), {});
  TrainResult b = train(tiny({"train.steps=10", "parallel.world_size=2", "train.dtype=bf16"}), {});
  for (size_t s = 0; s < 10; ++s)
    EXPECT_NEAR(b.steps[s].loss, f.steps[s].loss, 0.05 * f.steps[s].loss) << "step " << s + 1;
  EXPECT_LT(b.steps.back().loss, b.steps.front().loss - 0.5);
}

// zero.grad_accum_dtype (stage 1's sum of the micro-batches' gradients): the default is fp32,
// bit for bit; param in bf16 trains close to it with a smaller gradient peak; under fp32
// compute param is fp32.
TEST(Trainer, StageOneAccumulatesInTheParamDtype) {
  const auto run1 = [](const std::string& dtype, std::vector<std::string> more) {
    std::vector<std::string> o = {"train.steps=8", "parallel.world_size=2", "zero.stage=1",
                                  "train.grad_accum_steps=2", "train.dtype=" + dtype};
    o.insert(o.end(), more.begin(), more.end());
    return train(tiny(o), {});
  };
  const auto grad_peak = [](const TrainResult& r) {
    uint64_t peak = 0;
    for (const StepLog& s : r.steps)
      for (const RankStepStats& rs : s.ranks)
        peak = std::max(peak, rs.peak_bytes[static_cast<size_t>(MemTag::Grad)]);
    return peak;
  };
  const TrainResult def = run1("bf16", {});
  const TrainResult f = run1("bf16", {"zero.grad_accum_dtype=fp32"});
  const TrainResult p = run1("bf16", {"zero.grad_accum_dtype=param"});
  ASSERT_EQ(p.steps.size(), 8u);
  for (size_t s = 0; s < 8; ++s) {
    EXPECT_EQ(def.steps[s].loss, f.steps[s].loss) << "step " << s + 1;
    EXPECT_TRUE(std::isfinite(p.steps[s].loss)) << "step " << s + 1;
    EXPECT_NEAR(p.steps[s].loss, f.steps[s].loss, 0.02 * f.steps[s].loss) << "step " << s + 1;
  }
  EXPECT_LT(p.steps.back().loss, p.steps.front().loss - 0.3);
  EXPECT_LT(grad_peak(p), grad_peak(f));
  const TrainResult f32 = run1("fp32", {"zero.grad_accum_dtype=fp32"});
  const TrainResult p32 = run1("fp32", {"zero.grad_accum_dtype=param"});
  for (size_t s = 0; s < 8; ++s) EXPECT_EQ(p32.steps[s].loss, f32.steps[s].loss) << s + 1;
}

TEST(Trainer, MetricsFileHasOneLinePerStepWithPerRankCounters) {
  const std::string path = ::testing::TempDir() + "moezero_metrics_test.jsonl";
  for (int stage : {0, 3}) {
    TrainOptions opt;
    opt.metrics_path = path;
    train(tiny({"parallel.world_size=3", "zero.stage=" + std::to_string(stage)}), opt);
    std::ifstream in(path);
    std::string line;
    int n = 0;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      ++n;
      EXPECT_EQ(j["step"].get<int>(), n);
      for (const char* k : {"loss", "lr", "grad_norm", "tokens", "tokens_per_s", "elapsed_s"})
        EXPECT_TRUE(j.contains(k)) << k;
      ASSERT_EQ(j["ranks"].size(), 3u);
      for (const auto& r : j["ranks"]) {
        if (stage == 3) {
          EXPECT_GT(r["gathered_bytes"].get<uint64_t>(), 0u);
          EXPECT_GT(r["reduce_scattered_bytes"].get<uint64_t>(), 0u);
          EXPECT_GT(r["peak_bytes"]["full_param"].get<uint64_t>(), 0u);
        } else {
          EXPECT_EQ(r["gathered_bytes"].get<uint64_t>(), 0u);
          EXPECT_GT(r["all_reduced_bytes"].get<uint64_t>(), 0u);
          EXPECT_EQ(r["peak_bytes"]["full_param"].get<uint64_t>(), 0u);
        }
        EXPECT_GT(r["peak_bytes"]["activation"].get<uint64_t>(), 0u);
      }
    }
    EXPECT_EQ(n, 3) << "stage " << stage;
  }
}

TEST(Trainer, LearningRateWarmsUpThenDecaysToMin) {
  TrainConfig t;
  t.lr = 1.0;
  t.min_lr = 0.1;
  t.warmup_steps = 4;
  t.steps = 14;
  EXPECT_DOUBLE_EQ(lr_at(t, 0), 0.25);
  EXPECT_DOUBLE_EQ(lr_at(t, 3), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(t, 4), 1.0);
  EXPECT_NEAR(lr_at(t, 13), 0.1, 1e-12);
  for (int s = 5; s < 14; ++s) EXPECT_LT(lr_at(t, s), lr_at(t, s - 1));
}

Config tiny_moe(std::vector<std::string> overrides = {}) {
  std::vector<std::string> o = {"model.num_experts=4", "model.top_k=2", "moe.aux_loss_coef=0.01"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return tiny(o);
}

// Whole-model MoE equivalence: the loss of every step and the gradient norm do not depend on
// the world size, the expert-parallel width or the ZeRO stage. (Parameters are compared
// through the losses: with EP > 1 rank 0 holds only its own experts.)
TEST(TrainerMoe, WorldSizesEpWidthsAndStagesGiveTheSameLosses) {
  const TrainResult ref = run(tiny_moe({"parallel.world_size=1", "zero.stage=3", "train.steps=4"}));
  ASSERT_EQ(ref.steps.size(), 4u);
  struct Case {
    int world, ep, stage;
  };
  for (Case c : {Case{4, 1, 3}, Case{4, 2, 3}, Case{4, 4, 3}, Case{2, 2, 0}, Case{4, 2, 1},
                 Case{3, 1, 2}, Case{2, 2, 2}}) {
    const TrainResult r = run(tiny_moe({"parallel.world_size=" + std::to_string(c.world),
                                        "parallel.ep_size=" + std::to_string(c.ep),
                                        "zero.stage=" + std::to_string(c.stage), "train.steps=4"}));
    const std::string what = "world " + std::to_string(c.world) + " ep " + std::to_string(c.ep) +
                             " stage " + std::to_string(c.stage);
    ASSERT_EQ(r.steps.size(), ref.steps.size()) << what;
    for (size_t s = 0; s < ref.steps.size(); ++s) {
      EXPECT_NEAR(r.steps[s].loss, ref.steps[s].loss, 1e-5 * ref.steps[s].loss)
          << what << " step " << s + 1;
      EXPECT_NEAR(r.steps[s].grad_norm, ref.steps[s].grad_norm, 1e-4 * ref.steps[s].grad_norm)
          << what << " step " << s + 1;
      EXPECT_NEAR(r.steps[s].aux_loss, ref.steps[s].aux_loss, 1e-5 * ref.steps[s].aux_loss) << what;
      EXPECT_EQ(r.steps[s].tokens_per_expert, ref.steps[s].tokens_per_expert)
          << what << " step " << s + 1;
    }
  }
}

// zero.moe_gather changes only how experts are gathered: losses bit for bit, and the bytes of
// the incumbents: leaf gathers every local expert in forward and backward of every micro-batch,
// fsdp without a cache once per micro-batch, fsdp with the shard cache (FSDP2's
// reshard_after_backward=False, the bench's z3-fsdp-keep) once per step; leaf keeps nothing
// even with a cache (world 4, two micro-batches, EP 2 and EP 1).
TEST(TrainerMoe, MoeGatherStrategiesGiveTheSameLossesAndTheirBytes) {
  for (int ep : {2, 1}) {
    auto cfg = [&](const std::string& gather, const std::string& cache) {
      return tiny_moe({"parallel.world_size=4", "parallel.ep_size=" + std::to_string(ep),
                       "zero.stage=3", "train.steps=2", "train.grad_accum_steps=2",
                       "zero.param_persistence_threshold=0", "zero.moe_gather=" + gather,
                       "shard_cache.capacity_bytes=" + cache});
    };
    const Config c = cfg("leaf", "64MiB");
    EXPECT_EQ(c.zero.moe_gather, MoeGather::Leaf);
    const TrainResult experts = train(cfg("experts", "64MiB"), {}), leaf = train(c, {}),
                      fsdp = train(cfg("fsdp", "0"), {}), keep = train(cfg("fsdp", "64MiB"), {});
    // One volume of this rank's experts (compute dtype f32): every MoE layer's E / ep experts.
    const uint64_t volume = uint64_t(c.model.n_layers) * uint64_t(c.model.num_experts / ep) * 3 *
                            uint64_t(c.model.d_ff * c.model.d_model) * 4;
    for (size_t s = 0; s < experts.steps.size(); ++s) {
      const std::string what = "ep " + std::to_string(ep) + " step " + std::to_string(s + 1);
      EXPECT_EQ(leaf.steps[s].loss, experts.steps[s].loss) << what;
      EXPECT_EQ(fsdp.steps[s].loss, experts.steps[s].loss) << what;
      EXPECT_EQ(keep.steps[s].loss, experts.steps[s].loss) << what;
      EXPECT_EQ(leaf.steps[s].grad_norm, experts.steps[s].grad_norm) << what;
      for (size_t r = 0; r < 4; ++r) {
        EXPECT_EQ(leaf.steps[s].ranks[r].gathered_expert_bytes, 2 * 2 * volume) << what;
        EXPECT_EQ(fsdp.steps[s].ranks[r].gathered_expert_bytes, 2 * volume) << what;
        EXPECT_EQ(keep.steps[s].ranks[r].gathered_expert_bytes, volume) << what;
        EXPECT_GT(keep.steps[s].ranks[r].cache_hits, 0u) << what << ": the second micro-batch";
        EXPECT_EQ(leaf.steps[s].ranks[r].gathered_dense_bytes,
                  experts.steps[s].ranks[r].gathered_dense_bytes)
            << what;
        EXPECT_EQ(leaf.steps[s].ranks[r].cache_hits, 0u) << what << ": leaf keeps nothing";
      }
    }
  }
}

TEST(TrainerMoe, StageOneMovesTwoVolumesPerStep) {
  // Stage 1: gradients reduce-scattered once per step (not all-reduced per micro-batch), the
  // updated parameters all-gathered: equal volumes, and the losses of stage 2.
  auto cfg = [](int stage) {
    return tiny({"parallel.world_size=4", "train.grad_accum_steps=2",
                 "zero.stage=" + std::to_string(stage)});
  };
  const TrainResult one = train(cfg(1), {}), two = train(cfg(2), {});
  for (size_t s = 0; s < one.steps.size(); ++s) {
    const RankStepStats& r = one.steps[s].ranks[0];
    EXPECT_EQ(r.all_reduced_bytes, 0u);
    EXPECT_EQ(r.reduce_scattered_bytes, r.gathered_bytes) << "step " << s + 1;
    EXPECT_EQ(two.steps[s].ranks[0].reduce_scattered_bytes, 2 * r.gathered_bytes);
    EXPECT_NEAR(one.steps[s].loss, two.steps[s].loss, 1e-5 * two.steps[s].loss);
  }
}

TEST(TrainerMoe, MetricsReportRoutingAndTraffic) {
  const std::string path = ::testing::TempDir() + "moezero_moe_metrics.jsonl";
  TrainOptions opt;
  opt.metrics_path = path;
  TrainResult r = train(tiny_moe({"parallel.world_size=4", "parallel.ep_size=2",
                                  "model.moe_every=2", "model.n_layers=4"}),
                        opt);
  for (const StepLog& s : r.steps) {
    ASSERT_EQ(s.tokens_per_expert.size(), 2u) << "layers 1 and 3 are MoE with moe_every = 2";
    for (const auto& layer : s.tokens_per_expert) {
      int64_t sum = 0;
      for (int64_t n : layer) sum += n;
      EXPECT_EQ(sum, 12 * 16 * 2) << "dropless: every token's 2 choices are kept";
    }
    // aux = E * sum_e F_e P_e is k for a perfectly balanced router and >= k/E * k otherwise.
    EXPECT_GT(s.aux_loss, 0.5 * 2 * 2);
    for (const auto& rk : s.ranks) EXPECT_GT(rk.a2a_bytes, 0u) << "EP 2 exchanges tokens";
  }
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  auto j = nlohmann::json::parse(line);
  EXPECT_TRUE(j.contains("aux_loss"));
  EXPECT_EQ(j["tokens_per_expert"].size(), 2u);
  EXPECT_TRUE(j["ranks"][0].contains("a2a_bytes"));
}

TEST(TrainerMoe, CapacityBf16JitterAndZLossTrain) {
  TrainResult r =
      train(tiny_moe({"parallel.world_size=2", "parallel.ep_size=2", "train.steps=12",
                      "train.dtype=bf16", "moe.capacity_factor=1.0", "moe.router_jitter=0.01",
                      "moe.z_loss_coef=0.001", "train.lr=0.003"}),
            {});
  ASSERT_EQ(r.steps.size(), 12u);
  EXPECT_LT(r.steps.back().loss, r.steps.front().loss - 0.5);
  int64_t kept = 0;
  for (const auto& layer : r.steps.front().tokens_per_expert)
    for (int64_t n : layer) kept += n;
  EXPECT_LE(kept, int64_t{2} * 12 * 16 * 2) << "capacity can only drop";
}

// Prefetch policies and the shard cache change when parameters move, never a number of the
// math: losses are bit-identical for every policy and cache size (the CPU backend is
// deterministic and collectives reduce in rank order).
TEST(TrainerPrefetch, EveryPolicyAndCacheSizeGivesIdenticalLosses) {
  std::vector<std::string> base = {"parallel.world_size=4", "parallel.ep_size=2", "train.steps=4",
                                   "train.grad_accum_steps=2"};
  auto with = [&](std::vector<std::string> extra) {
    auto o = base;
    o.insert(o.end(), extra.begin(), extra.end());
    return run(tiny_moe(o));
  };
  const TrainResult ref = with({"prefetch.policy=none", "shard_cache.capacity_bytes=0"});
  for (const char* reshard : {"true", "false"})
    for (const char* policy : {"none", "all", "frequency", "cost", "cost-priced"})
      for (const char* cache : {"0", "40000", "64MiB"}) {
        // cost-priced: the cost policy with prefetch.speculate=priced (the gate's alternative).
        const bool priced = std::string(policy) == "cost-priced";
        // An expert group of this model is 3 x 48 x 32 f32 = 18 KiB: 40000 bytes hold two of
        // the four, so the cache churns (evictions); 64 MiB holds all.
        const TrainResult r = with(
            {std::string("prefetch.policy=") + (priced ? "cost" : policy),
             std::string("prefetch.speculate=") + (priced ? "priced" : "idle"),
             std::string("shard_cache.capacity_bytes=") + cache,
             std::string("zero.reshard_after_forward=") + reshard, "prefetch.min_probability=0.5",
             "prefetch.budget_bytes=8000", "prefetch.link_gbps=1"});  // cost: a link model to price
        const std::string what =
            std::string(policy) + " cache " + cache + " reshard_after_forward " + reshard;
        ASSERT_EQ(r.steps.size(), ref.steps.size());
        for (size_t s = 0; s < r.steps.size(); ++s)
          EXPECT_EQ(r.steps[s].loss, ref.steps[s].loss) << what << " step " << s + 1;
        for (size_t g = 0; g < r.params.size(); ++g)
          EXPECT_EQ(r.params[g], ref.params[g]) << what << " group " << g;
      }
}

// shard_cache.eviction=value (prefetch/budget_planner.h) decides what stays resident, never a
// number: losses and parameters are bit-identical to lfu's at world 4 (EP 2, three
// micro-batches), with a churning cache and one that holds every expert, resharding after
// forward or holding. With room for every expert it gathers exactly what lfu gathers (it only
// frees entries no use is left for in the step, counted as evictions; lfu never evicts there).
TEST(TrainerPrefetch, ValueEvictionGivesLfuLossesBitForBit) {
  auto with = [](const char* eviction, const char* cache, const char* reshard) {
    return run(tiny_moe({"parallel.world_size=4", "parallel.ep_size=2", "train.steps=3",
                         "train.grad_accum_steps=3", "prefetch.link_gbps=1",
                         std::string("shard_cache.eviction=") + eviction,
                         std::string("shard_cache.capacity_bytes=") + cache,
                         std::string("zero.reshard_after_forward=") + reshard}));
  };
  for (const char* reshard : {"true", "false"})
    for (const char* cache : {"40000", "64MiB"}) {
      const TrainResult lfu = with("lfu", cache, reshard), value = with("value", cache, reshard);
      const std::string what = std::string("cache ") + cache + " reshard_after_forward " + reshard;
      const bool roomy = std::string(cache) == "64MiB";
      ASSERT_EQ(value.steps.size(), lfu.steps.size());
      uint64_t value_evictions = 0;
      for (size_t s = 0; s < lfu.steps.size(); ++s) {
        EXPECT_EQ(value.steps[s].loss, lfu.steps[s].loss) << what << " step " << s + 1;
        for (size_t r = 0; r < 4 && roomy; ++r) {
          const RankStepStats &v = value.steps[s].ranks[r], &l = lfu.steps[s].ranks[r];
          EXPECT_EQ(v.gathered_expert_bytes, l.gathered_expert_bytes) << what << " rank " << r;
          EXPECT_EQ(l.cache_evictions, 0u) << what;
          value_evictions += v.cache_evictions;
        }
      }
      if (roomy) {
        EXPECT_GT(value_evictions, 0u) << what;
      }
      for (size_t g = 0; g < lfu.params.size(); ++g)
        EXPECT_EQ(value.params[g], lfu.params[g]) << what << " group " << g;
    }
}

// zero.reshard_after_forward=false without a cache: each active expert is gathered once per
// micro-batch (forward) and kept for its backward, not gathered again; the backward's use is
// still needed bytes, but neither a gather, a cache lookup nor a miss. Multi-rank (world 4,
// EP 1: every rank holds every expert, so the agreed active set is this rank's). Held without
// a byte limit (FSDP2's reshard_after_forward=False): also when zero.max_live_parameters is
// one expert's bytes, which bounds only what is gathered ahead.
class TrainerKeptExperts : public ::testing::TestWithParam<bool> {};

TEST_P(TrainerKeptExperts, AreGatheredOncePerMicroBatch) {
  const bool tiny_live_limit = GetParam();
  auto cfg = [&](const std::string& reshard) {
    std::vector<std::string> o = {"parallel.world_size=4",
                                  "parallel.ep_size=1",
                                  "model.num_experts=8",
                                  "train.steps=3",
                                  "train.grad_accum_steps=3",
                                  "prefetch.policy=none",
                                  "shard_cache.capacity_bytes=0",
                                  "zero.param_persistence_threshold=0",
                                  "zero.reshard_after_forward=" + reshard};
    Config base = tiny_moe(o);
    if (tiny_live_limit)
      o.push_back("zero.max_live_parameters=" +
                  std::to_string(3 * base.model.d_ff * base.model.d_model * 4));
    return tiny_moe(o);
  };
  const Config c = cfg("false");
  EXPECT_FALSE(c.zero.reshard_after_forward);
  const TrainResult keep = train(c, {}), again = train(cfg("true"), {});
  const uint64_t expert_bytes = 3 * uint64_t(c.model.d_ff * c.model.d_model) * 4;  // f32
  if (tiny_live_limit) {
    ASSERT_EQ(c.zero.max_live_parameters, expert_bytes);
  }
  ASSERT_EQ(keep.steps.size(), again.steps.size());
  for (size_t s = 0; s < keep.steps.size(); ++s)
    for (size_t r = 0; r < 4; ++r) {
      const RankStepStats& k = keep.steps[s].ranks[r];
      const RankStepStats& a = again.steps[s].ranks[r];
      const std::string what = "step " + std::to_string(s + 1) + " rank " + std::to_string(r);
      ASSERT_GT(k.active_layer_experts, 0u) << what;
      EXPECT_EQ(k.gathered_expert_bytes, k.active_layer_experts * expert_bytes) << what;
      EXPECT_EQ(a.gathered_expert_bytes, 2 * a.active_layer_experts * expert_bytes) << what;
      EXPECT_EQ(k.needed_expert_bytes, 2 * k.gathered_expert_bytes) << what;
      EXPECT_EQ(k.prefetch_misses, k.active_layer_experts) << what << ": forward's only";
      EXPECT_EQ(k.exact_prefetches, 0u) << what;
      EXPECT_EQ(k.cache_hits + k.cache_misses, 0u) << what;
      EXPECT_EQ(keep.steps[s].loss, again.steps[s].loss) << what;
    }
}

INSTANTIATE_TEST_SUITE_P(LiveLimit, TrainerKeptExperts, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("OneExpertLiveLimit")
                                          : std::string("DefaultLiveLimit");
                         });

// A data source whose token distribution is skewed (few distinct tokens, so routing collapses
// onto few experts) and drifts (the token set changes every few micro-batches): collectives
// must still match on every rank (the LocalCommunicator checks each call), the frequency model
// must be identical on every rank, and the cache budget and live limit must hold.
class TrainerPrefetchEviction : public ::testing::TestWithParam<const char*> {};

// LFU, LRU and value: the cache's recency bookkeeping advances with acquires, so both must see the
// same acquire order on every rank of an EDP group (the LocalCommunicator's call check fails
// otherwise).
TEST_P(TrainerPrefetchEviction, SkewedDriftingRoutingKeepsRanksInStep) {
  Config cfg = tiny_moe({"parallel.world_size=4", "parallel.ep_size=2", "train.steps=6",
                         "model.num_experts=8", "prefetch.policy=frequency",
                         "shard_cache.capacity_bytes=40000", "zero.max_live_parameters=40000",
                         std::string("shard_cache.eviction=") + GetParam()});
  TrainOptions opt;
  opt.collect_params = true;
  opt.data = [](const BatchRequest& b, std::vector<int32_t>& tok, std::vector<int32_t>& tgt) {
    tok.resize(static_cast<size_t>(b.rows * b.seq_len));
    tgt.resize(tok.size());
    const int phase = static_cast<int>(b.micro_batch / 3);  // drift every 3 micro-batches
    for (int64_t r = 0; r < b.rows; ++r)
      for (int64_t t = 0; t < b.seq_len; ++t) {
        const int64_t row = b.row_begin + r;
        const int32_t v = static_cast<int32_t>((phase * 37 + (row % 2) * 5 + t % 3) % 256);
        tok[static_cast<size_t>(r * b.seq_len + t)] = v;
        tgt[static_cast<size_t>(r * b.seq_len + t)] = static_cast<int32_t>((v + 1) % 256);
      }
  };
  const std::string metrics = ::testing::TempDir() + "moezero_skew_metrics.jsonl";
  opt.metrics_path = metrics;
  TrainResult r = train(cfg, opt);
  ASSERT_EQ(r.frequency_models.size(), 4u);
  for (int k = 1; k < 4; ++k)
    EXPECT_EQ(r.frequency_models[k], r.frequency_models[0]) << "rank " << k;
  std::ifstream in(metrics);
  std::string line;
  int active_below_all = 0;
  uint64_t evictions = 0, hits = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    for (const auto& layer : j["tokens_per_expert"]) {
      int active = 0;
      for (const auto& n : layer) active += n.get<int64_t>() > 0;
      active_below_all += active < 8;
    }
    for (const auto& rk : j["ranks"]) {
      EXPECT_LE(rk["peak_bytes"]["cache"].get<uint64_t>(), 40000u) << "shard cache over budget";
      // Live gathered parameters: the limit plus the one group an acquire may need (f32
      // groups of this model are at most the 32 KiB embedding/head).
      EXPECT_LE(rk["peak_bytes"]["full_param"].get<uint64_t>(), 40000u + 33000u);
      evictions += rk["cache_evictions"].get<uint64_t>();
      hits += rk["cache_hits"].get<uint64_t>();
    }
  }
  EXPECT_GT(active_below_all, 0) << "the skewed data should leave some experts unused";
  EXPECT_GT(hits, 0u) << "forward-to-backward reuse";
  EXPECT_GT(evictions, 0u) << "a cache of two experts must evict";
}
INSTANTIATE_TEST_SUITE_P(Eviction, TrainerPrefetchEviction,
                         ::testing::Values("lfu", "lru", "value"));

// The CUDA path (one rank per GPU, NCCL): on one GPU the MoE model's losses follow the CPU's.
// Tolerance: cuBLAS and the CUDA kernels sum in other orders than the CPU backend; fp32.
TEST(TrainerCuda, OneGpuFollowsTheCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "CUDA unavailable: " << why;
  const TrainResult cpu = train(tiny_moe({"parallel.world_size=1", "train.steps=5"}), {});
  const TrainResult gpu =
      train(tiny_moe({"parallel.world_size=1", "train.steps=5", "parallel.backend=cuda"}), {});
  ASSERT_EQ(gpu.steps.size(), cpu.steps.size());
  for (size_t s = 0; s < cpu.steps.size(); ++s)
    EXPECT_NEAR(gpu.steps[s].loss, cpu.steps[s].loss, 1e-3 * cpu.steps[s].loss) << "step " << s + 1;
}

// A non-finite gradient norm (here: a learning rate that blows the weights up after one step)
// stops the run with an error naming the step, or, with on_nonfinite = skip, skips the update.
TEST(Trainer, NonFiniteGradientStopsOrSkips) {
  try {
    train(tiny({"train.lr=1e30", "train.warmup_steps=0", "train.min_lr=0", "train.steps=4",
                "train.grad_clip=0"}),
          {});
    FAIL() << "expected a non-finite gradient error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-finite gradient norm at step"), std::string::npos)
        << e.what();
  }
  TrainResult r = train(tiny({"train.lr=1e30", "train.warmup_steps=0", "train.min_lr=0",
                              "train.steps=4", "train.grad_clip=0", "train.on_nonfinite=skip"}),
                        {});
  ASSERT_EQ(r.steps.size(), 4u);
  EXPECT_TRUE(r.steps[0].applied);
  int skipped = 0;
  for (const auto& s : r.steps) skipped += s.applied ? 0 : 1;
  EXPECT_GT(skipped, 0);
}

TEST(Trainer, BadCustomDataIsRefusedNamingThePlace) {
  auto expect = [](DataSource src, const std::string& needle) {
    TrainOptions opt;
    opt.data = std::move(src);
    try {
      train(tiny({"parallel.world_size=2"}), opt);
      ADD_FAILURE() << "accepted bad data; expected '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect(
      [](const BatchRequest& b, std::vector<int32_t>& tok, std::vector<int32_t>& tgt) {
        tok.assign(static_cast<size_t>(b.rows * b.seq_len) - 1, 0);  // one short
        tgt.assign(tok.size(), 0);
      },
      "data source returned");
  expect(
      [](const BatchRequest& b, std::vector<int32_t>& tok, std::vector<int32_t>& tgt) {
        tok.assign(static_cast<size_t>(b.rows * b.seq_len), 3);
        tgt.assign(tok.size(), 3);
        tok[5] = 256;  // outside the byte vocabulary
      },
      "token 256");
}

TEST(Trainer, BadInputFailsBeforeTraining) {
  EXPECT_THROW(train(tiny({"data.path=/nonexistent/file.txt"}), {}), Error);
  EXPECT_THROW(train(tiny({"parallel.backend=cuda"}), {}), Error);
  TrainOptions opt;
  opt.metrics_path = "/nonexistent/dir/m.jsonl";
  EXPECT_THROW(train(tiny(), opt), Error);
}

// A dense group released after its forward whose backward use lies within the prefetch window
// stays gathered instead of being gathered again right away (zero/fetch_coordinator.cpp,
// release): from the second step (the recorded order replays) each dense group is gathered once
// per micro-batch; with a prefetch window too small to reach the backward, released groups are
// gathered again for it.
// The losses are the same bit for bit.
TEST(TrainerPrefetch, DenseGroupsReusedInBackwardAreNotGatheredTwice) {
  auto with = [](const char* bucket) {
    return run(tiny_moe({"parallel.world_size=2", "train.steps=3", "zero.keep_dense_bytes=0",
                         std::string("zero.prefetch_bucket_size=") + bucket}));
  };
  const TrainResult kept = with("64MiB"), twice = with("1");
  ASSERT_EQ(kept.steps.size(), 3u);
  ASSERT_EQ(twice.steps.size(), 3u);
  for (size_t s = 0; s < kept.steps.size(); ++s)
    EXPECT_EQ(kept.steps[s].loss, twice.steps[s].loss) << "step " << s + 1;
  for (size_t s = 1; s < kept.steps.size(); ++s) {
    const uint64_t once = kept.steps[s].ranks[0].gathered_dense_bytes;
    ASSERT_GT(once, 0u);
    // Gathered again for backward (the embedding and head too, where no other group's use
    // lies between their forward and backward: not always re-gathered): strictly more.
    EXPECT_LT(once, twice.steps[s].ranks[0].gathered_dense_bytes) << "step " << s + 1;
  }
}

}  // namespace
}  // namespace moezero::train
