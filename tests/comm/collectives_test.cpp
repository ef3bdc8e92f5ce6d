// tests/comm/collectives_test.cpp — every LocalCommunicator collective at world sizes 1..5,
// every dtype and reduce op, empty / uneven / in-place buffers; results compared bit for bit
// against a rank-order reference (inputs are small integers, so sums are exact).
#include <gtest/gtest.h>

#include "comm_test_util.h"

namespace moezero::comm {
namespace {

using testing::reference_reduce;
using testing::same_bits;
using testing::small_value;
using testing::small_values;
using testing::test_options;

// Element counts: empty, one, and one not divisible by any world size 2..5 (uneven chunks).
const size_t kCounts[] = {0, 1, 1031};

class Collectives : public ::testing::TestWithParam<int> {};

template <typename T>
void check_all_gather(int n) {
  World::run(n, [n](RankContext& ctx) {
    auto comm = ctx.communicator(ctx.world_group(), "gather");
    Stream& s = ctx.device->create_stream("gather");
    for (size_t count : kCounts) {
      auto send = small_values<T>(ctx.rank, count);
      std::vector<T> recv(count * n);
      comm->all_gather(send.data(), recv.data(), count, dtype_of<T>::value, s);
      s.synchronize();
      for (int p = 0; p < n; ++p)
        for (size_t i = 0; i < count; ++i)
          ASSERT_TRUE(same_bits(recv[p * count + i], testing::from_double<T>(small_value(p, i))))
              << "rank " << ctx.rank << " chunk " << p << " elem " << i;
      // In place: send is this rank's chunk of recv.
      std::vector<T> buf(count * n);
      std::copy(send.begin(), send.end(), buf.begin() + ctx.rank * count);
      comm->all_gather(buf.data() + ctx.rank * count, buf.data(), count, dtype_of<T>::value, s);
      s.synchronize();
      if (!recv.empty()) {
        ASSERT_EQ(0, std::memcmp(buf.data(), recv.data(), recv.size() * sizeof(T)));
      }
    }
  }, test_options());
}

template <typename T>
void check_reduce_scatter(int n, ReduceOp op) {
  World::run(n, [n, op](RankContext& ctx) {
    auto comm = ctx.communicator(ctx.world_group(), "reduce");
    Stream& s = ctx.device->create_stream("reduce");
    for (size_t count : kCounts) {
      auto send = small_values<T>(ctx.rank, count * n, 1);
      std::vector<T> recv(count);
      comm->reduce_scatter(send.data(), recv.data(), count, dtype_of<T>::value, op, s);
      // In place: recv is this rank's chunk of send.
      auto inplace = send;
      T* chunk = inplace.data() + ctx.rank * count;
      comm->reduce_scatter(inplace.data(), chunk, count, dtype_of<T>::value, op, s);
      s.synchronize();
      for (size_t i = 0; i < count; ++i) {
        std::vector<int> vals;
        for (int p = 0; p < n; ++p) vals.push_back(small_value(p, ctx.rank * count + i, 1));
        const T want = reference_reduce<T>(vals, op);
        ASSERT_TRUE(same_bits(recv[i], want)) << "rank " << ctx.rank << " elem " << i << " op "
                                              << reduce_op_name(op);
        ASSERT_TRUE(same_bits(chunk[i], want)) << "in place, rank " << ctx.rank << " elem " << i;
      }
    }
  }, test_options());
}

template <typename T>
void check_all_reduce(int n, ReduceOp op) {
  World::run(n, [n, op](RankContext& ctx) {
    auto comm = ctx.communicator(ctx.world_group(), "reduce");
    Stream& s = ctx.device->create_stream("reduce");
    for (size_t count : kCounts) {
      auto send = small_values<T>(ctx.rank, count, 2);
      std::vector<T> recv(count);
      comm->all_reduce(send.data(), recv.data(), count, dtype_of<T>::value, op, s);
      auto inplace = send;
      comm->all_reduce(inplace.data(), inplace.data(), count, dtype_of<T>::value, op, s);
      s.synchronize();
      for (size_t i = 0; i < count; ++i) {
        std::vector<int> vals;
        for (int p = 0; p < n; ++p) vals.push_back(small_value(p, i, 2));
        const T want = reference_reduce<T>(vals, op);
        ASSERT_TRUE(same_bits(recv[i], want)) << "rank " << ctx.rank << " elem " << i;
        ASSERT_TRUE(same_bits(inplace[i], want)) << "in place, rank " << ctx.rank << " elem " << i;
      }
    }
  }, test_options());
}

template <typename T>
void check_broadcast(int n) {
  World::run(n, [n](RankContext& ctx) {
    auto comm = ctx.communicator(ctx.world_group(), "bcast");
    Stream& s = ctx.device->create_stream("bcast");
    for (int root = 0; root < n; ++root) {
      for (size_t count : kCounts) {
        auto send = small_values<T>(ctx.rank, count, 3);
        std::vector<T> recv(count);
        comm->broadcast(send.data(), recv.data(), count, dtype_of<T>::value, root, s);
        auto inplace = send;  // in place on every rank: root's buffer is the source
        comm->broadcast(inplace.data(), inplace.data(), count, dtype_of<T>::value, root, s);
        s.synchronize();
        for (size_t i = 0; i < count; ++i) {
          const T want = testing::from_double<T>(small_value(root, i, 3));
          ASSERT_TRUE(same_bits(recv[i], want)) << "root " << root << " rank " << ctx.rank;
          ASSERT_TRUE(same_bits(inplace[i], want)) << "in place, root " << root;
        }
      }
    }
  }, test_options());
}

TEST_P(Collectives, AllGatherEveryDtype) {
  const int n = GetParam();
  check_all_gather<float>(n);
  check_all_gather<bf16>(n);
  check_all_gather<fp16>(n);
  check_all_gather<int32_t>(n);
  check_all_gather<int64_t>(n);
}

TEST_P(Collectives, ReduceScatterEveryOp) {
  const int n = GetParam();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    check_reduce_scatter<float>(n, op);
    check_reduce_scatter<bf16>(n, op);
    check_reduce_scatter<fp16>(n, op);
    check_reduce_scatter<int32_t>(n, op);
    check_reduce_scatter<int64_t>(n, op);
  }
}

TEST_P(Collectives, AllReduceEveryOp) {
  const int n = GetParam();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    check_all_reduce<float>(n, op);
    check_all_reduce<bf16>(n, op);
    check_all_reduce<fp16>(n, op);
    check_all_reduce<int32_t>(n, op);
    check_all_reduce<int64_t>(n, op);
  }
}

