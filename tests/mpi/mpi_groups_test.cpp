// tests/mpi/mpi_groups_test.cpp — sub-groups (EP, EDP, a reversed world), two channels on two
// streams at once, and World::run_mpi, under mpirun.
#include <atomic>
#include <cstring>

#include "core/process_groups.h"
#include "tests/mpi/mpi_test_util.h"

namespace moezero::comm::testing {
namespace {

// The EP width used for the group tests: 2 when the world splits in pairs, else the world.
int ep_width(int world) { return world % 2 == 0 ? 2 : world; }

void append(Bytes& out, const Bytes& more) { out.insert(out.end(), more.begin(), more.end()); }

TEST_F(MpiTest, SubGroupsEqualLocal) {
  expect_same_as_local("sub_groups", [](const MakeComm& make, Stream& s, int rank, int world) {
    const int ep = ep_width(world);
    const ProcessGroups pgs(world, ep, ep * 2);
    ProcessGroup reversed{"rev", {}};
    for (int r = world - 1; r >= 0; --r) reversed.ranks.push_back(r);
    auto ep_comm = make(pgs.ep_group_of(rank), "a2a");
    auto edp_comm = make(pgs.edp_group_of(rank), "gather");
    auto edp_reduce = make(pgs.edp_group_of(rank), "reduce");
    auto rev_comm = make(reversed, "gather");
    Bytes out;
    // EP: bf16 all_reduce (reduction order = EP group-rank order).
    Bytes a = random_elems(DType::BF16, 257, rank, 11);
    ep_comm->all_reduce(a.data(), a.data(), 257, DType::BF16, ReduceOp::Sum, s);
    // EDP: all_gather and reduce_scatter.
    const int edp = pgs.edp_size();
    const Bytes b = random_elems(DType::F32, 9, rank, 12);
    Bytes gathered(b.size() * size_t(edp));
    edp_comm->all_gather(b.data(), gathered.data(), 9, DType::F32, s);
    const Bytes c = random_elems(DType::F16, 6 * size_t(edp), rank, 13);
    Bytes scattered(6 * 2);
    edp_reduce->reduce_scatter(c.data(), scattered.data(), 6, DType::F16, ReduceOp::Avg, s);
    // Reversed world: group rank i is global rank world-1-i.
    const Bytes d = random_elems(DType::I32, 4, rank, 14);
    Bytes rev(d.size() * size_t(world));
    rev_comm->all_gather(d.data(), rev.data(), 4, DType::I32, s);
    s.synchronize();
    append(out, a);
    append(out, gathered);
    append(out, scattered);
    append(out, rev);
    return out;
  });
}

TEST_F(MpiTest, ReversedGroupOrdersByGroupRank) {
  ProcessGroup reversed{"rev", {}};
  for (int r = world_ - 1; r >= 0; --r) reversed.ranks.push_back(r);
  auto c = mpi_maker()(reversed, "rev_order");
  EXPECT_EQ(c->rank(), world_ - 1 - rank_);
  EXPECT_EQ(c->global_rank(), rank_);
  Stream& s = device_->create_stream("rev");
  int32_t mine = rank_;
  std::vector<int32_t> all(size_t(world_), -1);
  c->all_gather(&mine, all.data(), 1, DType::I32, s);
  s.synchronize();
  for (int i = 0; i < world_; ++i) EXPECT_EQ(all[size_t(i)], world_ - 1 - i);
}

TEST_F(MpiTest, TwoChannelsOnTwoStreamsNeverCross) {
  // Each rank enqueues on both streams, in a rank-dependent order; the streams' workers then
  // call MPI concurrently. Results must equal the local backend's (which matches by channel).
  expect_same_as_local("two_channels", [](const MakeComm& make, Stream& s, int rank, int world) {
    Stream& s2 = s.device().create_stream("second");
    auto left = make(make_world_group(world), "left");
    auto right = make(make_world_group(world), "right");
    constexpr int kCalls = 12;
    std::vector<Bytes> lbuf, rbuf;
    for (int i = 0; i < kCalls; ++i) {
      lbuf.push_back(random_elems(DType::F32, size_t(50 + 31 * i), rank, 500 + size_t(i)));
      rbuf.push_back(random_elems(DType::BF16, size_t(80 + 17 * i), rank, 600 + size_t(i)));
    }
    std::vector<Bytes> rgather(kCalls);
    auto issue_left = [&](int i) {
      left->all_reduce(lbuf[size_t(i)].data(), lbuf[size_t(i)].data(), 50 + 31 * size_t(i),
                       DType::F32, ReduceOp::Sum, s);
    };
    auto issue_right = [&](int i) {
      rgather[size_t(i)].resize(rbuf[size_t(i)].size() * size_t(world));
      right->all_gather(rbuf[size_t(i)].data(), rgather[size_t(i)].data(), 80 + 17 * size_t(i),
                        DType::BF16, s2);
    };
    for (int i = 0; i < kCalls; ++i) {
      if (rank % 2 == 0) {
        issue_left(i);
        issue_right(i);
      } else {
        issue_right(i);
        issue_left(i);
      }
    }
    s.synchronize();
    s2.synchronize();
    Bytes out;
    for (int i = 0; i < kCalls; ++i) {
      append(out, lbuf[size_t(i)]);
      append(out, rgather[size_t(i)]);
    }
    return out;
  });
}

TEST_F(MpiTest, SameChannelCreatedTwiceContinuesTheSequence) {
  Stream& s = device_->create_stream("twice");
  int64_t v = rank_ + 1;
  {
    auto c = mpi_maker()(make_world_group(world_), "twice");
    c->all_reduce(&v, &v, 1, DType::I64, ReduceOp::Sum, s);
    s.synchronize();
  }
  auto again = mpi_maker()(make_world_group(world_), "twice");
  again->barrier(s);
  s.synchronize();
  EXPECT_EQ(again->records().at(0).seq, 1u);
  EXPECT_EQ(v, int64_t(world_) * (world_ + 1) / 2);
}

TEST_F(MpiTest, RunMpiRunsThisProcessRank) {
  std::atomic<int> calls{0};
  World::run_mpi(DeviceKind::Cpu, [&](RankContext& ctx) {
    ++calls;
    EXPECT_EQ(ctx.rank, rank_);
    EXPECT_EQ(ctx.world_size, world_);
    ASSERT_NE(ctx.device, nullptr);
    EXPECT_EQ(ctx.device->kind(), DeviceKind::Cpu);
    auto c = ctx.communicator(ctx.world_group(), "run_mpi");
    Stream& s = ctx.device->create_stream("run_mpi");
    int64_t v = ctx.rank + 1;
    c->all_reduce(&v, &v, 1, DType::I64, ReduceOp::Sum, s);
    s.synchronize();
    EXPECT_EQ(v, int64_t(world_) * (world_ + 1) / 2);
  });
  EXPECT_EQ(calls.load(), 1);
}

}  // namespace
}  // namespace moezero::comm::testing
