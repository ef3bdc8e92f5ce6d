// Counters that cannot flatter (train/step_stats.h, README "Prefetch"), on real training runs
// with the link emulated: expert prefetch hits only come from plans made before routing
// (backward's exact prefetch has its own counter), and the communication timing satisfies
// 0 <= exposed_comm_ms <= comm_ms per rank, so the overlap ratio lies in [0, 1].
#include "train/step_stats.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "train/trainer.h"

namespace moezero::train {
namespace {

// A tiny MoE model on an emulated slow link (2 Gbit/s, 20 us), ZeRO-3, every group sharded.
Config emulated(int world, const std::string& policy, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"model.d_model=32",
                                "model.n_layers=2",
                                "model.n_heads=4",
                                "model.n_kv_heads=2",
                                "model.d_ff=32",
                                "model.seq_len=16",
                                "model.num_experts=8",
                                "model.top_k=2",
                                "train.micro_batch_size=4",
                                "train.grad_accum_steps=2",
                                "train.steps=3",
                                "train.warmup_steps=1",
                                "zero.stage=3",
                                "zero.param_persistence_threshold=0",
                                "comm_emulation.link_gbps=2",
                                "comm_emulation.latency_us=20",
                                "comm.timeout_s=60",
                                "parallel.world_size=" + std::to_string(world),
                                "prefetch.policy=" + policy};
  o.insert(o.end(), more.begin(), more.end());
  return parse_config("{}", "emulated", o);
}

// Link counters are the step's delta of the rank's sent bytes by tier, written by name.
TEST(StepCounters, LinkBytesAreStepDeltasByTier) {
  const comm::LinkBytes before{100, 5000}, now{160, 5000 + 4096};
  const RankStepStats s = rank_step_stats(EngineCounters{}, EngineCounters{}, moe::MoeStats{},
                                          MemStats{}, StepTiming{}, now, before);
  EXPECT_EQ(s.intra_node_bytes, 60u);
  EXPECT_EQ(s.inter_node_bytes, 4096u);
  const nlohmann::json j = rank_step_json(s);
  EXPECT_EQ(j.at("intra_node_bytes"), 60);
  EXPECT_EQ(j.at("inter_node_bytes"), 4096);
  int64_t words[kRankStepStatsWords];
  to_words(s, words);
  EXPECT_EQ(from_words(words).inter_node_bytes, 4096u);
  // Without the link's counts (a backend that does not count them): both 0.
  const RankStepStats none = rank_step_stats(EngineCounters{}, EngineCounters{}, moe::MoeStats{},
                                             MemStats{}, StepTiming{});
  EXPECT_EQ(none.intra_node_bytes, 0u);
  EXPECT_EQ(none.inter_node_bytes, 0u);
}

TEST(StepCounters, PolicyNoneHasNoPrefetchHitsButExactBackwardPrefetches) {
  const TrainResult r = train(emulated(2, "none", {"shard_cache.capacity_bytes=0"}), {});
  ASSERT_EQ(r.steps.size(), 3u);
  for (const StepLog& s : r.steps)
    for (size_t k = 0; k < s.ranks.size(); ++k) {
      const RankStepStats& rk = s.ranks[k];
      const std::string at = "step " + std::to_string(s.step) + " rank " + std::to_string(k);
      EXPECT_EQ(rk.prefetch_hits, 0u) << at << ": no plan ran before routing";
      EXPECT_GT(rk.exact_prefetches, 0u) << at << ": backward prefetches from the routing";
      EXPECT_GT(rk.prefetch_misses, 0u) << at << ": forward gathers start after routing";
      EXPECT_EQ(rk.wasted_bytes, 0u) << at << ": nothing is gathered that is not needed";
      EXPECT_GT(rk.miss_bytes, 0u) << at;
      // Every expert acquire is a gather (no cache): needed bytes are gathered bytes.
      EXPECT_EQ(rk.needed_expert_bytes, rk.gathered_expert_bytes) << at;
      EXPECT_GT(rk.layer_expert_slots, 0u) << at;
      EXPECT_LE(rk.active_layer_experts, rk.layer_expert_slots) << at;
    }
  for (const StepLog& s : r.steps)
    for (const MoeLayerStats& L : s.moe_layers)
      EXPECT_EQ(L.brier_count, 0) << "no plan, no prediction to score";
}

TEST(StepCounters, PlannedGathersAreHitsOrWaste) {
  const TrainResult r = train(emulated(2, "all", {"shard_cache.capacity_bytes=0"}), {});
  uint64_t hits = 0;
  for (const StepLog& s : r.steps)
    for (const RankStepStats& rk : s.ranks) {
      hits += rk.prefetch_hits;
      // With no cache, every gathered expert byte is needed or wasted.
      EXPECT_EQ(rk.gathered_expert_bytes, rk.needed_expert_bytes + rk.wasted_bytes)
          << "step " << s.step;
    }
  EXPECT_GT(hits, 0u) << "policy all plans every local expert before routing";
}

// Per rank, every step: 0 <= exposed_comm_ms <= comm_ms, and the step's overlap ratio (from
// the sums over ranks) lies in [0, 1]. The agreement all-reduce, the loss and norm exchanges
// run on the compute stream, so some communication is always exposed.
TEST(StepCounters, ExposedCommunicationNeverExceedsCommunication) {
  for (int world : {2, 4}) {
    const TrainResult r = train(emulated(world, "frequency"), {});
    for (const StepLog& s : r.steps) {
      const std::string at = "world " + std::to_string(world) + " step " + std::to_string(s.step);
      double comm = 0.0, exposed = 0.0;
      for (const RankStepStats& rk : s.ranks) {
        EXPECT_GT(rk.comm_ms, 0.0) << at;
        EXPECT_GT(rk.exposed_comm_ms, 0.0) << at;
        EXPECT_LE(rk.exposed_comm_ms, rk.comm_ms) << at;
        comm += rk.comm_ms;
        exposed += rk.exposed_comm_ms;
      }
      for (const MoeLayerStats& L : s.moe_layers) {  // a plan before routing every micro-batch
        EXPECT_EQ(L.brier_count, 8 * 2) << at << ": E experts x micro-batches";
        EXPECT_GE(L.brier_sum, 0.0) << at;
        EXPECT_LE(L.brier_sum, double(L.brier_count)) << at;
        int64_t pairs = 0, active = 0;
        for (size_t b = 0; b < L.calibration_count.size(); ++b) {
          pairs += L.calibration_count[b];
          active += L.calibration_active[b];
          EXPECT_LE(L.calibration_active[b], L.calibration_count[b]) << at;
        }
        EXPECT_EQ(pairs, L.brier_count) << at;
        EXPECT_GT(active, 0) << at;
      }
      // Summed by one integer all-reduce at 1 ns resolution: within half a ns per rank.
      const double tol = 0.5e-6 * double(s.ranks.size()) + 1e-12;
      EXPECT_NEAR(s.comm.comm_ms, comm, tol) << at;
      EXPECT_NEAR(s.comm.exposed_comm_ms, exposed, tol) << at;
      ASSERT_TRUE(s.comm.overlap_ratio().has_value()) << at;
      EXPECT_GE(*s.comm.overlap_ratio(), 0.0) << at;
      EXPECT_LE(*s.comm.overlap_ratio(), 1.0) << at;
    }
  }
}

// The gate of speculative gathers (prefetch.speculate, docs/prefetch.md). The default (idle)
// measures the link's idle time in the speculation windows, and before any step has measured
// it speculates nothing (the cold prior would take every expert: all counted as gated); `priced`
// opens no windows and speculates on the cold prior. Losses are the same either way.
TEST(StepCounters, IdleGateSpeculatesNothingBeforeItHasMeasured) {
  const TrainResult idle = train(emulated(2, "cost", {"shard_cache.capacity_bytes=0"}), {});
  const TrainResult priced =
      train(emulated(2, "cost", {"shard_cache.capacity_bytes=0", "prefetch.speculate=priced"}), {});
  ASSERT_EQ(idle.steps.size(), 3u);
  ASSERT_EQ(priced.steps.size(), 3u);
  for (size_t k = 0; k < 2; ++k) {
    const RankStepStats& first = idle.steps[0].ranks[k];
    EXPECT_EQ(first.prefetch_hits, 0u) << "rank " << k << ": no idle time measured yet";
    EXPECT_EQ(first.wasted_bytes, 0u) << "rank " << k;
    // 8 local experts (EP 1) x 2 MoE layers x 2 micro-batches, all above the floor when cold.
    EXPECT_EQ(first.speculation_gated, 32u) << "rank " << k;
    EXPECT_GT(priced.steps[0].ranks[k].prefetch_hits, 0u) << "rank " << k << ": the cold prior";
    EXPECT_EQ(priced.steps[0].ranks[k].speculation_gated, 0u) << "rank " << k;
  }
  for (size_t s = 0; s < idle.steps.size(); ++s) {
    EXPECT_EQ(idle.steps[s].loss, priced.steps[s].loss) << "step " << s + 1;
    for (size_t k = 0; k < 2; ++k) {
      const std::string at = "step " + std::to_string(s + 1) + " rank " + std::to_string(k);
      const RankStepStats& a = idle.steps[s].ranks[k];
      EXPECT_GE(a.idle_link_ms, 0.0) << at;
      EXPECT_EQ(priced.steps[s].ranks[k].idle_link_ms, 0.0) << at << ": no windows";
      // With no cache every gathered expert byte is needed or wasted, gated or not.
      EXPECT_EQ(a.gathered_expert_bytes, a.needed_expert_bytes + a.wasted_bytes) << at;
    }
  }
}

}  // namespace
}  // namespace moezero::train
