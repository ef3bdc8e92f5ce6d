// hpZ (GroupComms::secondary, zero/fetch_secondary.cpp) on 4 ranks in partitions of 2: a
// group's first gather of a step runs over the world, and its release (nothing keeps it) keeps
// the secondary shard; every later gather of the step runs over the partition and returns the
// same values, one group or a coalesced block; the optimizer step drops the secondary shards
// (the next step's first gather crosses the world again); the secondary shards are counted by
// tag and by counter. A group the dense keep holds for the step costs no secondary shard.
#include <gtest/gtest.h>

#include <mutex>

#include "comm/world.h"
#include "core/ops.h"
#include "zero/zero_engine.h"

namespace moezero {
namespace {

std::vector<GroupSpec> groups() {
  std::vector<GroupSpec> g;
  g.push_back({"embed", GroupKind::Dense, -1, -1, {{"embed.weight", Shape{40, 8}}}});
  g.push_back({"block0", GroupKind::Dense, 0, -1, {{"block0.w", Shape{24, 16}}}});
  g.push_back({"block1", GroupKind::Dense, 1, -1, {{"block1.w", Shape{333}}}});
  return g;
}

constexpr int kWorld = 4, kPartition = 2, kSteps = 2;

struct Seen {
  std::vector<std::vector<std::vector<float>>> values;  // per pass, per group: what acquire gave
  EngineCounters counters;
  uint64_t world_gathers = 0, partition_gathers = 0;  // collectives on each communicator
  uint64_t peak_secondary_bytes = 0;
};

// Every pass acquires every group (forward order, then reverse: a backward), copies what the
// acquire returned to the host, and releases; pass 2 gathers the three groups as one block.
Seen run(int partition, uint64_t keep_dense_bytes = 0) {
  Seen out;
  std::mutex mu;
  comm::World::run(kWorld, [&](comm::RankContext& ctx) {
    Device& dev = *ctx.device;
    EngineStreams st{&dev.create_stream("compute"), &dev.create_stream("gather"),
                     &dev.create_stream("reduce")};
    const ProcessGroup wg = ctx.world_group();
    auto gather = ctx.communicator(wg, "gather");
    auto reduce = ctx.communicator(wg, "reduce");
    auto misc = ctx.communicator(wg, "misc");
    std::unique_ptr<Communicator> sec;
    if (partition > 1)
      sec = ctx.communicator(secondary_partition_of(wg, ctx.rank, partition), "hpz");
    ZeroOptions opt;
    opt.micro_batches_per_step = 4;  // the passes are the step's micro-batches
    opt.zero.param_persistence_threshold = 16;
    opt.zero.keep_dense_bytes = keep_dense_bytes;  // 0: every pass gathers again
    opt.zero.prefetch_bucket_size = 0;             // no prefetch by recorded order: exact counts
    ZeroEngine eng(
        dev, st, groups(),
        [&](const GroupSpec&) {
          return GroupComms{.gather = gather.get(), .reduce = reduce.get(), .secondary = sec.get()};
        },
        *misc, opt);
    Stream& cs = *st.compute;
    std::vector<std::vector<std::vector<float>>> values;
    for (int step = 0; step < kSteps; ++step) {
      for (int pass = 0; pass < 4; ++pass) {
        std::vector<int> order = {0, 1, 2};
        if (pass % 2 == 1) order = {2, 1, 0};
        if (pass == 2) eng.prefetch_block(order, cs, ParamProvider::FetchReason::Exact);
        auto& seen = values.emplace_back(3);
        for (int g : order) {
          const Tensor p = eng.acquire(g, cs);
          seen[static_cast<size_t>(g)].resize(static_cast<size_t>(p.numel()));
          dev.memcpy_async(seen[static_cast<size_t>(g)].data(), p.data(), p.size_bytes(), cs);
          Tensor gr = eng.grad(g, cs);
          dev.ops().fill(cs, gr, 0.01 * (g + 1));
          eng.grad_ready(g, cs);
          eng.release(g, cs);
        }
        eng.finish_backward();
        cs.synchronize();
      }
      eng.step(AdamWHyper{0.05f});
    }
    dev.synchronize();
    if (ctx.rank != 0) return;
    std::lock_guard lock(mu);
    out.values = std::move(values);
    out.counters = eng.counters();
    out.world_gathers = gather->records().size();
    out.partition_gathers = sec ? sec->records().size() : 0;
    out.peak_secondary_bytes =
        dev.allocator().stats().peak_bytes[static_cast<size_t>(MemTag::Secondary)];
  });
  return out;
}

TEST(Hpz, LaterGathersOfAStepStayInsideThePartitionAndGiveTheSameValues) {
  const Seen off = run(1);
  const Seen on = run(kPartition);
  ASSERT_EQ(on.values.size(), off.values.size());
  for (size_t p = 0; p < on.values.size(); ++p)
    for (size_t g = 0; g < 3; ++g)
      ASSERT_EQ(on.values[p][g], off.values[p][g]) << "pass " << p << " group " << g;
  // Each step: 4 passes of 3 groups, one pass coalesced: 3 + 3 + 1 + 3 = 10 gathers.
  EXPECT_EQ(off.counters.gathers, 10u * kSteps);
  EXPECT_EQ(off.world_gathers, 10u * kSteps);
  EXPECT_EQ(off.counters.hpz_gathers, 0u);
  EXPECT_EQ(off.partition_gathers, 0u);
  EXPECT_EQ(off.peak_secondary_bytes, 0u);
  // hpZ: the first pass of each step over the world (the step drops the secondary shards),
  // the other 7 collectives inside the partition.
  EXPECT_EQ(on.counters.gathers, 10u * kSteps);
  EXPECT_EQ(on.world_gathers, 3u * kSteps);
  EXPECT_EQ(on.partition_gathers, 7u * kSteps);
  EXPECT_EQ(on.counters.hpz_gathers, 7u * kSteps);
  EXPECT_EQ(on.counters.gathered_bytes, off.counters.gathered_bytes);
  // The 3 groups' full bytes (fp32, padded), gathered inside the partition in 3 of the 4
  // passes of each step.
  uint64_t full = 0;
  for (const GroupSpec& g : groups()) full += 4 * uint64_t(GroupLayout(g).padded_numel(kWorld));
  EXPECT_EQ(on.counters.hpz_gathered_bytes, 3 * full * kSteps);
  EXPECT_EQ(on.peak_secondary_bytes, full / kPartition);
}

// The dense keep holds every group from the first pass to the step's last micro-batch: nothing
// is freed before then, so no secondary shard is cut until that last pass releases them, and
// it gathers nothing more.
TEST(Hpz, GroupsKeptForTheStepHoldNoSecondaryShard) {
  const Seen off = run(1, 1 << 20);
  const Seen on = run(kPartition, 1 << 20);
  ASSERT_EQ(on.values, off.values);
  EXPECT_EQ(on.counters.gathers, off.counters.gathers);
  EXPECT_EQ(on.counters.hpz_gathers, 0u);
  EXPECT_EQ(on.partition_gathers, 0u);
  EXPECT_EQ(on.peak_secondary_bytes, 0u);
}

}  // namespace
}  // namespace moezero
