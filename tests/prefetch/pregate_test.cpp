// tests/prefetch/pregate_test.cpp — prefetch.pregate's model (prefetch/pregate.h): lookahead
// counts valid for their micro-batch only, the hit/miss calibration's exact arithmetic, and the
// expert plan ranking and pricing given probabilities instead of the frequency model's guess.
#include "prefetch/pregate.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "prefetch/prefetch_policy.h"

namespace moezero::prefetch {
namespace {

TEST(Pregate, CountsBelongToTheirMicroBatch) {
  PregateModel m(3, 4, 0.5);
  EXPECT_EQ(m.gate_group(1), -1);
  m.set_gate_group(1, 7);
  EXPECT_EQ(m.gate_group(1), 7);
  EXPECT_EQ(m.counts(1, 0), nullptr);
  EXPECT_EQ(m.probability(1, 0, 0), -1.0);  // none: the caller uses the frequency model
  const std::vector<float> c = {3, 0, 1, 0};
  m.set_counts(1, 5, c);
  ASSERT_NE(m.counts(1, 5), nullptr);
  EXPECT_EQ(*m.counts(1, 5), c);
  EXPECT_EQ(m.counts(1, 4), nullptr);  // another micro-batch's plan never reads them
  EXPECT_EQ(m.counts(2, 5), nullptr);
  EXPECT_EQ(m.probability(1, 0, 5), 0.5);  // the priors
  EXPECT_EQ(m.probability(1, 1, 5), 0.5);
  EXPECT_THROW(m.set_counts(0, 5, c), Error);                         // no layer before 0
  EXPECT_THROW(m.set_counts(1, 5, std::vector<float>{1, 2}), Error);  // wrong size
  EXPECT_THROW(m.set_gate_group(3, 1), Error);                        // out of range
  EXPECT_THROW(PregateModel(0, 4, 0.5), Error);
  EXPECT_THROW(PregateModel(2, 4, 1.0), Error);
}

// d = 0.5, predicted {0, 2}, active {0, 1}: in expert order, hit <- 0.5 * 0.5 + 0.5 * 1 = 0.75
// (expert 0), then 0.5 * 0.75 + 0 = 0.375 (expert 2); miss <- 0.5 * 0.5 + 0.5 = 0.75 (expert 1),
// then 0.375 (expert 3).
TEST(Pregate, ObserveCalibratesAndConsumesTheCounts) {
  PregateModel m(2, 4, 0.5);
  m.set_counts(1, 9, std::vector<float>{2, 0, 1, 0});
  const std::vector<float> kept = {5, 1, 0, 0};
  const PregateModel::Outcome o = m.observe(1, 9, kept);
  EXPECT_EQ(o.predicted, 2u);
  EXPECT_EQ(o.hits, 1u);
  EXPECT_EQ(o.active, 2u);
  EXPECT_EQ(m.hit_rate(1), 0.375);
  EXPECT_EQ(m.miss_rate(1), 0.375);
  EXPECT_EQ(m.hit_rate(0), 0.5);       // layer 0 untouched
  EXPECT_EQ(m.counts(1, 9), nullptr);  // consumed: an evaluation pass of the same index has none
  const PregateModel::Outcome none = m.observe(1, 9, kept);
  EXPECT_EQ(none.predicted + none.hits + none.active, 0u);
  EXPECT_EQ(m.hit_rate(1), 0.375);  // nothing learned without counts
  m.set_counts(1, 10, std::vector<float>{1, 1, 1, 1});
  m.observe(1, 10, std::vector<float>{1, 1, 1, 1});
  // Four hits: 0.375 -> 0.6875 -> 0.84375 -> 0.921875 -> 0.9609375.
  EXPECT_EQ(m.hit_rate(1), 0.9609375);
  m.set_counts(1, 11, std::vector<float>{1, 0, 0, 0});
  EXPECT_EQ(m.probability(1, 0, 11), 0.9609375);
  EXPECT_EQ(m.probability(1, 3, 11), 0.375);
}

PrefetchConfig plan_config(const std::string& policy, uint64_t budget_bytes) {
  PrefetchConfig c;
  c.policy = policy;
  c.min_probability = 0.1;
  c.budget_bytes = budget_bytes;
  c.speculate = Speculate::Priced;
  return c;
}

// Cold frequency model: every expert at its prior 1.0, so the frequency ranking is by id. Given
// probabilities reorder it, and the floor applies to them.
TEST(Pregate, GivenProbabilitiesRankThePlan) {
  const FrequencyModel cold(1, 4, 0.9);
  const std::vector<int> ids = {0, 1, 2, 3};
  const std::vector<uint64_t> bytes = {10, 10, 10, 10};
  EXPECT_EQ(plan_prefetch(plan_config("frequency", 20), cold, 0, ids, bytes, nullptr),
            (std::vector<int>{0, 1}));
  const std::vector<double> given = {0.2, 0.05, 0.9, 0.6};
  EXPECT_EQ(
      plan_prefetch(plan_config("frequency", 20), cold, 0, ids, bytes, nullptr, {}, nullptr, given),
      (std::vector<int>{2, 3}));
  EXPECT_EQ(plan_prefetch(plan_config("frequency", 100), cold, 0, ids, bytes, nullptr, {}, nullptr,
                          given),
            (std::vector<int>{2, 3, 0}));  // 0.05 is below the floor 0.1
  EXPECT_THROW(plan_prefetch(plan_config("frequency", 20), cold, 0, ids, bytes, nullptr, {},
                             nullptr, std::vector<double>{0.5}),
               Error);
  EXPECT_THROW(plan_prefetch(plan_config("frequency", 20), cold, 0, ids, bytes, nullptr, {},
                             nullptr, std::vector<double>{0.5, 0.5, 1.5, 0.5}),
               Error);
}

// The cost policy prices a given probability as it is: with no free link time (priced), a gather
// pays iff p > 1/2, so 0.6 is taken and the walk stops at 0.4.
TEST(Pregate, CostPolicyPricesGivenProbabilities) {
  FrequencyModel m(1, 3, 0.5);
  for (int i = 0; i < 8; ++i) m.update(0, std::vector<int64_t>{1, 1, 1});  // evidence: all 1.0
  PrefetchCosts costs;
  costs.link_ns_per_byte = 1.0;
  const std::vector<int> ids = {0, 1, 2};
  const std::vector<uint64_t> bytes = {10, 10, 10};
  EXPECT_EQ(plan_prefetch(plan_config("cost", 100), m, 0, ids, bytes, nullptr, costs).size(), 3u);
  PlanNotes notes;
  EXPECT_EQ(plan_prefetch(plan_config("cost", 100), m, 0, ids, bytes, nullptr, costs, &notes,
                          std::vector<double>{0.4, 0.6, 0.3}),
            (std::vector<int>{1}));
  EXPECT_EQ(notes.gated, 2u);
}

}  // namespace
}  // namespace moezero::prefetch
