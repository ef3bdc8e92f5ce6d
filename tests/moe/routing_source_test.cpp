// tests/moe/routing_source_test.cpp — routing without data (moe/routing_source.h): the
// apportionment every source ends in, the synthetic generator's skew, drift, co-activation and
// rank variation, and a recorded trace read back for a run of another shape, with its refusals.
#include "moe/routing_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "core/error.h"

namespace moezero::moe {
namespace {

namespace fs = std::filesystem;

int64_t sum(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{0});
}

// Every count vector a source returns obeys the router's invariants.
void expect_valid(const std::vector<int64_t>& c, int64_t tokens, int k, size_t E) {
  ASSERT_EQ(c.size(), E);
  EXPECT_EQ(sum(c), tokens * k);
  for (int64_t x : c) {
    EXPECT_GE(x, 0);
    EXPECT_LE(x, tokens);
  }
}

TEST(Apportion, ProportionalWithLargestRemainders) {
  const std::vector<double> w = {3, 1, 0, 0};
  EXPECT_EQ(apportion(w, 8, 1), (std::vector<int64_t>{6, 2, 0, 0}));
  const std::vector<double> third = {1, 1, 1};
  EXPECT_EQ(apportion(third, 10, 1), (std::vector<int64_t>{4, 3, 3}));  // ties: lower id first
}

TEST(Apportion, CapsAtTheTokenCountAndReshares) {
  // 10 tokens x top-2 = 20 assignments; expert 0 would get 18 but holds at most 10.
  const std::vector<double> w = {9, 0.5, 0.5, 0};
  const auto c = apportion(w, 10, 2);
  expect_valid(c, 10, 2, 4);
  EXPECT_EQ(c[0], 10);
  EXPECT_EQ(c[1], 5);
  EXPECT_EQ(c[2], 5);
  // Only one weighted expert: the rest go evenly to the zero-weight ones.
  const std::vector<double> one = {1, 0, 0, 0, 0};
  const auto d = apportion(one, 7, 3);
  expect_valid(d, 7, 3, 5);
  EXPECT_EQ(d[0], 7);
}

TEST(SyntheticRouting, CountsAreValidAndDeterministic) {
  const RoutingShape shape{16, 2, 100, 3};
  SyntheticRoutingSource a(shape, {});
  SyntheticRoutingSource b(shape, {});
  for (int64_t mb = 0; mb < 4; ++mb)
    for (int m = 0; m < 3; ++m)
      for (int r = 0; r < 5; ++r) {
        const auto c = a.counts(mb, m, r);
        expect_valid(c, 100, 2, 16);
        EXPECT_EQ(c, b.counts(mb, m, r));
      }
  std::vector<int64_t> total(16, 0);
  for (int r = 0; r < 5; ++r) {
    const auto c = a.counts(2, 1, r);
    for (size_t e = 0; e < 16; ++e) total[e] += c[e];
  }
  EXPECT_EQ(a.total(2, 1, 5), total);
}

// The present ranks of a simulated world ask for a layer's total together: it is computed once
// (each rank's counts drawn once), and every thread gets the same sum.
TEST(RoutingSource, ConcurrentAsksComputeATotalOnce) {
  class Counting final : public RoutingSource {
   public:
    std::vector<int64_t> counts(int64_t mb, int m, int rank) const override {
      ++calls;
      std::this_thread::sleep_for(std::chrono::microseconds(200));  // a slow draw
      return {mb + m + rank, 1};
    }
    mutable std::atomic<int> calls{0};
  };
  Counting src;
  constexpr int kThreads = 8, kWorld = 64;
  std::vector<std::vector<int64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] { got[static_cast<size_t>(t)] = src.total(3, 2, kWorld); });
  for (auto& th : threads) th.join();
  EXPECT_EQ(src.calls.load(), kWorld);
  const std::vector<int64_t> want{kWorld * 5 + kWorld * (kWorld - 1) / 2, kWorld};
  for (const auto& g : got) EXPECT_EQ(g, want);
}

TEST(SyntheticRouting, ZipfSkewOrdersTheExperts) {
  const RoutingShape shape{8, 1, 1000, 1};
  SyntheticRouting p;
  p.zipf_s = 1.0;
  p.rank_noise = 0.0;
  const auto c = SyntheticRoutingSource(shape, p).counts(0, 0, 0);
  std::vector<int64_t> sorted = c;
  std::sort(sorted.rbegin(), sorted.rend());
  // Harmonic weights 1, 1/2, ..., 1/8 of 1000: 368, 184, 123, 92, ...
  EXPECT_EQ(sorted[0], 368);
  EXPECT_EQ(sorted[1], 184);
  EXPECT_EQ(sorted[7], 46);
  p.zipf_s = 0.0;  // uniform
  const auto u = SyntheticRoutingSource(shape, p).counts(0, 0, 0);
  for (int64_t x : u) EXPECT_EQ(x, 125);
}

TEST(SyntheticRouting, DriftMovesTheHotExpert) {
  const RoutingShape shape{8, 1, 1000, 1};
  SyntheticRouting p;
  p.rank_noise = 0.0;
  p.drift = 1.0;  // one expert per step
  p.grad_accum_steps = 2;
  SyntheticRoutingSource src(shape, p);
  auto hot = [&](int64_t mb) {
    const auto c = src.counts(mb, 0, 0);
    return std::max_element(c.begin(), c.end()) - c.begin();
  };
  EXPECT_EQ(hot(0), hot(1));  // one step: the same order
  EXPECT_NE(hot(0), hot(2));  // the next step: another hot expert
  p.drift = 0.0;
  SyntheticRoutingSource still(shape, p);
  EXPECT_EQ(still.counts(0, 0, 0), still.counts(40, 0, 0));
}

