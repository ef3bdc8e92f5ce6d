// train/memory_estimate.h against the allocator: the model states are exact (by tag), the
// certain part never exceeds what a run really takes (so no run that fits is refused), and
// the whole estimate is within a stated factor of the measured peak; a run that cannot fit
// train.memory_limit is refused before any rank starts, with the numbers.
#include "train/memory_estimate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/allocator.h"
#include "core/config.h"
#include "core/error.h"
#include "train/trainer.h"

namespace moezero::train {
namespace {

Config small(std::vector<std::string> overrides) {
  std::vector<std::string> o = {
      "model.d_model=32",    "model.n_layers=2",     "model.n_heads=4",
      "model.n_kv_heads=2",  "model.d_ff=48",        "model.seq_len=16",
      "model.num_experts=4", "model.top_k=2",        "train.micro_batch_size=4",
      "train.steps=2",       "train.warmup_steps=1", "zero.param_persistence_threshold=64",
      "comm.timeout_s=60"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return parse_config("{}", "small", o);
}

uint64_t tag(const RankStepStats& r, MemTag t) { return r.peak_bytes[static_cast<size_t>(t)]; }

// The allocator's peak over a run may exceed the estimate by at most this factor, and the
// estimate may exceed the peak by at most this factor (it counts a whole working set that a
// small model never fills).
constexpr double kFactor = 2.0;  // measured: at most 1.4 (totals), 1.7 (activations)

void check_against_run(const std::vector<std::string>& overrides) {
  const Config cfg = small(overrides);
  const MemoryEstimate e = estimate_memory(cfg, false);
  TrainOptions opt;
  const TrainResult r = train(cfg, opt);
  ASSERT_EQ(r.steps.size(), 2u);
  SCOPED_TRACE(::testing::PrintToString(overrides));
  uint64_t peak = 0, act = 0;
  for (const StepLog& s : r.steps)
    for (const RankStepStats& rs : s.ranks) {
      // Model states: exact, every rank (same shapes; equal shards).
      EXPECT_EQ(tag(rs, MemTag::ParamShard), e.params);
      EXPECT_EQ(tag(rs, MemTag::OptimState), e.optim);
      EXPECT_GE(tag(rs, MemTag::Grad), e.grads);
      EXPECT_LE(tag(rs, MemTag::Grad), e.grads + e.gathered);
      peak = std::max<uint64_t>(peak, rs.peak_total_bytes);
      act = std::max<uint64_t>(act, tag(rs, MemTag::Activation));
    }
  EXPECT_LE(e.certain(), peak) << "the certain part must never refuse a run that fits";
  EXPECT_LE(double(peak), kFactor * double(e.per_rank()));
  EXPECT_LE(double(e.per_rank()), kFactor * double(peak));
  EXPECT_LE(double(act), kFactor * double(e.activations));
  EXPECT_LE(double(e.activations), kFactor * double(act));
}

TEST(MemoryEstimate, Zero3MoeExpertParallel) {
  check_against_run({"parallel.world_size=2", "parallel.ep_size=2", "zero.stage=3"});
}
TEST(MemoryEstimate, Zero3MoeBf16) {
  check_against_run({"parallel.world_size=2", "zero.stage=3", "train.dtype=bf16"});
}
// train.activation_checkpointing: the estimate follows what each mode keeps.
TEST(MemoryEstimate, Zero3MoeSelectiveCheckpointing) {
  check_against_run({"parallel.world_size=2", "zero.stage=3", "model.n_layers=4",
                     "train.activation_checkpointing=selective"});
}
TEST(MemoryEstimate, Zero3MoeFullCheckpointing) {
  check_against_run({"parallel.world_size=2", "parallel.ep_size=2", "zero.stage=3",
                     "model.n_layers=4", "train.activation_checkpointing=full"});
}
TEST(MemoryEstimate, Zero2Dense) {
  check_against_run({"parallel.world_size=2", "zero.stage=2", "model.num_experts=0"});
}
TEST(MemoryEstimate, Zero1Moe) { check_against_run({"parallel.world_size=2", "zero.stage=1"}); }
TEST(MemoryEstimate, Zero0OneRank) {
  check_against_run({"parallel.world_size=1", "zero.stage=0", "train.micro_batch_size=2"});
}

// zero.grad_accum_dtype=param: stage 1's sum of the micro-batches' full gradients in bf16 is
// half the fp32 one (2 bytes per parameter instead of 4), plus the fp32 gradients of the
// groups in backward (as from stage 2); the states do not move, and fp32 compute or another
// stage is unchanged. The estimate holds against a run.
TEST(MemoryEstimate, Zero1AccumulatesInTheParamDtype) {
  const auto est = [](int stage, const std::string& dtype, const std::string& accum) {
    return estimate_memory(small({"parallel.world_size=2", "zero.stage=" + std::to_string(stage),
                                  "train.dtype=" + dtype, "train.grad_accum_steps=2",
                                  "zero.grad_accum_dtype=" + accum}),
                           false);
  };
  const MemoryEstimate f = est(1, "bf16", "fp32"), p = est(1, "bf16", "param");
  // Every group is sharded over both ranks (EP 1): the full gradients hold world x the
  // gradient shards' elements, at 4 or 2 bytes where the shards take 2.
  EXPECT_EQ(f.grad_accum, 4 * f.grads);
  EXPECT_EQ(p.grad_accum, 2 * p.grads);
  EXPECT_EQ(f.states(), p.states());
  // The rest of the working set gains the fp32 gradients of the groups in backward.
  EXPECT_GT(p.gathered - p.grad_accum, f.gathered - f.grad_accum);
  for (const auto& [stage, dtype] : {std::pair{1, "fp32"}, std::pair{2, "bf16"}}) {
    const MemoryEstimate a = est(stage, dtype, "fp32"), b = est(stage, dtype, "param");
    EXPECT_EQ(a.gathered, b.gathered) << stage << dtype;
    EXPECT_EQ(a.grad_accum, b.grad_accum) << stage << dtype;
  }
  check_against_run({"parallel.world_size=2", "zero.stage=1", "train.dtype=bf16",
                     "train.grad_accum_steps=2", "zero.grad_accum_dtype=param"});
}

// The shard cache is counted where it is built: experts and fsdp (kept across micro-batches,
// FSDP2's reshard_after_backward=False), never leaf; fsdp's estimate holds against a run.
TEST(MemoryEstimate, CacheCountedForExpertsAndFsdpNotLeaf) {
  const auto cache = [](const std::string& gather) {
    return estimate_memory(
               small({"parallel.world_size=2", "zero.stage=3", "zero.moe_gather=" + gather}), false)
        .cache;
  };
  EXPECT_GT(cache("experts"), 0u);
  EXPECT_EQ(cache("fsdp"), cache("experts"));
  EXPECT_EQ(cache("leaf"), 0u);
  check_against_run({"parallel.world_size=2", "zero.stage=3", "zero.moe_gather=fsdp",
                     "train.grad_accum_steps=2"});
}

// Experts held from forward to backward (zero.reshard_after_forward=false) are held without a
// byte limit, so the estimate counts them beyond the live limit, except what the cache budget
// counts already; it still holds against a run whose live limit is below one layer's experts.
TEST(MemoryEstimate, ExpertsHeldAfterForwardCountBeyondTheLiveLimit) {
  const auto gathered = [](const std::string& reshard, const std::string& cache) {
    return estimate_memory(
               small({"parallel.world_size=2", "zero.stage=3", "zero.max_live_parameters=20000",
                      "zero.reshard_after_forward=" + reshard,
                      "shard_cache.capacity_bytes=" + cache}),
               false)
        .gathered;
  };
  EXPECT_GT(gathered("false", "0"), gathered("true", "0"));
  EXPECT_EQ(gathered("false", "1000000000"), gathered("true", "1000000000"));
  check_against_run({"parallel.world_size=2", "zero.stage=3", "zero.max_live_parameters=20000",
                     "zero.reshard_after_forward=false", "shard_cache.capacity_bytes=0"});
}

// zero.quantized_weights: the largest group's int8 wire buffers (its part and the n parts it
// receives: int8 values padded to 4 bytes, a 4-byte scale per block) join the working set, and
// the estimate still holds against a run.
TEST(MemoryEstimate, QuantisedGathersCountTheirWireBuffers) {
  const std::vector<std::string> o = {"parallel.world_size=2", "zero.stage=3"};
  std::vector<std::string> q = o;
  q.push_back("zero.quantized_weights=true");
  q.push_back("zero.quantization_block=64");
  const MemoryEstimate plain = estimate_memory(small(o), false),
                       quant = estimate_memory(small(q), false);
  const uint64_t shard = plain.largest_group / 4 / 2;  // fp32, 2 ranks
  const uint64_t part = (shard + 3) / 4 * 4 + 4 * ((shard + 63) / 64);
  EXPECT_EQ(quant.gathered - plain.gathered, 3 * part);
  EXPECT_EQ(quant.states(), plain.states());
  check_against_run(q);
}

// hpZ's secondary shards (zero.hpz_partition_size): 1/m of every stage-3 group, m its ranks in
// one partition; exact for a dense model (every group is gathered in every step), a bound
// with experts (an expert no rank routes to in a step holds none).
TEST(MemoryEstimate, HpzSecondaryShards) {
  const std::vector<std::string> dense = {"parallel.world_size=4", "zero.stage=3",
                                          "model.num_experts=0", "zero.hpz_partition_size=2"};
  const MemoryEstimate e = estimate_memory(small(dense), false);
  EXPECT_GT(e.secondary, 0u);
  EXPECT_EQ(e.per_rank(), e.states() + e.gathered + e.cache + e.activations + e.secondary);
  const TrainResult r = train(small(dense), TrainOptions{});
  for (const StepLog& s : r.steps)
    for (const RankStepStats& rs : s.ranks) EXPECT_EQ(tag(rs, MemTag::Secondary), e.secondary);
  const auto secondary = [](const std::string& more) {
    return estimate_memory(small({"parallel.world_size=4", "zero.stage=3", more}), false).secondary;
  };
  EXPECT_EQ(secondary("zero.hpz_partition_size=1"), 0u);
  EXPECT_EQ(secondary("zero.hpz_partition_size=4"), 0u);  // the whole world: nothing to keep
  check_against_run(
      {"parallel.world_size=4", "zero.stage=3", "zero.hpz_partition_size=2", "train.dtype=bf16"});
}

TEST(MemoryEstimate, StagesShardStates) {
  const auto states = [](int stage) {
    return estimate_memory(small({"parallel.world_size=4", "zero.stage=" + std::to_string(stage)}),
                           false)
        .states();
  };
  // Stage 1 shards the gradient accumulators like stage 2 (but keeps every full gradient until
  // the step: the working set).
  EXPECT_GT(states(0), states(1));
  EXPECT_EQ(states(1), states(2));
  EXPECT_GT(states(2), states(3));
  const auto per_rank = [](int stage) {
    return estimate_memory(small({"parallel.world_size=4", "zero.stage=" + std::to_string(stage)}),
                           false)
        .per_rank();
  };
  EXPECT_GT(per_rank(1), per_rank(2));
}

// shard_cache.capacity_bytes = "auto" (the default): every local expert where they fit beside
// the rest of the estimate (or nothing bounds the rank), the whole experts that fit under a
// tight budget, nothing where the rest alone fills it; an explicit capacity stays as given, and
// a stage without expert gathers keeps none.
TEST(MemoryEstimate, AutoCacheFillsWhatTheBudgetLeaves) {
  const Config cfg = small({"parallel.world_size=2", "zero.stage=3"});
  ASSERT_EQ(cfg.shard_cache.capacity_bytes, kAutoBytes);
  Config off = cfg;
  off.shard_cache.capacity_bytes = 0;
  const MemoryEstimate e = estimate_memory(off, false);
  ASSERT_GT(e.largest_expert, 0u);
  ASSERT_EQ(e.experts, 8 * e.largest_expert);  // 2 layers x 4 experts, one shape
  // The budget whose kAutoMemoryFraction is at least `bytes`.
  const auto budget = [](double bytes) { return uint64_t(std::ceil(bytes / kAutoMemoryFraction)); };
  const double rest = double(e.per_rank()), expert = double(e.largest_expert);
  EXPECT_EQ(auto_cache_capacity(cfg, false, 0), e.experts);
  EXPECT_EQ(auto_cache_capacity(cfg, false, budget(rest + 8 * expert)), e.experts);
  EXPECT_EQ(auto_cache_capacity(cfg, false, budget(rest + 2.5 * expert)), 2 * e.largest_expert);
  EXPECT_EQ(auto_cache_capacity(cfg, false, budget(rest) - 1), 0u);
  Config fixed = cfg;
  fixed.shard_cache.capacity_bytes = 12345;
  EXPECT_EQ(auto_cache_capacity(fixed, false, 1), 12345u);
  EXPECT_EQ(auto_cache_capacity(small({"parallel.world_size=2", "zero.stage=2"}), false, 0), 0u);
  // Experts held from forward to backward without a limit are resident anyway: keeping them
  // costs nothing more, so the cache takes them all even under a budget the holds overfill
  // (where the same run without the holds keeps fewer).
  const Config held = small({"parallel.world_size=2", "zero.stage=3",
                             "zero.max_live_parameters=20000", "zero.reshard_after_forward=false"});
  Config held_off = held;
  held_off.shard_cache.capacity_bytes = 0;
  const uint64_t tight = budget(double(estimate_memory(held_off, false).per_rank())) - 1;
  EXPECT_EQ(auto_cache_capacity(held, false, tight), e.experts);
  Config released = held;
  released.zero.reshard_after_forward = true;
  EXPECT_LT(auto_cache_capacity(released, false, tight), e.experts);
}

// A rank's budget is the smallest known of train.memory_limit, the device given (the simulated
// GPU's) and, on the CPU backend, the machine shared by the process's ranks less their runtime
// address space where that is what the limit bounds; nothing known: 0.
TEST(MemoryEstimate, RankBudgetIsTheSmallestKnown) {
  Config cfg = small({"parallel.world_size=2"});
  const MemoryEstimate e = estimate_memory(cfg, false);  // 2 ranks as threads of this process
  ASSERT_EQ(e.ranks_in_process, 2);
  MemoryLimit machine{.bytes = uint64_t{8} << 30, .source = "test"};
  EXPECT_EQ(rank_memory_budget(cfg, e, machine, 0), uint64_t{4} << 30);
  EXPECT_EQ(rank_memory_budget(cfg, e, machine, uint64_t{1} << 30), uint64_t{1} << 30);
  machine.address_space = true;
  EXPECT_EQ(rank_memory_budget(cfg, e, machine, 0),
            (uint64_t{4} << 30) - kRuntimeAddressSpacePerRank);
  cfg.train.memory_limit = uint64_t{512} << 20;
  EXPECT_EQ(rank_memory_budget(cfg, e, machine, 0), uint64_t{512} << 20);
  cfg.train.memory_limit = 0;
  EXPECT_EQ(rank_memory_budget(cfg, e, MemoryLimit{}, 0), 0u);
}

// The trainer resolves "auto" before the ranks start: under a train.memory_limit that leaves room
// for two experts (and half of one more) beside the rest, the run keeps what capacity_bytes =
// two experts and keep_dense_bytes = the bytes left give (the same cache and dense counters, the
// same losses), and with room to spare what every expert and dense group kept gives.
TEST(MemoryEstimate, TrainerResolvesTheAutoSizes) {
  const std::vector<std::string> o = {"parallel.world_size=2", "zero.stage=3",
                                      "train.grad_accum_steps=2"};
  Config off = small(o);
  off.shard_cache.capacity_bytes = 0;
  off.zero.keep_dense_bytes = 0;
  const MemoryEstimate e = estimate_memory(off, false);
  ASSERT_GT(e.dense, 0u);
  const uint64_t limit = uint64_t(
      std::ceil((double(e.per_rank()) + 2.5 * double(e.largest_expert)) / kAutoMemoryFraction));
  const std::string lim = "train.memory_limit=" + std::to_string(limit);
  std::vector<std::string> with_lim = o;
  with_lim.push_back(lim);
  const AutoSizes want = auto_sizes(small(with_lim), false, limit);
  EXPECT_EQ(want.cache_bytes, 2 * e.largest_expert);
  EXPECT_LT(want.keep_dense_bytes, e.dense) << "half an expert's bytes are left for the dense keep";
  const auto run = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = o;
    all.insert(all.end(), extra.begin(), extra.end());
    return train(small(all), {});
  };
  const auto same = [](const TrainResult& a, const TrainResult& b, const char* what) {
    ASSERT_EQ(a.steps.size(), b.steps.size());
    for (size_t s = 0; s < a.steps.size(); ++s) {
      EXPECT_EQ(a.steps[s].loss, b.steps[s].loss) << what;
      for (size_t r = 0; r < a.steps[s].ranks.size(); ++r) {
        const RankStepStats &x = a.steps[s].ranks[r], &y = b.steps[s].ranks[r];
        EXPECT_EQ(x.cache_hits, y.cache_hits) << what << " step " << s << " rank " << r;
        EXPECT_EQ(x.cache_misses, y.cache_misses) << what;
        EXPECT_EQ(x.cache_evictions, y.cache_evictions) << what;
        EXPECT_EQ(x.gathered_dense_bytes, y.gathered_dense_bytes) << what;
      }
    }
  };
  const TrainResult tight = run({lim});
  same(tight,
       run({lim, "shard_cache.capacity_bytes=" + std::to_string(want.cache_bytes),
            "zero.keep_dense_bytes=" + std::to_string(want.keep_dense_bytes)}),
       "two experts");
  const TrainResult roomy = run({});
  same(roomy,
       run({"shard_cache.capacity_bytes=" + std::to_string(e.experts),
            "zero.keep_dense_bytes=" + std::to_string(e.dense)}),
       "everything kept");
  const auto sum = [](const TrainResult& r, uint64_t RankStepStats::*f) {
    uint64_t n = 0;
    for (const StepLog& s : r.steps) n += s.ranks[0].*f;
    return n;
  };
  EXPECT_LT(sum(tight, &RankStepStats::cache_hits), sum(roomy, &RankStepStats::cache_hits))
      << "two of eight experts keep less than all eight";
  EXPECT_GT(sum(tight, &RankStepStats::gathered_dense_bytes),
            sum(roomy, &RankStepStats::gathered_dense_bytes))
      << "a partial dense keep re-gathers more than a full one";
}

// zero.keep_dense_bytes = "auto": the shard cache's experts come first, the dense keep takes
// the rest: every sharded dense group where they all fit (or nothing bounds the rank, or there
// is one micro-batch per step, when keeping costs nothing), the bytes left beside the experts
// under a tighter budget, none when the experts took it all; an explicit value stays.
TEST(MemoryEstimate, AutoDenseKeepTakesWhatTheCacheLeaves) {
  const Config cfg = small({"parallel.world_size=2", "zero.stage=3", "train.grad_accum_steps=2"});
  ASSERT_EQ(cfg.zero.keep_dense_bytes, kAutoBytes);
  Config off = cfg;
  off.shard_cache.capacity_bytes = 0;
  off.zero.keep_dense_bytes = 0;
  const MemoryEstimate e = estimate_memory(off, false);
  ASSERT_GT(e.dense, 0u);
  const auto budget = [](double bytes) { return uint64_t(std::ceil(bytes / kAutoMemoryFraction)); };
  const double rest = double(e.per_rank()), experts = double(e.experts);
  const AutoSizes roomy = auto_sizes(cfg, false, 0);
  EXPECT_EQ(roomy.cache_bytes, e.experts);
  EXPECT_EQ(roomy.keep_dense_bytes, e.dense);
  EXPECT_EQ(auto_sizes(cfg, false, budget(rest + experts + double(e.dense))).keep_dense_bytes,
            e.dense);
  const AutoSizes half = auto_sizes(cfg, false, budget(rest + experts + 0.5 * double(e.dense)));
  EXPECT_EQ(half.cache_bytes, e.experts);
  EXPECT_NEAR(double(half.keep_dense_bytes), 0.5 * double(e.dense), 2.0);
  const AutoSizes none = auto_sizes(cfg, false, budget(rest + 2.0 * double(e.largest_expert)));
  EXPECT_EQ(none.cache_bytes, 2 * e.largest_expert);
  EXPECT_LT(none.keep_dense_bytes, 2u);
  // One micro-batch per step: nothing is kept between micro-batches, so every group "fits".
  const Config one = small({"parallel.world_size=2", "zero.stage=3"});
  EXPECT_EQ(auto_sizes(one, false, budget(rest)).keep_dense_bytes, e.dense);
  Config fixed = cfg;
  fixed.zero.keep_dense_bytes = 777;
  EXPECT_EQ(auto_sizes(fixed, false, 1).keep_dense_bytes, 777u);
}

TEST(MemoryEstimate, RefusesWhatCannotFitTheLimit) {
  const Config cfg = small({"parallel.world_size=2", "zero.stage=3", "train.memory_limit=20KiB"});
  try {
    train(cfg, TrainOptions{});
    FAIL() << "not refused";
  } catch (const OutOfMemoryError& err) {
    const std::string w = err.what();
    EXPECT_NE(w.find("OutOfMemoryError: the run needs at least"), std::string::npos) << w;
    EXPECT_NE(w.find("train.memory_limit 20.0 KiB"), std::string::npos) << w;
    EXPECT_NE(w.find("zero.stage 3, a larger parallel.world_size"), std::string::npos) << w;
    EXPECT_EQ(w.find(".cpp:"), std::string::npos) << w;
  }
}

TEST(MemoryEstimate, RefusesWhatCannotFitTheMachine) {
  const Config cfg = small({"parallel.world_size=2"});
  const MemoryEstimate e = estimate_memory(cfg, false);
  EXPECT_NO_THROW(check_memory_fits(cfg, e, MemoryLimit{1ull << 40, "test"}));
  try {
    check_memory_fits(cfg, e, MemoryLimit{e.certain(), "the address-space limit (ulimit -v)"});
    FAIL() << "not refused";
  } catch (const OutOfMemoryError& err) {
    const std::string w = err.what();
    EXPECT_NE(w.find("2 rank(s) x (params"), std::string::npos) << w;
    EXPECT_NE(w.find("but the address-space limit (ulimit -v) allows"), std::string::npos) << w;
  }
}

// Against an address-space limit (ulimit -v) each rank's runtime reservations count too
// (stacks, arenas, OpenBLAS buffers), so a limit that would leave OpenBLAS spinning on a failed
// mmap is refused up front.
TEST(MemoryEstimate, AddressSpaceCountsTheRuntime) {
  const Config cfg = small({"parallel.world_size=2"});
  const MemoryEstimate e = estimate_memory(cfg, false);
  const uint64_t buffers = 2 * (e.certain() + e.init_host);
  EXPECT_NO_THROW(check_memory_fits(cfg, e, MemoryLimit{buffers + 1, "MemAvailable", false}));
  EXPECT_THROW(check_memory_fits(cfg, e, MemoryLimit{buffers + 1, "ulimit -v", true}),
               OutOfMemoryError);
  EXPECT_NO_THROW(check_memory_fits(
      cfg, e, MemoryLimit{buffers + 2 * kRuntimeAddressSpacePerRank, "ulimit -v", true}));
  const std::string t = memory_estimate_text(e, MemoryLimit{1ull << 30, "ulimit -v", true}, 0);
  EXPECT_NE(t.find("+ runtime address space 384.0 MiB per rank"), std::string::npos) << t;
}

TEST(MemoryEstimate, HeaderText) {
  const Config cfg = small({"parallel.world_size=2", "train.memory_limit=1GiB"});
  const std::string t = memory_estimate_text(
      estimate_memory(cfg, false), MemoryLimit{8ull << 30, "MemAvailable"}, cfg.train.memory_limit);
  EXPECT_NE(t.find("memory   per rank: params "), std::string::npos) << t;
  EXPECT_NE(t.find("(train.memory_limit 1.0 GiB)"), std::string::npos) << t;
  EXPECT_NE(t.find("this process: 2 rank(s) x"), std::string::npos) << t;
  EXPECT_NE(t.find("of 8.0 GiB (MemAvailable)"), std::string::npos) << t;
}

TEST(MemoryEstimate, MachineLimitIsKnownHere) {
  const MemoryLimit m = machine_memory_limit();
  EXPECT_GT(m.bytes, 0u);  // MemAvailable at least, on Linux
  EXPECT_FALSE(m.source.empty());
}

}  // namespace
}  // namespace moezero::train
