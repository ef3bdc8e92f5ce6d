// tests/prefetch/link_idle_test.cpp — the agreed free link time (agreed_free_link_ns) and the
// rule it serves: ranks whose own clocks measured different idle times still plan the same
// speculative gathers, because each plans from the all-gathered values, never from its own.
#include "prefetch/link_idle.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "prefetch/prefetch_planner.h"

namespace moezero::prefetch {
namespace {

using Ids = std::vector<int>;

TEST(LinkIdle, TheLeastRankPerWindow) {
  // 2.5, 1.5, 3.0 ms over 4 windows: the least, 1.5 / 4 ms = 375 us.
  EXPECT_DOUBLE_EQ(agreed_free_link_ns(std::vector<double>{2.5, 1.5, 3.0}, 4), 375000.0);
  EXPECT_EQ(agreed_free_link_ns(std::vector<double>{2.0}, 0), 0.0);
  EXPECT_EQ(agreed_free_link_ns(std::vector<double>{}, 4), 0.0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(agreed_free_link_ns(std::vector<double>{-1.0}, 1), Error);
  EXPECT_THROW(agreed_free_link_ns(std::vector<double>{nan}, 1), Error);
  EXPECT_THROW(agreed_free_link_ns(std::vector<double>{1.0}, -1), Error);
}

FrequencyModel skewed_model() {  // 8 experts, expert e active in the first 8 - e of 8 updates
  FrequencyModel m(1, 8, 0.8);
  for (int u = 0; u < 8; ++u) {
    std::vector<int64_t> counts(8, 0);
    for (int e = 0; e < 8; ++e) counts[size_t(e)] = u < 8 - e ? 1 : 0;
    m.update(0, counts);
  }
  return m;
}

// Four ranks measured different idle times in their windows (their own clocks). Planning from
// its own value, each would issue a different set of all-gathers (a hang); planning from the
// all-gathered values, all issue the same.
TEST(LinkIdle, RanksWithDifferentTimingsPlanTheSameGathers) {
  const FrequencyModel m = skewed_model();
  PrefetchConfig cfg;  // cost, speculate = idle (the defaults)
  cfg.min_probability = 0.0;
  const PrefetchCosts link{1.0, 0.0, 0.0};  // 1 ns per byte
  const Ids candidates = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<uint64_t> bytes(8, 1000);
  const ExpertPlanQuery q{0, candidates, bytes, nullptr, {}};
  const std::vector<double> idle_ms = {0.0040, 0.0022, 0.0031, 0.0025};  // 2 windows each
  const double agreed = agreed_free_link_ns(idle_ms, 2);
  EXPECT_DOUBLE_EQ(agreed, 1100.0);  // rank 1: 2.2 us / 2
  std::vector<Ids> own, shared;
  for (size_t r = 0; r < idle_ms.size(); ++r) {
    PrefetchPlanner local(cfg, &m, link);
    ASSERT_TRUE(local.measures_idle_link());
    local.set_free_link_ns(idle_ms[r] / 2 * 1e6);  // its own clock
    own.push_back(local.expert_plan(q));
    // What rank r computes from the exchange: every rank's words, the same vectors.
    PrefetchPlanner p(cfg, &m, link);
    p.set_free_link_ns(agreed_free_link_ns(idle_ms, 2));
    EXPECT_EQ(p.free_link_ns(), agreed);
    shared.push_back(p.expert_plan(q));
  }
  EXPECT_NE(own[0], own[1]) << "the test's timings must differ enough to change a plan";
  for (size_t r = 1; r < shared.size(); ++r) EXPECT_EQ(shared[r], shared[0]) << "rank " << r;
  EXPECT_EQ(shared[0], (Ids{0})) << "1.1 us free: one 1 us gather";
}

TEST(LinkIdle, OnlyTheIdleGateMeasures) {
  const FrequencyModel m = skewed_model();
  const PrefetchCosts link{1.0, 0.0, 0.0};
  PrefetchConfig cfg;
  EXPECT_TRUE(PrefetchPlanner(cfg, &m, link).measures_idle_link());
  EXPECT_FALSE(PrefetchPlanner(cfg, &m, PrefetchCosts{}).measures_idle_link()) << "no link model";
  EXPECT_FALSE(PrefetchPlanner(cfg, nullptr, link).measures_idle_link()) << "dense model";
  cfg.speculate = Speculate::Priced;
  EXPECT_FALSE(PrefetchPlanner(cfg, &m, link).measures_idle_link());
  cfg.speculate = Speculate::Idle;
  for (const char* p : {"none", "all", "frequency"}) {
    cfg.policy = p;
    EXPECT_FALSE(PrefetchPlanner(cfg, &m, link).measures_idle_link());
  }
  PrefetchPlanner planner(PrefetchConfig{}, &m, link);
  EXPECT_THROW(planner.set_free_link_ns(-1.0), Error);
  EXPECT_EQ(planner.free_link_ns(), 0.0) << "nothing measured yet: no free time";
}

}  // namespace
}  // namespace moezero::prefetch
