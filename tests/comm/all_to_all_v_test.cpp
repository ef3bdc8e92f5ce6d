// tests/comm/all_to_all_v_test.cpp — all_to_all_v with random per-peer counts (zeros
// included) at world sizes 1..5, on the world and on EP groups; mismatched counts fail.
#include <gtest/gtest.h>

#include <random>

#include "comm_test_util.h"
#include "core/process_groups.h"

namespace moezero::comm {
namespace {

using testing::test_options;

// Every element says where it came from: src * 1e6 + dst * 1e4 + index (exact in fp32/i32).
int32_t tag_value(int src, int dst, size_t i) { return src * 1000000 + dst * 10000 + static_cast<int>(i); }

// counts[r][p]: elements group rank r sends to group rank p; ~30% zeros.
std::vector<std::vector<size_t>> random_counts(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(0, 300);
  std::bernoulli_distribution zero(0.3);
  std::vector<std::vector<size_t>> c(n, std::vector<size_t>(n));
  for (auto& row : c)
    for (auto& x : row) x = zero(rng) ? 0 : static_cast<size_t>(len(rng));
  return c;
}

template <typename T>
void run_all_to_all_v(RankContext& ctx, Communicator& comm, Stream& s,
                      const std::vector<std::vector<size_t>>& counts) {
  const int n = comm.size(), r = comm.rank();
  std::vector<size_t> send_elems(n), recv_elems(n);
  for (int p = 0; p < n; ++p) {
    send_elems[p] = counts[r][p];
    recv_elems[p] = counts[p][r];
  }
  std::vector<T> send, recv;
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < send_elems[p]; ++i) send.push_back(static_cast<T>(tag_value(r, p, i)));
  size_t recv_total = 0;
  for (size_t c : recv_elems) recv_total += c;
  recv.assign(recv_total, static_cast<T>(-1));
  comm.all_to_all_v(send.data(), send_elems, recv.data(), recv_elems, dtype_of<T>::value, s);
  s.synchronize();
  size_t k = 0;
  for (int p = 0; p < n; ++p)
    for (size_t i = 0; i < recv_elems[p]; ++i, ++k)
      ASSERT_EQ(recv[k], static_cast<T>(tag_value(p, r, i)))
          << "rank " << ctx.rank << " from " << p << " elem " << i;
}

class AllToAllV : public ::testing::TestWithParam<int> {};

TEST_P(AllToAllV, RandomCountsWithZeros) {
  const int n = GetParam();
  const uint32_t seed = 1234u + static_cast<uint32_t>(n);
  std::cout << "seed " << seed << "\n";
  World::run(n, [&](RankContext& ctx) {
    auto comm = ctx.communicator(ctx.world_group(), "a2a");
    Stream& s = ctx.device->create_stream("a2a");
    for (int round = 0; round < 4; ++round) {
      const auto counts = random_counts(n, seed + static_cast<uint32_t>(round) * 97);  // same on all ranks
      run_all_to_all_v<int32_t>(ctx, *comm, s, counts);
      run_all_to_all_v<float>(ctx, *comm, s, counts);
    }
    // All zero: nothing moves, still completes.
    run_all_to_all_v<int32_t>(ctx, *comm, s, std::vector<std::vector<size_t>>(n, std::vector<size_t>(n, 0)));
  }, test_options());
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, AllToAllV, ::testing::Range(1, 6),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "n" + std::to_string(info.param);
                         });

TEST(AllToAllVGroups, EpGroupsOfWorld6) {
  ProcessGroups groups(6, 3, 6);
  World::run(6, [&](RankContext& ctx) {
    const ProcessGroup& ep = groups.ep_group_of(ctx.rank);
    auto comm = ctx.communicator(ep, "a2a");
    Stream& s = ctx.device->create_stream("a2a");
    // Each EP group uses different counts: groups must not cross.
    run_all_to_all_v<int32_t>(ctx, *comm, s, random_counts(3, 77u + static_cast<uint32_t>(groups.edp_rank(ctx.rank))));
  }, test_options());
}

TEST(AllToAllVErrors, CountsThatDoNotPairUpFailOnEveryRank) {
  try {
    World::run(2, [](RankContext& ctx) {
      auto comm = ctx.communicator(ctx.world_group(), "a2a");
      Stream& s = ctx.device->create_stream("a2a");
      std::vector<size_t> send_elems{1, ctx.rank == 0 ? 2u : 1u}, recv_elems{1, 1};
      std::vector<float> send(3), recv(2);
      comm->all_to_all_v(send.data(), send_elems, recv.data(), recv_elems, DType::F32, s);
      s.synchronize();
    }, test_options());
    FAIL() << "expected an error";
  } catch (const TimeoutError& e) {
    FAIL() << "mismatch must not wait for the timeout: " << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 sends 2 elems to rank 1, which expects 1"),
              std::string::npos) << e.what();
  }
}

TEST(AllToAllVErrors, WrongNumberOfCountsThrowsAtTheCall) {
  World::run(1, [](RankContext& ctx) {
    auto comm = ctx.communicator(ctx.world_group(), "a2a");
    std::vector<size_t> two{1, 1}, one{1};
    float x = 0, y = 0;
    EXPECT_THROW(comm->all_to_all_v(&x, two, &y, one, DType::F32, ctx.device->default_stream()), Error);
    EXPECT_THROW(comm->all_to_all_v(&x, one, &x, one, DType::F32, ctx.device->default_stream()), Error);
  }, test_options());
}

}  // namespace
}  // namespace moezero::comm
