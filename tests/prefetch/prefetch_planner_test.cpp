// PrefetchPlanner: the one object that answers the dense recorded order (per channel), the
// expert plan before routing and backward's exact order.
#include "prefetch/prefetch_planner.h"

#include <gtest/gtest.h>

namespace moezero::prefetch {
namespace {

using Ids = std::vector<int>;

FrequencyModel graded_model() {  // probabilities {1, 0.5, 0.25, 0.125}
  FrequencyModel m(1, 4, 0.5);
  m.update(0, std::vector<int64_t>{1, 1, 1, 0});
  m.update(0, std::vector<int64_t>{1, 1, 0, 0});
  m.update(0, std::vector<int64_t>{1, 0, 0, 0});
  return m;
}

PrefetchConfig with(const std::string& policy, int64_t lookahead = 1) {
  PrefetchConfig c;
  c.policy = policy;
  c.lookahead_layers = lookahead;
  c.min_probability = 0.3;
  c.budget_bytes = 1000;
  return c;
}

TEST(PrefetchPlanner, PlansExpertsWithTheConfiguredPolicy) {
  const FrequencyModel m = graded_model();
  const Ids candidates = {3, 1, 2, 0};
  const std::vector<uint64_t> bytes = {10, 10, 10, 10};
  const ExpertPlanQuery q{0, candidates, bytes, nullptr, {}};
  const PrefetchPlanner freq(with("frequency"), &m, PrefetchCosts{});
  EXPECT_TRUE(freq.plans_experts());
  EXPECT_EQ(freq.expert_plan(q), (Ids{0, 1}));  // p >= 0.3, likeliest first
  EXPECT_EQ(PrefetchPlanner(with("all"), &m, {}).expert_plan(q), (Ids{0, 1, 2, 3}));
  // Nothing ahead: policy none, no lookahead, or no frequency model.
  for (const PrefetchPlanner& p :
       {PrefetchPlanner(with("none"), &m, {}), PrefetchPlanner(with("all", 0), &m, {}),
        PrefetchPlanner(with("all"), nullptr, {})}) {
    EXPECT_FALSE(p.plans_experts());
    EXPECT_TRUE(p.expert_plan(q).empty());
  }
}

TEST(PrefetchPlanner, BackwardIsExactUnlessThePolicyIsNone) {
  const Ids local = {6, 4, 5};
  const std::vector<char> active = {0, 0, 0, 0, 1, 0, 1};
  const PrefetchPlanner cost(with("cost"), nullptr, {});
  EXPECT_TRUE(cost.exact_backward());
  EXPECT_EQ(cost.backward_order(local, active), (Ids{4, 6}));
  EXPECT_FALSE(PrefetchPlanner(with("none"), nullptr, {}).exact_backward());
}

TEST(PrefetchPlanner, KeepsOneRecordedOrderPerChannel) {
  PrefetchPlanner p;
  const auto ahead = [&p] {
    std::vector<Ids> out;
    p.each_dense_ahead(
        [&](std::span<const int> next) { out.emplace_back(next.begin(), next.end()); });
    return out;
  };
  for (int g : {0, 1, 2}) p.dense_acquired("b/gather", g);
  for (int g : {7, 8}) p.dense_acquired("a/gather", g);
  EXPECT_TRUE(ahead().empty());  // recording
  p.end_step();
  EXPECT_EQ(p.dense_orders().size(), 2u);
  EXPECT_EQ(p.dense_orders()[0].first, "a/gather");  // channel-key order
  EXPECT_EQ(ahead(), (std::vector<Ids>{{7, 8}, {0, 1, 2}}));
  p.dense_acquired("b/gather", 0);
  EXPECT_EQ(ahead(), (std::vector<Ids>{{7, 8}, {1, 2}}));
  p.dense_acquired("a/gather", 8);  // left a's order: no prefetch there until the step ends
  EXPECT_EQ(ahead(), (std::vector<Ids>{{1, 2}}));
  PrefetchPlanner restored;
  restored.set_dense_orders(p.dense_orders());
  EXPECT_EQ(restored.dense_orders(), p.dense_orders());
}

}  // namespace
}  // namespace moezero::prefetch