TEST_P(Collectives, BroadcastEveryRoot) {
  const int n = GetParam();
  check_broadcast<float>(n);
  check_broadcast<bf16>(n);
  check_broadcast<int64_t>(n);
}

TEST_P(Collectives, BarrierOrdersStreams) {
  const int n = GetParam();
  std::vector<std::atomic<int>> before(static_cast<size_t>(n));
  World::run(n, [&](RankContext& ctx) {
    auto comm = ctx.communicator(ctx.world_group(), "barrier");
    Stream& s = ctx.device->create_stream("barrier");
    for (int round = 1; round <= 3; ++round) {
      s.enqueue_host([&, round] { before[ctx.rank] = round; });
      comm->barrier(s);
      // After the barrier every rank has passed its write of this round.
      s.enqueue_host([&, round] {
        for (int p = 0; p < n; ++p) MOEZERO_CHECK(before[p] >= round, "rank ", p, " behind");
      });
    }
    s.synchronize();
  }, test_options());
}

// Determinism: fp32 sums of values that are not exact still give identical bits on every
// rank and in every run (rank-order reduction).
TEST_P(Collectives, AllReduceIsBitIdenticalAcrossRanksAndRuns) {
  const int n = GetParam();
  const size_t count = 4099;
  std::vector<std::vector<float>> results(static_cast<size_t>(n) * 2);
  for (int run = 0; run < 2; ++run) {
    World::run(n, [&](RankContext& ctx) {
      auto comm = ctx.communicator(ctx.world_group(), "reduce");
      Stream& s = ctx.device->create_stream("reduce");
      std::vector<float> send(count);
      for (size_t i = 0; i < count; ++i) send[i] = 1.0f / static_cast<float>(ctx.rank + i + 3);
      auto& out = results[static_cast<size_t>(run * n + ctx.rank)];
      out.resize(count);
      comm->all_reduce(send.data(), out.data(), count, DType::F32, ReduceOp::Avg, s);
      s.synchronize();
    }, test_options());
  }
  for (size_t k = 1; k < results.size(); ++k)
    ASSERT_EQ(0, std::memcmp(results[0].data(), results[k].data(), count * sizeof(float))) << k;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Collectives, ::testing::Range(1, 6),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "n" + std::to_string(info.param);
                         });

// > 64 MiB through all_gather and all_reduce on 2 ranks (kept to two cases for speed).
TEST(CollectivesLarge, AllGatherAndAllReduceOver64MiB) {
  const size_t shard_elems = (80u << 20) / 2 / sizeof(float);  // 80 MiB gathered in total
  World::run(2, [&](RankContext& ctx) {
    auto comm = ctx.communicator(ctx.world_group(), "gather");
    Stream& s = ctx.device->create_stream("gather");
    std::vector<float> shard(shard_elems);
    for (size_t i = 0; i < shard_elems; ++i) shard[i] = static_cast<float>((i + ctx.rank) % 1000);
    std::vector<float> full(shard_elems * 2);
    comm->all_gather(shard.data(), full.data(), shard_elems, DType::F32, s);
    comm->all_reduce(full.data(), full.data(), full.size(), DType::F32, ReduceOp::Sum, s);
    s.synchronize();
    for (size_t i = 0; i < full.size(); i += 4099) {
      const size_t p = i / shard_elems, j = i % shard_elems;
      ASSERT_EQ(full[i], 2.0f * static_cast<float>((j + p) % 1000)) << i;
    }
    ASSERT_EQ(full.back(), 2.0f * static_cast<float>((shard_elems - 1 + 1) % 1000));
  }, test_options());
}

}  // namespace
}  // namespace moezero::comm
