// tests/prefetch/prefetch_policy_test.cpp — none / all / frequency / cost plans on crafted models:
// ordering, threshold, budget (stop, never skip; monotone), ties by id, co-activation changing
// the plan, argument checks; backward_order.
#include "prefetch/prefetch_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "core/error.h"

namespace moezero::prefetch {
namespace {

using Counts = std::vector<int64_t>;
using Ids = std::vector<int>;

// [in] speculate: the cost policy's gain of a hit; the tests written before the gate existed
// (issue 27) price it as `priced` (the whole on-demand gather).
PrefetchConfig config(const std::string& policy, double min_probability, uint64_t budget_bytes,
                      Speculate speculate = Speculate::Priced) {
  PrefetchConfig c;
  c.policy = policy;
  c.min_probability = min_probability;
  c.budget_bytes = budget_bytes;
  c.speculate = speculate;
  return c;
}

// One layer, 4 experts, d = 0.5: probabilities {1, 0.5, 0.25, 0.125} after three updates.
FrequencyModel graded_model() {
  FrequencyModel m(1, 4, 0.5);
  m.update(0, Counts{1, 1, 1, 0});
  m.update(0, Counts{1, 1, 0, 0});
  m.update(0, Counts{1, 0, 0, 0});
  return m;
}

const Ids kShuffled = {3, 1, 2, 0};
const std::vector<uint64_t> kTenEach = {10, 10, 10, 10};

TEST(PrefetchPolicy, NoneAndAll) {
  const FrequencyModel m = graded_model();
  EXPECT_TRUE(plan_prefetch(config("none", 0.0, 1000), m, 0, kShuffled, kTenEach, nullptr).empty());
  // all: ascending id, ignoring threshold and budget.
  EXPECT_EQ(plan_prefetch(config("all", 0.9, 5), m, 0, kShuffled, kTenEach, nullptr),
            (Ids{0, 1, 2, 3}));
  EXPECT_TRUE(plan_prefetch(config("all", 0.0, 0), m, 0, {}, {}, nullptr).empty());
}

TEST(PrefetchPolicy, FrequencyOrdersByProbabilityThenThreshold) {
  const FrequencyModel m = graded_model();
  ASSERT_EQ(m.probability(0, 1), 0.5);
  ASSERT_EQ(m.probability(0, 3), 0.125);
  EXPECT_EQ(plan_prefetch(config("frequency", 0.0, 1000), m, 0, kShuffled, kTenEach, nullptr),
            (Ids{0, 1, 2, 3}));
  // Threshold is inclusive.
  EXPECT_EQ(plan_prefetch(config("frequency", 0.25, 1000), m, 0, kShuffled, kTenEach, nullptr),
            (Ids{0, 1, 2}));
  EXPECT_EQ(plan_prefetch(config("frequency", 0.26, 1000), m, 0, kShuffled, kTenEach, nullptr),
            (Ids{0, 1}));
  // Only candidates are planned (an EP rank's local experts).
  const Ids local = {3, 2};
  const std::vector<uint64_t> local_bytes = {10, 10};
  EXPECT_EQ(plan_prefetch(config("frequency", 0.0, 1000), m, 0, local, local_bytes, nullptr),
            (Ids{2, 3}));
}

TEST(PrefetchPolicy, FrequencyTiesGoToTheLowerId) {
  FrequencyModel m(1, 4, 0.5);
  m.update(0, Counts{0, 1, 0, 1});  // {0.5, 1, 0.5, 1}
  EXPECT_EQ(plan_prefetch(config("frequency", 0.0, 1000), m, 0, kShuffled, kTenEach, nullptr),
            (Ids{1, 3, 0, 2}));
  // Cold model: everything ties at 1.0: ascending id within the budget.
  const FrequencyModel cold(1, 4, 0.9);
  EXPECT_EQ(plan_prefetch(config("frequency", 0.1, 30), cold, 0, kShuffled, kTenEach, nullptr),
            (Ids{0, 1, 2}));
}

TEST(PrefetchPolicy, FrequencyBudgetStopsAtTheFirstThatDoesNotFit) {
  const FrequencyModel m = graded_model();
  // Ranking 0, 1, 2, 3; expert 1 is big. Budget 50: 0 fits (10), 1 (100) does not: stop, even
  // though 2 and 3 would fit.
  const Ids ids = {0, 1, 2, 3};
  const std::vector<uint64_t> bytes = {10, 100, 10, 10};
  EXPECT_EQ(plan_prefetch(config("frequency", 0.0, 50), m, 0, ids, bytes, nullptr), (Ids{0}));
  EXPECT_EQ(plan_prefetch(config("frequency", 0.0, 110), m, 0, ids, bytes, nullptr), (Ids{0, 1}));
  EXPECT_EQ(plan_prefetch(config("frequency", 0.0, 130), m, 0, ids, bytes, nullptr),
            (Ids{0, 1, 2, 3}));  // exactly the budget
  EXPECT_TRUE(plan_prefetch(config("frequency", 0.0, 9), m, 0, ids, bytes, nullptr).empty());
}

TEST(PrefetchPolicy, FrequencyPlanIsMonotoneInBudgetAndThreshold) {
  const uint64_t seed = 99;
  SCOPED_TRACE(seed);
  std::mt19937_64 rng(seed);
  FrequencyModel m(1, 12, 0.8);
  for (int t = 0; t < 30; ++t) {
    Counts c(12);
    for (auto& x : c) x = int64_t(rng() % 3 == 0 ? 0 : rng() % 50);
    m.update(0, c);
  }
  Ids ids(12);
  std::vector<uint64_t> bytes(12);
  for (int e = 0; e < 12; ++e) {
    ids[size_t(e)] = 11 - e;
    bytes[size_t(e)] = 1 + rng() % 100;
  }
  Ids prev_plan;
  for (uint64_t budget = 0; budget <= 1300; budget += 7) {
    const Ids plan = plan_prefetch(config("frequency", 0.0, budget), m, 0, ids, bytes, nullptr);
    ASSERT_GE(plan.size(), prev_plan.size());
    EXPECT_TRUE(std::equal(prev_plan.begin(), prev_plan.end(), plan.begin())) << budget;
    prev_plan = plan;
  }
  EXPECT_EQ(prev_plan.size(), 12u);
  for (double thr = 1.0; thr >= 0.0; thr -= 0.05) {
    const Ids plan = plan_prefetch(config("frequency", thr, 1u << 20), m, 0, ids, bytes, nullptr);
    EXPECT_TRUE(std::equal(plan.begin(), plan.end(), prev_plan.begin())) << thr;  // a prefix
  }
}

TEST(PrefetchPolicy, CoActivationChangesThePlan) {
  // Layer 1 uses expert i whenever layer 0 uses expert i; layer 0 alternates 0 and 1.
  FrequencyModel m(2, 4, 0.8);
  for (int t = 0; t < 60; ++t) {
    Counts c(4, 0);
    c[size_t(t % 2)] = 8;
    m.update(0, c);
    m.update(1, c);
  }
  const Ids ids = {0, 1, 2, 3};
  const PrefetchConfig cfg = config("frequency", 0.3, 1000);
  // Marginals: experts 0 and 1 each about one half.
  EXPECT_EQ(plan_prefetch(cfg, m, 1, ids, kTenEach, nullptr), (Ids{1, 0}));  // 1 was last: likelier
  const std::vector<char> prev0 = {1, 0, 0, 0}, prev1 = {0, 1, 0, 0}, prev01 = {1, 1, 0, 0};
  EXPECT_EQ(plan_prefetch(cfg, m, 1, ids, kTenEach, &prev0), (Ids{0}));
  EXPECT_EQ(plan_prefetch(cfg, m, 1, ids, kTenEach, &prev1), (Ids{1}));
  EXPECT_EQ(plan_prefetch(cfg, m, 1, ids, kTenEach, &prev01), (Ids{1, 0}));  // p(1|1) > p(0|0)
  // A predecessor never seen before has no evidence: its conditionals are the marginals.
  const std::vector<char> prev3 = {0, 0, 0, 1};
  EXPECT_EQ(plan_prefetch(cfg, m, 1, ids, kTenEach, &prev3),
            plan_prefetch(cfg, m, 1, ids, kTenEach, nullptr));
}

TEST(PrefetchPolicy, ArgumentsAreChecked) {
  const FrequencyModel m(2, 4, 0.9);
  const PrefetchConfig cfg = config("frequency", 0.1, 100);
  const std::vector<char> prev = {1, 0, 0, 0};
  const std::vector<char> short_prev = {1, 0};
  const Ids dup = {1, 1};
  const Ids bad = {4};
  const std::vector<uint64_t> two = {1, 1}, one = {1};
  EXPECT_THROW(plan_prefetch(cfg, m, 0, kShuffled, kTenEach, &prev), Error);  // layer 0
  EXPECT_THROW(plan_prefetch(cfg, m, 1, kShuffled, kTenEach, &short_prev), Error);
  EXPECT_THROW(plan_prefetch(cfg, m, 2, kShuffled, kTenEach, nullptr), Error);
  EXPECT_THROW(plan_prefetch(cfg, m, 0, dup, two, nullptr), Error);
  EXPECT_THROW(plan_prefetch(cfg, m, 0, bad, one, nullptr), Error);
  EXPECT_THROW(plan_prefetch(cfg, m, 0, kShuffled, two, nullptr), Error);
}

TEST(PrefetchPolicy, BackwardOrderIsTheForwardActiveSetAscending) {
  const std::vector<char> active = {0, 1, 1, 0, 0, 1, 0, 1};
  EXPECT_EQ(backward_order(Ids{7, 2, 5, 3}, active), (Ids{2, 5, 7}));
  EXPECT_EQ(backward_order(Ids{0, 3, 4}, active), Ids{});
  EXPECT_THROW(backward_order(Ids{8}, active), Error);
  EXPECT_THROW(backward_order(Ids{2, 2}, active), Error);
}

// Cost: p * t > (1 - p) * max(0, t - free_left), walking the frequency ranking, stopping at the
// first rejection. graded_model: p = {1, 0.5, 0.25, 0.125} after 3 updates at d = 0.5; without
// the prior's d^3 = 1/8: {1, 3/7, 1/7, 0}. 10 bytes each, 1 ns per byte.
TEST(PrefetchPolicy, CostTakesWhatPaysForItself) {
  const FrequencyModel m = graded_model();
  const PrefetchConfig c = config("cost", 0.0, 1000);
  auto plan = [&](double free_ns) {
    return plan_prefetch(c, m, 0, kShuffled, kTenEach, nullptr, PrefetchCosts{1.0, 0.0, free_ns});
  };
  EXPECT_EQ(plan(0.0), (Ids{0}));         // link-bound: p = 0.5 ties (5 > 5 is false), rejected
  EXPECT_EQ(plan(20.0), (Ids{0, 1}));     // 0 and 1 ride in the free link time
  EXPECT_EQ(plan(35.0), (Ids{0, 1, 2}));  // 2 pays 0; 3: p = 0 saves nothing
  EXPECT_EQ(plan(1e9), (Ids{0, 1, 2}));   // never seen active: never speculated
  // A cold model (no update) has no evidence: the prior, every expert.
  EXPECT_EQ(plan_prefetch(c, FrequencyModel(1, 4, 0.5), 0, kShuffled, kTenEach, nullptr,
                          PrefetchCosts{1.0, 0.0, 0.0}),
            (Ids{0, 1, 2, 3}));
  // Latency counts as link time: a saved gather saves it, a wasted one pays it.
  EXPECT_EQ(plan_prefetch(c, m, 0, kShuffled, kTenEach, nullptr, PrefetchCosts{0.0, 10.0, 20.0}),
            (Ids{0, 1}));
}

TEST(PrefetchPolicy, CostDiscountsConfidentGuessesByTheirRealisedPrecision) {
  // Expert 1 is active in every other micro-batch: its marginal swings around 1/2, and right
  // after an active micro-batch (priced >= 1/2: a guess a link-bound plan would take) it is
  // never active. Expert 0 is always active (priced ~1, always right).
  FrequencyModel m(1, 2, 0.9);
  for (int i = 0; i <= 40; ++i) m.update(0, Counts{5, i % 2 == 0 ? 3 : 0});
  ASSERT_GE(m.priced(0, 1, nullptr), 0.5) << "the guess the plan is tempted by";
  const double cal = m.plan_calibration(0);
  EXPECT_LT(cal, 0.85);  // claimed ~1.5 per micro-batch where ~1 came
  EXPECT_GT(cal, 0.5);
  const PrefetchConfig c = config("cost", 0.0, 1000);
  const PrefetchCosts bound{1.0, 0.0, 0.0};  // link-bound: take iff p > 1/2
  EXPECT_EQ(plan_prefetch(c, m, 0, Ids{0, 1}, std::vector<uint64_t>{10, 10}, nullptr, bound),
            (Ids{0}));
  // The same model without the calibration's evidence (a checkpoint of an older trainer):
  // the overconfident guess is taken.
  nlohmann::json j = m.to_json();
  j.erase("confident_priced");
  j.erase("confident_active");
  const FrequencyModel uncal = FrequencyModel::from_json(j);
  EXPECT_EQ(uncal.plan_calibration(0), 1.0);
  EXPECT_EQ(plan_prefetch(c, uncal, 0, Ids{0, 1}, std::vector<uint64_t>{10, 10}, nullptr, bound),
            (Ids{0, 1}));
  // The calibration is state: it round-trips exactly.
  EXPECT_EQ(FrequencyModel::from_json(m.to_json()), m);
  // Only the frequency policy's threshold applies there: no calibration.
  EXPECT_EQ(plan_prefetch(config("frequency", 0.5, 1000), m, 0, Ids{0, 1},
                          std::vector<uint64_t>{10, 10}, nullptr, bound),
            (Ids{0, 1}));
}

TEST(PrefetchPolicy, CostKeepsFloorAndBudgetAndFallsBackWithoutALink) {
  const FrequencyModel m = graded_model();
  const PrefetchCosts free_link{1.0, 0.0, 1e9};
  EXPECT_EQ(plan_prefetch(config("cost", 0.3, 1000), m, 0, kShuffled, kTenEach, nullptr, free_link),
            (Ids{0, 1}));  // min_probability is a floor
  EXPECT_EQ(plan_prefetch(config("cost", 0.0, 15), m, 0, kShuffled, kTenEach, nullptr, free_link),
            (Ids{0}));  // budget_bytes caps memory
  // No link model: the cost policy is frequency.
  for (double floor : {0.0, 0.2, 0.6})
    EXPECT_EQ(plan_prefetch(config("cost", floor, 25), m, 0, kShuffled, kTenEach, nullptr,
                            PrefetchCosts{}),
              plan_prefetch(config("frequency", floor, 25), m, 0, kShuffled, kTenEach, nullptr));
}

TEST(PrefetchPolicy, LinkCostsOfARingAllGather) {
  const PrefetchCosts c = link_costs(8.0, 2.0, 4);  // 1 ns per byte on the wire, 3/4 received
  EXPECT_DOUBLE_EQ(c.link_ns_per_byte, 0.75);
  EXPECT_DOUBLE_EQ(c.gather_latency_ns, 6000.0);
  EXPECT_DOUBLE_EQ(c.free_link_ns, 0.0);
  EXPECT_TRUE(c.known());
  EXPECT_FALSE(link_costs(0.0, 0.0, 4).known());
  EXPECT_FALSE(link_costs(8.0, 2.0, 1).known());  // one rank: nothing crosses a link
  EXPECT_THROW(link_costs(8.0, 2.0, 0), Error);
  EXPECT_THROW(link_costs(-1.0, 2.0, 2), Error);
}

// Identical inputs give identical plans (what keeps the group's collectives matched), and more
// free link time only ever extends a plan (a prefix of one ranking).
TEST(PrefetchPolicy, CostPlansAreDeterministicAndMonotoneInFreeLinkTime) {
  const uint64_t seed = 20240613;
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  FrequencyModel a(2, 8, 0.8), b(2, 8, 0.8);
  for (int mb = 0; mb < 30; ++mb)
    for (int l = 0; l < 2; ++l) {
      Counts counts(8);
      for (auto& n : counts) n = int64_t(rng() % 3);
      a.update(l, counts);
      b.update(l, counts);
    }
  const Ids ids = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<uint64_t> bytes(8);
  for (auto& x : bytes) x = 100 + rng() % 900;
  const PrefetchConfig c = config("cost", 0.0, 1ull << 20);
  Ids prev;
  for (double free_ns = 0.0; free_ns < 20000.0; free_ns += 250.0) {
    const PrefetchCosts costs{2.0, 500.0, free_ns};
    const Ids pa = plan_prefetch(c, a, 1, ids, bytes, &a.last_active(0), costs);
    EXPECT_EQ(pa, plan_prefetch(c, b, 1, ids, bytes, &b.last_active(0), costs));
    ASSERT_GE(pa.size(), prev.size());
    EXPECT_TRUE(std::equal(prev.begin(), prev.end(), pa.begin())) << "free " << free_ns;
    prev = pa;
  }
}

// The gate alone (speculation_pays), a pure function of (p, t, free time, mode). idle: a hit
// gains only the link time it moves into idle time; priced: its whole on-demand gather.
TEST(PrefetchPolicy, SpeculationPaysOnlyIntoIdleLinkTime) {
  for (double p : {0.0, 0.3, 0.6, 0.9, 1.0})  // no idle time: nothing to gain, never taken
    EXPECT_FALSE(speculation_pays(p, 10.0, 0.0, Speculate::Idle)) << p;
  EXPECT_TRUE(speculation_pays(0.9, 10.0, 0.0, Speculate::Priced));   // 9 > 1
  EXPECT_FALSE(speculation_pays(0.5, 10.0, 0.0, Speculate::Priced));  // 5 > 5 is false
  EXPECT_TRUE(speculation_pays(0.1, 10.0, 10.0, Speculate::Idle));    // fits: costs nothing
  EXPECT_FALSE(speculation_pays(0.0, 10.0, 10.0, Speculate::Idle));   // never needed
  EXPECT_TRUE(speculation_pays(0.6, 10.0, 5.0, Speculate::Idle));     // 0.6 x 5 > 0.4 x 5
  EXPECT_FALSE(speculation_pays(0.4, 10.0, 5.0, Speculate::Idle));    // 0.4 x 5 < 0.6 x 5
  EXPECT_TRUE(speculation_pays(0.4, 10.0, 5.0, Speculate::Priced));   // 0.4 x 10 > 0.6 x 5
  EXPECT_TRUE(speculation_pays(0.45, 10.0, 5.0, Speculate::Priced));  // 4.5 > 2.75
  EXPECT_FALSE(speculation_pays(0.45, 10.0, 5.0, Speculate::Idle));   // 2.25 < 2.75
  EXPECT_FALSE(speculation_pays(0.9, 10.0, -5.0, Speculate::Idle));   // negative: none free
  EXPECT_DOUBLE_EQ(speculative_gather_ns(10, PrefetchCosts{2.0, 7.0, 0.0}), 27.0);
}

// The default gate (idle) on graded_model (priced p = {1, 3/7, 1/7, 0}, 10 ns each): the free
// link time is consumed in ranking order; with none, nothing is speculated, not even the sure
// expert (its bytes cross a busy link either way). PlanNotes count what frequency would have
// taken but the gate refused.
TEST(PrefetchPolicy, IdleGateSpeculatesOnlyIntoFreeLinkTime) {
  const FrequencyModel m = graded_model();
  const PrefetchConfig c = config("cost", 0.0, 1000, Speculate::Idle);
  EXPECT_EQ(PrefetchConfig{}.speculate, Speculate::Idle) << "the default";
  auto plan = [&](double free_ns, PlanNotes* notes = nullptr) {
    return plan_prefetch(c, m, 0, kShuffled, kTenEach, nullptr, PrefetchCosts{1.0, 0.0, free_ns},
                         notes);
  };
  PlanNotes notes;
  EXPECT_EQ(plan(0.0, &notes), Ids{});
  EXPECT_EQ(notes.gated, 4u);  // frequency (floor 0) takes all four
  EXPECT_EQ(plan(10.0), (Ids{0}));
  EXPECT_EQ(plan(15.0), (Ids{0}));  // 1: 3/7 x 5 < 4/7 x 5
  EXPECT_EQ(plan(20.0, &notes), (Ids{0, 1}));
  EXPECT_EQ(notes.gated, 2u);
  EXPECT_EQ(plan(25.0), (Ids{0, 1}));  // 2: 1/7 x 5 < 6/7 x 5
  EXPECT_EQ(plan(30.0), (Ids{0, 1, 2}));
  EXPECT_EQ(plan(1e9, &notes), (Ids{0, 1, 2}));  // never seen active: never speculated
  EXPECT_EQ(notes.gated, 1u);
  // A cold model (the prior, p = 1 for all) with no measured idle time: nothing; the old
  // rule gathered every expert in the first step.
  const FrequencyModel cold(1, 4, 0.5);
  EXPECT_EQ(plan_prefetch(c, cold, 0, kShuffled, kTenEach, nullptr, PrefetchCosts{1.0, 0.0, 0.0}),
            Ids{});
  EXPECT_EQ(plan_prefetch(config("cost", 0.0, 1000), cold, 0, kShuffled, kTenEach, nullptr,
                          PrefetchCosts{1.0, 0.0, 0.0}),
            (Ids{0, 1, 2, 3}));
  // The other policies ignore the gate (and count nothing).
  EXPECT_EQ(plan_prefetch(config("frequency", 0.0, 1000, Speculate::Idle), m, 0, kShuffled,
                          kTenEach, nullptr, PrefetchCosts{1.0, 0.0, 0.0}, &notes),
            (Ids{0, 1, 2, 3}));
  EXPECT_EQ(notes.gated, 0u);
  // Without a link model the cost policy is frequency, whatever the mode.
  EXPECT_EQ(plan_prefetch(c, m, 0, kShuffled, kTenEach, nullptr, PrefetchCosts{}),
            (Ids{0, 1, 2, 3}));
}

// More free link time only ever extends an idle-gated plan (a prefix of one ranking), and
// identical inputs give identical plans.
TEST(PrefetchPolicy, IdleGatePlansAreMonotoneInFreeLinkTime) {
  const uint64_t seed = 20261204;
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  FrequencyModel a(2, 8, 0.8);
  for (int mb = 0; mb < 30; ++mb)
    for (int l = 0; l < 2; ++l) {
      Counts counts(8);
      for (auto& n : counts) n = int64_t(rng() % 3);
      a.update(l, counts);
    }
  const FrequencyModel b = a;
  const Ids ids = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<uint64_t> bytes(8);
  for (auto& x : bytes) x = 100 + rng() % 900;
  const PrefetchConfig c = config("cost", 0.0, 1ull << 20, Speculate::Idle);
  Ids prev;
  for (double free_ns = 0.0; free_ns < 40000.0; free_ns += 250.0) {
    const PrefetchCosts costs{2.0, 500.0, free_ns};
    const Ids pa = plan_prefetch(c, a, 1, ids, bytes, &a.last_active(0), costs);
    EXPECT_EQ(pa, plan_prefetch(c, b, 1, ids, bytes, &b.last_active(0), costs));
    ASSERT_GE(pa.size(), prev.size());
    EXPECT_TRUE(std::equal(prev.begin(), prev.end(), pa.begin())) << "free " << free_ns;
    prev = pa;
  }
  EXPECT_FALSE(prev.empty()) << "enough free time speculates";
}

}  // namespace
}  // namespace moezero::prefetch
