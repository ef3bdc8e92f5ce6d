// zero.hpz_partition_size (ZeRO++ hpZ) through the trainer, on 4 ranks emulated as 2 nodes of 2
// (comm_emulation.ranks_per_node, the tiers tallied without a bandwidth cost): the losses and
// final parameters bit for bit those of hpZ off, at stage 3 with several micro-batches; fewer
// bytes between nodes, the secondary gathers counted, the secondary shards counted by tag and
// estimated; bad values refused with the key.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/allocator.h"
#include "core/config.h"
#include "core/error.h"
#include "tests/common/tiny_config.h"
#include "train/memory_estimate.h"
#include "train/trainer.h"

namespace moezero::train {
namespace {

Config config(const std::vector<std::string>& extra, int hpz) {
  std::vector<std::string> o = {"parallel.world_size=4", "zero.stage=3", "train.grad_accum_steps=3",
                                "comm_emulation.ranks_per_node=2",
                                "zero.hpz_partition_size=" + std::to_string(hpz)};
  o.insert(o.end(), extra.begin(), extra.end());
  return test::tiny_moe_config("hpz", o);
}

TrainResult run(const std::vector<std::string>& extra, int hpz) {
  TrainOptions opt;
  opt.collect_params = true;
  return train(config(extra, hpz), opt);
}

struct Sums {
  uint64_t inter = 0, intra = 0, gathered = 0, hpz_gathers = 0, secondary_bytes = 0;
  uint64_t peak_secondary = 0;  // the largest over ranks and steps
};

Sums sums(const TrainResult& r) {
  Sums s;
  for (const StepLog& step : r.steps)
    for (const RankStepStats& k : step.ranks) {
      s.inter += k.inter_node_bytes;
      s.intra += k.intra_node_bytes;
      s.gathered += k.gathered_bytes;
      s.hpz_gathers += k.hpz_gathers;
      s.secondary_bytes += k.hpz_gathered_bytes;
      s.peak_secondary = std::max<uint64_t>(s.peak_secondary,
                                            k.peak_bytes[static_cast<size_t>(MemTag::Secondary)]);
    }
  return s;
}

// hpZ changes where a re-gather runs, never what it returns.
void expect_same_training(const TrainResult& off, const TrainResult& on, const std::string& what) {
  ASSERT_EQ(off.steps.size(), on.steps.size());
  for (size_t s = 0; s < off.steps.size(); ++s)
    EXPECT_EQ(on.steps[s].loss, off.steps[s].loss) << what << " step " << s + 1;
  EXPECT_EQ(on.params, off.params) << what;
}

// The case of each `extra`: hpZ on moves fewer bytes between the nodes, re-gathers inside them,
// fills the same full buffers, and its secondary shards are what the estimate says.
void check(const std::vector<std::string>& extra, const std::string& what) {
  SCOPED_TRACE(what);
  const TrainResult off = run(extra, 1), on = run(extra, 2);
  expect_same_training(off, on, what);
  const Sums a = sums(off), b = sums(on);
  EXPECT_EQ(a.hpz_gathers, 0u);
  EXPECT_EQ(a.peak_secondary, 0u);
  EXPECT_GT(b.hpz_gathers, 0u);
  EXPECT_GT(b.secondary_bytes, 0u);
  EXPECT_EQ(b.gathered, a.gathered) << "the same full buffers are filled";
  EXPECT_LT(b.inter, a.inter) << "re-gathers stay inside the node";
  EXPECT_GT(b.intra, a.intra);
  EXPECT_GT(b.peak_secondary, 0u);
  EXPECT_LE(b.peak_secondary, estimate_memory(config(extra, 2), false).secondary)
      << "the estimate bounds the secondary shards";
  EXPECT_EQ(estimate_memory(config(extra, 1), false).secondary, 0u);
}

// Experts over the world (ep_size 1: the EDP group is the world, 2 of its ranks per node):
// dense groups and experts both re-gather inside the node; nothing kept across micro-batches.
TEST(Hpz, ExpertsAndDenseGroupsReGatherInsideTheNode) {
  check({"parallel.ep_size=1", "zero.keep_dense_bytes=0", "shard_cache.capacity_bytes=0"},
        "ep 1, nothing kept");
}

// The defaults keep every group of this small model for the whole step (shard cache, dense
// keep, experts held from forward to backward): nothing is re-gathered, so hpZ keeps no
// secondary shard and changes nothing, bytes and peak state included.
TEST(Hpz, FreeWhereEverythingIsKept) {
  const TrainResult off = run({"parallel.ep_size=1"}, 1), on = run({"parallel.ep_size=1"}, 2);
  expect_same_training(off, on, "defaults");
  const Sums a = sums(off), b = sums(on);
  EXPECT_EQ(b.hpz_gathers, 0u);
  EXPECT_EQ(b.peak_secondary, 0u);
  EXPECT_EQ(b.inter, a.inter);
  EXPECT_EQ(b.intra, a.intra);
  for (size_t s = 0; s < off.steps.size(); ++s)
    for (size_t r = 0; r < off.steps[s].ranks.size(); ++r)
      EXPECT_EQ(on.steps[s].ranks[r].peak_state_bytes, off.steps[s].ranks[r].peak_state_bytes);
}

// Budgets of about one group (bf16): what the cache and the dense keep cannot hold re-gathers
// inside the node.
TEST(Hpz, SmallBudgetsBf16) {
  check({"parallel.ep_size=1", "train.dtype=bf16", "shard_cache.capacity_bytes=10KiB",
         "zero.keep_dense_bytes=10KiB"},
        "ep 1, bf16, small budgets");
}

// Coalesced gathers (moe_gather leaf: every expert of a block in one all-gather) re-gather
// coalesced inside the node.
TEST(Hpz, CoalescedLeafGathers) {
  check({"parallel.ep_size=1", "zero.moe_gather=leaf", "zero.keep_dense_bytes=0"}, "leaf");
}

// ep_size 2 on 2 nodes of 2: each EDP group ({0,2}, {1,3}) has one rank per node, so the
// experts keep gathering over their EDP group (a secondary shard would be the whole expert);
// the dense groups use hpZ, and the experts' estimate holds none.
TEST(Hpz, ExpertsWithOneRankPerNodeGatherAsBefore) {
  check({"parallel.ep_size=2", "zero.keep_dense_bytes=0"}, "ep 2");
  // The estimate: the dense groups' secondary shards only.
  const uint64_t ep1 = estimate_memory(config({"parallel.ep_size=1"}, 2), false).secondary;
  const uint64_t ep2 = estimate_memory(config({"parallel.ep_size=2"}, 2), false).secondary;
  EXPECT_LT(ep2, ep1);
  EXPECT_GT(ep2, 0u);
}

void expect_refused(const std::vector<std::string>& o, const std::string& message) {
  try {
    test::tiny_moe_config("bad.json", o);
    FAIL() << "accepted: " << ::testing::PrintToString(o);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

TEST(Hpz, BadValuesAreRefusedNamingTheKey) {
  expect_refused({"zero.hpz_partition_size=0"}, "zero.hpz_partition_size");
  expect_refused({"parallel.world_size=4", "zero.hpz_partition_size=3"},
                 "zero.hpz_partition_size (3) must divide parallel.world_size (4)");
  // World 12 in EP groups of 4: EDP {0,4,8} puts 2 ranks in partition {0..5}, 1 in {6..11}.
  expect_refused({"parallel.world_size=12", "parallel.ep_size=4", "train.micro_batch_size=12",
                  "zero.hpz_partition_size=6"},
                 "zero.hpz_partition_size (6) splits the expert-data-parallel group edp0{0,4,8}");
  EXPECT_NO_THROW(
      test::tiny_moe_config("ok.json", {"parallel.world_size=12", "parallel.ep_size=4",
                                        "train.micro_batch_size=12", "zero.hpz_partition_size=4"}));
}

}  // namespace
}  // namespace moezero::train
