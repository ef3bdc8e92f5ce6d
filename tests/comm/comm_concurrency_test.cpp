// tests/comm/comm_concurrency_test.cpp — several streams and groups at once, channels that
// never cross, trace records, and the link-emulation lower bound.
#include <gtest/gtest.h>

#include "comm/local/local_world.h"
#include "comm_test_util.h"
#include "core/config.h"
#include "core/process_groups.h"

namespace moezero::comm {
namespace {

using testing::test_options;

// World 4, EP 2: the "a2a" stream runs all_gathers on the EP group while the "gather" stream
// runs all_reduces on the EDP group, concurrently, many times over.
TEST(CommConcurrency, TwoStreamsOnDifferentGroups) {
  ProcessGroups groups(4, 2, 4);
  World::run(
      4,
      [&](RankContext& ctx) {
        auto ep = ctx.communicator(groups.ep_group_of(ctx.rank), "a2a");
        auto edp = ctx.communicator(groups.edp_group_of(ctx.rank), "gather");
        Stream& s_ep = ctx.device->create_stream("a2a");
        Stream& s_edp = ctx.device->create_stream("gather");
        constexpr int kRounds = 50;
        constexpr size_t kElems = 257;
        std::vector<std::vector<float>> ep_send(kRounds), ep_recv(kRounds), edp_buf(kRounds);
        for (int i = 0; i < kRounds; ++i) {
          ep_send[i].assign(kElems, static_cast<float>(ctx.rank * 100 + i));
          ep_recv[i].resize(kElems * 2);
          edp_buf[i].assign(kElems, static_cast<float>(ctx.rank + i));
          ep->all_gather(ep_send[i].data(), ep_recv[i].data(), kElems, DType::F32, s_ep);
          edp->all_reduce(edp_buf[i].data(), edp_buf[i].data(), kElems, DType::F32, ReduceOp::Sum,
                          s_edp);
        }
        s_ep.synchronize();
        s_edp.synchronize();
        const auto& epg = groups.ep_group_of(ctx.rank);
        const auto& edpg = groups.edp_group_of(ctx.rank);
        for (int i = 0; i < kRounds; ++i) {
          for (int p = 0; p < 2; ++p)
            ASSERT_EQ(ep_recv[i][p * kElems + 3], static_cast<float>(epg.ranks[p] * 100 + i));
          ASSERT_EQ(edp_buf[i][kElems - 1],
                    static_cast<float>(edpg.ranks[0] + edpg.ranks[1] + 2 * i));
        }
      },
      test_options());
}

// Ranks enqueue on two channels of the same group in opposite host orders: each channel
// matches its own calls, so nothing deadlocks or crosses.
TEST(CommConcurrency, ChannelsNeverCross) {
  World::run(
      2,
      [](RankContext& ctx) {
        auto gather = ctx.communicator(ctx.world_group(), "gather");
        auto reduce = ctx.communicator(ctx.world_group(), "reduce");
        Stream& sg = ctx.device->create_stream("gather");
        Stream& sr = ctx.device->create_stream("reduce");
        std::vector<float> g_send(4, static_cast<float>(ctx.rank)), g_recv(8), r_buf(8, 1.0f);
        if (ctx.rank == 0) {
          gather->all_gather(g_send.data(), g_recv.data(), 4, DType::F32, sg);
          reduce->all_reduce(r_buf.data(), r_buf.data(), 8, DType::F32, ReduceOp::Sum, sr);
        } else {
          reduce->all_reduce(r_buf.data(), r_buf.data(), 8, DType::F32, ReduceOp::Sum, sr);
          gather->all_gather(g_send.data(), g_recv.data(), 4, DType::F32, sg);
        }
        sg.synchronize();
        sr.synchronize();
        EXPECT_EQ(g_recv[0], 0.0f);
        EXPECT_EQ(g_recv[7], 1.0f);
        EXPECT_EQ(r_buf[5], 2.0f);
      },
      test_options());
}

TEST(CommConcurrency, TraceRecordsDescribeEachCall) {
  World::run(
      2,
      [](RankContext& ctx) {
        auto comm = ctx.communicator(ctx.world_group(), "gather");
        Stream& s = ctx.device->create_stream("gather_stream");
        std::vector<uint16_t> send(10), recv(20);
        comm->all_gather(send.data(), recv.data(), 10, DType::BF16, s);
        comm->reduce_scatter(recv.data(), send.data(), 10, DType::BF16, ReduceOp::Sum, s);
        comm->barrier(s);
        s.synchronize();
        const auto recs = comm->records();
        ASSERT_EQ(recs.size(), 3u);
        EXPECT_EQ(recs[0].op, CollectiveOp::AllGather);
        EXPECT_EQ(recs[0].bytes, 40u);  // recv bytes: 2 ranks * 10 elems * 2 bytes
        EXPECT_EQ(recs[1].op, CollectiveOp::ReduceScatter);
        EXPECT_EQ(recs[1].bytes, 40u);  // send bytes
        EXPECT_EQ(recs[2].op, CollectiveOp::Barrier);
        EXPECT_EQ(recs[2].bytes, 0u);
        for (size_t i = 0; i < recs.size(); ++i) {
          EXPECT_EQ(recs[i].seq, i);
          EXPECT_EQ(recs[i].group, "world{0,1}");
          EXPECT_EQ(recs[i].channel, "gather");
          EXPECT_EQ(recs[i].stream, "gather_stream");
          EXPECT_LE(recs[i].start, recs[i].end);
        }
        comm->clear_records();
        EXPECT_TRUE(comm->records().empty());
      },
      test_options());
}

// Only a lower bound (a collective never completes early): durations are benchmark output.
TEST(CommConcurrency, LinkEmulationNeverCompletesEarly) {
  WorldOptions opts = test_options();
  opts.comm.emulation.link_gbps = 8.0;  // 1 GB/s
  opts.comm.emulation.latency_us = 2000.0;
  const size_t shard_elems = 1 << 18;  // 1 MiB of f32 per rank
  World::run(
      2,
      [&](RankContext& ctx) {
        auto comm = ctx.communicator(ctx.world_group(), "gather");
        Stream& s = ctx.device->create_stream("gather");
        std::vector<float> send(shard_elems), recv(2 * shard_elems);
        comm->all_gather(send.data(), recv.data(), shard_elems, DType::F32, s);
        comm->barrier(s);
        s.synchronize();
        const auto recs = comm->records();
        const double min_gather_s =
            2e-3 + (2.0 * shard_elems * 4) * 0.5 / 1e9;  // latency + bus bytes / bw
        EXPECT_GE(std::chrono::duration<double>(recs[0].end - recs[0].start).count(), min_gather_s);
        EXPECT_GE(std::chrono::duration<double>(recs[1].end - recs[1].start).count(), 2e-3);
      },
      opts);
}

// Two all_gathers of the same ranks on two communicators share each rank's NIC: modelled
// (never wall-clock) times show the pair takes the sum of their times alone.
TEST(CommConcurrency, ConcurrentCollectivesShareTheLink) {
  WorldOptions opts = test_options();
  opts.comm.emulation.link_gbps = 0.08;            // 10 MB/s: 1 MiB per rank takes ~105 ms alone
  const size_t shard_elems = 1 << 18;              // 1 MiB of f32 per rank
  const double alone_s = shard_elems * 4.0 / 1e7;  // each rank sends (n-1)/n of 2 MiB
  World::run(
      2,
      [&](RankContext& ctx) {
        auto a = ctx.communicator(ctx.world_group(), "gather");
        auto b = ctx.communicator(ctx.world_group(), "a2a");
        Stream& sa = ctx.device->create_stream("gather");
        Stream& sb = ctx.device->create_stream("a2a");
        std::vector<float> send(shard_elems, 1.0f), ra(2 * shard_elems), rb(2 * shard_elems);
        a->all_gather(send.data(), ra.data(), shard_elems, DType::F32, sa);
        b->all_gather(send.data(), rb.data(), shard_elems, DType::F32, sb);
        sa.synchronize();
        sb.synchronize();
        if (ctx.rank != 0) return;
        const std::vector<ModelledSpan> spans = ctx.world->network()->recent();
        ASSERT_EQ(spans.size(), 2u);
        const double first_start = std::min(spans[0].start_s, spans[1].start_s);
        const double last_end = std::max(spans[0].end_s, spans[1].end_s);
        const double longest =
            std::max(spans[0].end_s - spans[0].start_s, spans[1].end_s - spans[1].start_s);
        // Work-conserving sharing: from the first start, the ports are busy for both volumes.
        EXPECT_GE(last_end - first_start, 2 * alone_s * (1 - 1e-9));
        // They overlapped (their starts are ms apart at most), so one was slowed by the other.
        EXPECT_GT(longest, 1.2 * alone_s);
        EXPECT_LE(longest, 2 * alone_s * (1 + 1e-9));
      },
      opts);
}

TEST(CommEmulation, EnabledAndBusFactors) {
  EXPECT_TRUE((CommEmulation{8.0, 10.0}.enabled()));
  EXPECT_FALSE(CommEmulation{}.enabled());
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::AllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::AllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::AllToAllV, 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveOp::Broadcast, 3), 1.0);
}

}  // namespace
}  // namespace moezero::comm

namespace moezero::comm {
namespace {

TEST(CommOptionsFromConfig, MapsTheCommSections) {
  CommEmulationConfig e;
  e.link_gbps = 25.0;
  e.latency_us = 5.0;
  CommConfig c;
  c.timeout_s = 1.5;
  c.check_divergence = true;
  const CommOptions o = make_comm_options(e, c);
  EXPECT_EQ(o.timeout.count(), 1500);
  EXPECT_DOUBLE_EQ(o.emulation.link_gbps, 25.0);
  EXPECT_DOUBLE_EQ(o.emulation.latency_us, 5.0);
  EXPECT_EQ(o.call_check, CallCheck::On);
}

}  // namespace
}  // namespace moezero::comm
