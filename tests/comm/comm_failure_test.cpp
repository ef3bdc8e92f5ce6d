// tests/comm/comm_failure_test.cpp — failures end in seconds with errors that name the op,
// the group, the missing ranks and the sequence number: timeouts, a throwing rank, divergent
// calls, a broken channel, bad arguments.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "comm_test_util.h"

namespace moezero::comm {
namespace {

using testing::test_options;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string contains_msg(const std::string& what, const std::string& needle) {
  return "'" + needle + "' not in: " + what;
}

TEST(CommFailure, PeerThatNeverCallsTimesOutNamingOpGroupRanksAndSeq) {
  const auto t0 = Clock::now();
  try {
    World::run(
        3,
        [](RankContext& ctx) {
          auto comm = ctx.communicator(ctx.world_group(), "gather");
          Stream& s = ctx.device->create_stream("gather");
          std::vector<float> send(4, 1.0f), recv(12);
          comm->all_gather(send.data(), recv.data(), 4, DType::F32, s);  // seq 0: everyone
          if (ctx.rank == 2) return s.synchronize();                     // rank 2 skips seq 1
          comm->all_gather(send.data(), recv.data(), 4, DType::F32, s);
          s.synchronize();
        },
        test_options(300ms));
    FAIL() << "expected a timeout";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    for (const char* needle : {"all_gather(f32, 4 elems)", "group world{0,1,2}", "channel 'gather'",
                               "seq 1", "waiting for ranks {2}", "timed out after 300 ms"})
      EXPECT_NE(what.find(needle), std::string::npos) << contains_msg(what, needle);
  }
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(CommFailure, SkippedCallOfAnotherSizeIsReportedAsDivergence) {
  // Rank 1 skips the first gather; its next call (another size) meets rank 0's first call.
  const auto t0 = Clock::now();
  try {
    World::run(
        2,
        [](RankContext& ctx) {
          auto comm = ctx.communicator(ctx.world_group(), "gather");
          Stream& s = ctx.device->create_stream("gather");
          std::vector<float> send(8), recv(16);
          if (ctx.rank == 0) comm->all_gather(send.data(), recv.data(), 4, DType::F32, s);
          comm->all_gather(send.data(), recv.data(), 8, DType::F32, s);
          s.synchronize();
        },
        test_options(20s));
    FAIL() << "expected a divergence error";
  } catch (const TimeoutError& e) {
    FAIL() << "divergence must not wait for the timeout: " << e.what();
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* needle :
         {"collective divergence on group world{0,1} channel 'gather' seq 0",
          "called all_gather(f32, 4 elems)", "called all_gather(f32, 8 elems)"})
      EXPECT_NE(what.find(needle), std::string::npos) << contains_msg(what, needle);
  }
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(CommFailure, DivergentOpsNameBothRanksCalls) {
  try {
    World::run(
        2,
        [](RankContext& ctx) {
          auto comm = ctx.communicator(ctx.world_group(), "x");
          Stream& s = ctx.device->create_stream("x");
          std::vector<float> a(16), b(16);
          if (ctx.rank == 0) {
            comm->all_gather(a.data(), b.data(), 8, DType::F32, s);
          } else {
            comm->reduce_scatter(a.data(), b.data(), 8, DType::BF16, ReduceOp::Avg, s);
          }
          s.synchronize();
        },
        test_options(20s));
    FAIL() << "expected a divergence error";
  } catch (const TimeoutError& e) {
    FAIL() << e.what();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("collective divergence on group world{0,1}"), std::string::npos) << what;
    EXPECT_NE(what.find("all_gather(f32, 8 elems)"), std::string::npos) << what;
    EXPECT_NE(what.find("reduce_scatter(bf16, 8 elems, avg)"), std::string::npos) << what;
  }
}

TEST(CommFailure, DivergentReduceOpAndRootAreDetected) {
  EXPECT_THROW(World::run(
                   2,
                   [](RankContext& ctx) {
                     auto comm = ctx.communicator(ctx.world_group(), "x");
                     Stream& s = ctx.device->create_stream("x");
                     std::vector<float> a(4), b(4);
                     comm->all_reduce(a.data(), b.data(), 4, DType::F32,
                                      ctx.rank ? ReduceOp::Max : ReduceOp::Sum, s);
                     s.synchronize();
                   },
                   test_options(20s)),
               Error);
  EXPECT_THROW(World::run(
                   2,
                   [](RankContext& ctx) {
                     auto comm = ctx.communicator(ctx.world_group(), "x");
                     Stream& s = ctx.device->create_stream("x");
                     std::vector<float> a(4), b(4);
                     comm->broadcast(a.data(), b.data(), 4, DType::F32, ctx.rank, s);
                     s.synchronize();
                   },
                   test_options(20s)),
               Error);
}

TEST(CommFailure, ThrowingRankWakesThePeersAtOnce) {
  const auto t0 = Clock::now();
  std::mutex mu;
  std::vector<std::string> peer_errors;
  try {
    World::run(
        3,
        [&](RankContext& ctx) {
          if (ctx.rank == 2) throw std::runtime_error("boom on rank 2");
          auto comm = ctx.communicator(ctx.world_group(), "reduce");
          Stream& s = ctx.device->create_stream("reduce");
          std::vector<float> a(64, 1.0f);
          comm->all_reduce(a.data(), a.data(), a.size(), DType::F32, ReduceOp::Sum, s);
          try {
            s.synchronize();
          } catch (const Error& e) {
            std::lock_guard<std::mutex> lock(mu);
            peer_errors.push_back(e.what());
            throw;
          }
        },
        test_options(60s));  // far longer than the test may take: the abort must wake them
    FAIL() << "expected the rank's exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "boom on rank 2");  // the first exception, not a peer's abort
  }
  EXPECT_LT(seconds_since(t0), 10.0);
  ASSERT_EQ(peer_errors.size(), 2u);
  for (const auto& w : peer_errors) {
    EXPECT_NE(w.find("aborted: rank 2 failed: boom on rank 2"), std::string::npos) << w;
    EXPECT_NE(w.find("all_reduce(f32, 64 elems, sum) on group world{0,1,2}"), std::string::npos)
        << w;
  }
}

// A collective waiting on the emulated network (100 s modelled) is woken by a world abort.
TEST(CommFailure, AbortWakesAnEmulatedNetworkWait) {
  WorldOptions opts = test_options(60s);
  opts.comm.emulation.link_gbps = 0.0008;  // 100 kB/s: 10 MB per rank would take 100 s
  std::vector<std::vector<float>> send(2, std::vector<float>(2500000)), recv(2);
  const auto t0 = Clock::now();
  std::string peer_error;
  EXPECT_THROW(World::run(
                   2,
                   [&](RankContext& ctx) {
                     auto comm = ctx.communicator(ctx.world_group(), "gather");
                     Stream& s = ctx.device->create_stream("gather");
                     recv[ctx.rank].resize(2 * send[ctx.rank].size());
                     comm->all_gather(send[ctx.rank].data(), recv[ctx.rank].data(),
                                      send[ctx.rank].size(), DType::F32, s);
                     if (ctx.rank == 1) {
                       std::this_thread::sleep_for(100ms);
                       throw std::runtime_error("boom on rank 1");
                     }
                     try {
                       s.synchronize();
                     } catch (const Error& e) {
                       peer_error = e.what();
                       throw;
                     }
                   },
                   opts),
               std::runtime_error);
  EXPECT_LT(seconds_since(t0), 10.0);
  EXPECT_NE(peer_error.find("aborted: rank 1 failed: boom on rank 1"), std::string::npos)
      << peer_error;
}

TEST(CommFailure, TimedOutChannelFailsLaterCallsAtOnce) {
  try {
    World::run(
        2,
        [](RankContext& ctx) {
          if (ctx.rank == 1) return;
          auto comm = ctx.communicator(ctx.world_group(), "gather");
          Stream& s = ctx.device->create_stream("gather");
          std::vector<float> a(2), b(4);
          comm->all_gather(a.data(), b.data(), 2, DType::F32, s);
          EXPECT_THROW(s.synchronize(), TimeoutError);
          // The channel is broken: a new stream's call fails without a second timeout.
          Stream& s2 = ctx.device->create_stream("gather2");
          const auto t0 = Clock::now();
          comm->all_gather(a.data(), b.data(), 2, DType::F32, s2);
          EXPECT_THROW(s2.synchronize(), TimeoutError);
          EXPECT_LT(seconds_since(t0), 0.2);
        },
        test_options(200ms));
  } catch (const TimeoutError&) {
    // rank 0's stream error also surfaces from World::run's device synchronize
  }
}

TEST(CommFailure, BadArgumentsThrowAtTheCall) {
  World::run(
      2,
      [](RankContext& ctx) {
        ProcessGroup other{"other", {1 - ctx.rank}};
        EXPECT_THROW(ctx.communicator(other, "x"), Error);
        EXPECT_THROW(ctx.communicator(ProcessGroup{"big", {0, 1, 2}}, "x"), Error);
        EXPECT_THROW(ctx.communicator(ProcessGroup{"dup", {0, 0}}, "x"), Error);
        auto comm = ctx.communicator(ctx.world_group(), "x");
        Stream& s = ctx.device->default_stream();
        std::vector<float> a(8);
        EXPECT_THROW(comm->all_reduce(nullptr, a.data(), 4, DType::F32, ReduceOp::Sum, s), Error);
        EXPECT_THROW(comm->all_reduce(a.data(), a.data() + 1, 4, DType::F32, ReduceOp::Sum, s),
                     Error);
        EXPECT_THROW(comm->broadcast(a.data(), a.data(), 4, DType::F32, 2, s), Error);
        EXPECT_THROW(comm->all_gather(a.data() + 1, a.data(), 2, DType::F32, s), Error);
        EXPECT_THROW(comm->reduce_scatter(a.data(), a.data() + 1, 2, DType::F32, ReduceOp::Sum, s),
                     Error);
        // Nothing was enqueued: the channel still works.
        comm->all_reduce(a.data(), a.data(), 8, DType::F32, ReduceOp::Sum, s);
        s.synchronize();
      },
      test_options());
}

}  // namespace
}  // namespace moezero::comm