TEST(SyntheticRouting, CoactivationSharesHotExpertsAcrossLayers) {
  const RoutingShape shape{64, 1, 6400, 6};
  SyntheticRouting p;
  p.rank_noise = 0.0;
  p.coactivation = 1.0;
  SyntheticRoutingSource same(shape, p);
  for (int m = 1; m < 6; ++m) EXPECT_EQ(same.weights(0, m), same.weights(0, 0));
  p.coactivation = 0.0;
  SyntheticRoutingSource indep(shape, p);
  int differ = 0;
  for (int m = 1; m < 6; ++m) differ += indep.weights(0, m) != indep.weights(0, 0);
  EXPECT_EQ(differ, 5);
}

TEST(SyntheticRouting, RankNoiseMakesRanksDiffer) {
  const RoutingShape shape{16, 2, 512, 1};
  SyntheticRouting p;
  p.rank_noise = 0.0;
  SyntheticRoutingSource alike(shape, p);
  EXPECT_EQ(alike.counts(0, 0, 0), alike.counts(0, 0, 7));
  p.rank_noise = 0.3;
  SyntheticRoutingSource noisy(shape, p);
  EXPECT_NE(noisy.counts(0, 0, 0), noisy.counts(0, 0, 7));
  expect_valid(noisy.counts(0, 0, 7), 512, 2, 16);
}

TEST(SyntheticRouting, RefusesBadParameters) {
  const RoutingShape shape{8, 2, 10, 1};
  SyntheticRouting p;
  p.coactivation = 1.5;
  EXPECT_THROW(SyntheticRoutingSource(shape, p), Error);
  EXPECT_THROW(SyntheticRoutingSource(RoutingShape{4, 5, 10, 1}, {}), Error);  // top_k > E
}

class TraceSource : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("moezero_routing_source_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // World 2, 4 experts, top-2, MoE layers {1, 3}, 2 complete micro-batches of 6 tokens per rank.
  fs::path write(const std::vector<std::string>& extra = {}, bool header = true) {
    const fs::path p = dir_ / "trace.jsonl";
    std::ofstream o(p);
    if (header)
      o << R"({"format": "moezero routing trace", "version": 1, "world_size": 2, "ep_size": 1,)"
        << R"( "num_experts": 4, "top_k": 2, "grad_accum_steps": 1, "moe_layers": [1, 3]})"
        << "\n";
    for (int mb = 0; mb < 2; ++mb)
      for (int layer : {1, 3})
        for (int r = 0; r < 2; ++r) {
          nlohmann::json j;
          j["step"] = mb + 1;
          j["micro_batch"] = mb;
          j["layer"] = layer;
          j["rank"] = r;
          j["counts"] = std::vector<int>{6, 4 - r, 1 + r, 1};
          if (mb == 1) j["counts"] = std::vector<int>{1, 1, 5, 5};
          o << j.dump() << "\n";
        }
    for (const auto& l : extra) o << l << "\n";
    return p;
  }
  fs::path dir_;
};

TEST_F(TraceSource, SameShapeReadsTheRecordingExactly) {
  const fs::path p = write();
  TraceRoutingSource src(p.string(), RoutingShape{4, 2, 6, 2});
  EXPECT_EQ(src.recorded_micro_batches(), 2);
  EXPECT_EQ(src.recorded_world_size(), 2);
  EXPECT_EQ(src.counts(0, 0, 0), (std::vector<int64_t>{6, 4, 1, 1}));
  EXPECT_EQ(src.counts(0, 1, 1), (std::vector<int64_t>{6, 3, 2, 1}));
  EXPECT_EQ(src.counts(1, 0, 0), (std::vector<int64_t>{1, 1, 5, 5}));
}

TEST_F(TraceSource, AnotherShapeWrapsAndReapportions) {
  const fs::path p = write();
  // World 8 (rank 5 reads trace rank 1), 4 MoE layers (layer 2 reads layer 0), micro-batch 3
  // reads micro-batch 1; 60 tokens per rank instead of 6: the same proportions, 10x.
  TraceRoutingSource src(p.string(), RoutingShape{4, 2, 60, 4});
  EXPECT_EQ(src.counts(2, 2, 5), (std::vector<int64_t>{60, 30, 20, 10}));
  EXPECT_EQ(src.counts(0, 0, 1), (std::vector<int64_t>{60, 30, 20, 10}));
  EXPECT_EQ(src.counts(3, 0, 0), (std::vector<int64_t>{10, 10, 50, 50}));
  expect_valid(src.counts(1, 3, 7), 60, 2, 4);
}

TEST_F(TraceSource, RefusesWhatDoesNotMap) {
  const fs::path p = write();
  try {
    TraceRoutingSource(p.string(), RoutingShape{8, 2, 6, 2});
    FAIL() << "8 experts accepted for a 4-expert trace";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_experts 4"), std::string::npos) << e.what();
  }
  const fs::path bad = write({R"({"micro_batch": 2, "layer": 5, "rank": 0, "counts": [1,1,1,1]})"});
  try {
    TraceRoutingSource(bad.string(), RoutingShape{4, 2, 6, 2});
    FAIL() << "a layer outside moe_layers accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 10: layer 5"), std::string::npos) << e.what();
  }
  const fs::path headless = write({}, false);
  EXPECT_THROW(TraceRoutingSource(headless.string(), RoutingShape{4, 2, 6, 2}), Error);
  EXPECT_THROW(TraceRoutingSource((dir_ / "absent.jsonl").string(), RoutingShape{4, 2, 6, 2}),
               Error);
}

}  // namespace
}  // namespace moezero::moe
