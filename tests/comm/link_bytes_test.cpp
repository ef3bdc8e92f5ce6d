// tests/comm/link_bytes_test.cpp — LocalWorld::link_bytes: each rank's sent bytes by tier, as
// the network model routes the ring and all-to-all algorithms (comm/net_model.h). Expected
// numbers are worked out by hand from the ring's hops.
#include <gtest/gtest.h>

#include "comm_test_util.h"

namespace moezero::comm {
namespace {

using testing::test_options;

constexpr size_t kCount = 1024;  // floats per rank's chunk
constexpr uint64_t kChunk = kCount * 4;

// 2 nodes x 2 ranks (ranks_per_node = 2), with or without an emulated link cost.
WorldOptions two_tier(bool emulate) {
  WorldOptions o = test_options();
  o.comm.emulation.ranks_per_node = 2;
  if (emulate) {
    o.comm.emulation.link_gbps = 100;
    o.comm.emulation.intra_node_gbps = 1000;
  }
  return o;
}

// World ring 0 -> 1 -> 2 -> 3 -> 0 under 2 ranks per node: hops 0->1 and 2->3 stay inside a
// node, 1->2 and 3->0 cross nodes. An all-gather sends (n-1) chunks over each rank's own hop:
// ranks 0 and 2 send 3 chunks on the fast tier, ranks 1 and 3 3 chunks on the slow link.
void world_all_gather_splits_by_hop(bool emulate) {
  World::run(
      4,
      [](RankContext& ctx) {
        const LinkBytes before = ctx.world->link_bytes(ctx.rank);
        EXPECT_EQ(before.intra_node_bytes, 0u);
        EXPECT_EQ(before.inter_node_bytes, 0u);
        auto comm = ctx.communicator(ctx.world_group(), "gather");
        Stream& s = ctx.device->create_stream("gather");
        std::vector<float> send(kCount, 1.0f), recv(4 * kCount);
        comm->all_gather(send.data(), recv.data(), kCount, DType::F32, s);
        s.synchronize();
        const LinkBytes b = ctx.world->link_bytes(ctx.rank);
        const bool fast_hop = ctx.rank % 2 == 0;  // its successor is on its node
        EXPECT_EQ(b.intra_node_bytes, fast_hop ? 3 * kChunk : 0u) << "rank " << ctx.rank;
        EXPECT_EQ(b.inter_node_bytes, fast_hop ? 0u : 3 * kChunk) << "rank " << ctx.rank;
      },
      two_tier(emulate));
}

TEST(LinkBytes, WorldAllGatherSplitsByRingHop) { world_all_gather_splits_by_hop(false); }
TEST(LinkBytes, WorldAllGatherSplitsByRingHopWhenEmulated) { world_all_gather_splits_by_hop(true); }

// An expert-parallel group inside a node ({0, 1} and {2, 3}): its all-gather and all-to-all
// put bytes on the fast tier only. Rank r sends (r + 1) * 8 floats to its peer.
TEST(LinkBytes, IntraNodeGroupCountsOnlyIntraNode) {
  World::run(
      4,
      [](RankContext& ctx) {
        const int node = ctx.rank / 2;
        const ProcessGroup ep{"ep" + std::to_string(node), {2 * node, 2 * node + 1}};
        auto comm = ctx.communicator(ep, "a2a");
        Stream& s = ctx.device->create_stream("a2a");
        std::vector<float> send(kCount, 1.0f), recv(2 * kCount);
        comm->all_gather(send.data(), recv.data(), kCount, DType::F32, s);
        const int me = ep.group_rank(ctx.rank), peer = 1 - me;
        const auto out = static_cast<size_t>((ctx.rank + 1) * 8);
        const auto in = static_cast<size_t>((ep.ranks[static_cast<size_t>(peer)] + 1) * 8);
        std::vector<size_t> send_elems(2, 0), recv_elems(2, 0);
        send_elems[static_cast<size_t>(me)] = 2;  // to itself: not on any link
        recv_elems[static_cast<size_t>(me)] = 2;
        send_elems[static_cast<size_t>(peer)] = out;
        recv_elems[static_cast<size_t>(peer)] = in;
        std::vector<float> a2a_send(out + 2, 2.0f), a2a_recv(in + 2);
        comm->all_to_all_v(a2a_send.data(), send_elems, a2a_recv.data(), recv_elems, DType::F32, s);
        s.synchronize();
        const LinkBytes b = ctx.world->link_bytes(ctx.rank);
        EXPECT_EQ(b.intra_node_bytes, kChunk + out * 4) << "rank " << ctx.rank;
        EXPECT_EQ(b.inter_node_bytes, 0u) << "rank " << ctx.rank;
      },
      two_tier(false));
}

// One tier (ranks_per_node = 0): every rank is its own node, every byte is inter_node_bytes.
// A world all-reduce (ring) sends 2 (n-1)/n of the buffer per rank: 2 * 3/4 * 4 chunks.
TEST(LinkBytes, OneTierCountsEverythingAsInterNode) {
  World::run(
      4,
      [](RankContext& ctx) {
        auto comm = ctx.communicator(ctx.world_group(), "reduce");
        Stream& s = ctx.device->create_stream("reduce");
        std::vector<float> buf(4 * kCount, 1.0f);
        comm->all_reduce(buf.data(), buf.data(), buf.size(), DType::F32, ReduceOp::Sum, s);
        comm->barrier(s);
        s.synchronize();
        const LinkBytes b = ctx.world->link_bytes(ctx.rank);
        EXPECT_EQ(b.intra_node_bytes, 0u);
        EXPECT_EQ(b.inter_node_bytes, 6 * kChunk) << "rank " << ctx.rank;
      },
      test_options());
}

TEST(LinkBytes, RankOutsideTheWorldIsRefused) {
  LocalWorld world(2);
  EXPECT_THROW(world.link_bytes(2), Error);
  EXPECT_THROW(world.link_bytes(-1), Error);
}

}  // namespace
}  // namespace moezero::comm
