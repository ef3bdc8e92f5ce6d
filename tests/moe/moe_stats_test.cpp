// tests/moe/moe_stats_test.cpp — MoeStats (moe/moe_stats.h): add_layer() and clear() follow the
// one field list, each field as its shape says (per expert, per bucket, per layer, kept, per
// step, per forward), and the list names every field once.
#include "moe/moe_stats.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace moezero::moe {
namespace {

TEST(MoeStats, AddLayerSizesEveryFieldByItsShape) {
  MoeStats s;
  s.add_layer(1, 8);  // layer 0 comes later: the lists grow to layer 1 at once
  s.add_layer(0, 4);
  ASSERT_EQ(s.tokens_per_expert.size(), 2u);
  EXPECT_EQ(s.tokens_per_expert[0].size(), 4u);
  EXPECT_EQ(s.tokens_per_expert[1].size(), 8u);
  EXPECT_EQ(s.selected_per_expert[1].size(), 8u);
  EXPECT_EQ(s.a2a_tokens_in[1].size(), 8u);
  EXPECT_EQ(s.a2a_tokens_out[0].size(), 4u);
  EXPECT_EQ(s.calibration_count.size(), 2u);
  EXPECT_EQ(s.calibration_count[0].size(), MoeStats::kCalibrationBuckets);
  EXPECT_EQ(s.calibration_active[1].size(), MoeStats::kCalibrationBuckets);
  EXPECT_EQ(s.brier_sum.size(), 2u);
  EXPECT_EQ(s.brier_count.size(), 2u);
  EXPECT_EQ(s.active_experts.size(), 2u);
  EXPECT_EQ(s.expert_bias.size(), 2u);
  EXPECT_TRUE(s.expert_bias[1].empty());  // filled by the layer when the bias is on
  EXPECT_TRUE(s.local_counts.empty());
}

TEST(MoeStats, ClearResetsTheStepsFieldsAndKeepsTheLastValues) {
  MoeStats s;
  s.add_layer(0, 2);
  s.record_local_counts = true;
  s.tokens_per_expert[0] = {3, 4};
  s.selected_per_expert[0] = {5, 6};
  s.a2a_tokens_in[0] = {1, 2};
  s.a2a_tokens_out[0] = {2, 1};
  s.calibration_count[0][9] = 7;
  s.calibration_active[0][9] = 6;
  s.brier_sum[0] = 0.5;
  s.brier_count[0] = 2;
  s.local_counts.push_back({1, 1});
  s.a2a_bytes = 10;
  s.active_layer_experts = 2;
  s.layer_expert_slots = 2;
  s.speculation_gated = 3;
  s.pregate_predicted = 4;
  s.pregate_hits = 2;
  s.pregate_active = 5;
  s.active_experts[0] = 2;
  s.expert_bias[0] = {0.25f, -0.25f};
  s.clear();
  EXPECT_EQ(s.tokens_per_expert[0], (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(s.selected_per_expert[0], (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(s.a2a_tokens_in[0], (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(s.a2a_tokens_out[0], (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(s.calibration_count[0], std::vector<int64_t>(MoeStats::kCalibrationBuckets, 0));
  EXPECT_EQ(s.calibration_active[0], std::vector<int64_t>(MoeStats::kCalibrationBuckets, 0));
  EXPECT_EQ(s.brier_sum[0], 0.0);
  EXPECT_EQ(s.brier_count[0], 0);
  EXPECT_TRUE(s.local_counts.empty());
  EXPECT_EQ(s.a2a_bytes, 0u);
  EXPECT_EQ(s.active_layer_experts, 0u);
  EXPECT_EQ(s.layer_expert_slots, 0u);
  EXPECT_EQ(s.speculation_gated, 0u);
  EXPECT_EQ(s.pregate_predicted + s.pregate_hits + s.pregate_active, 0u);
  // Kept: the last micro-batch's active count, the bias the step routed with, the setting.
  EXPECT_EQ(s.active_experts[0], 2);
  EXPECT_EQ(s.expert_bias[0], (std::vector<float>{0.25f, -0.25f}));
  EXPECT_TRUE(s.record_local_counts);
}

TEST(MoeStats, TheFieldListNamesEachFieldOnce) {
  std::set<std::string> names;
  size_t n = 0;
#define MOEZERO_TEST_NAME(name, type, shape) \
  names.insert(#name);                       \
  ++n;
  MOEZERO_MOE_STATS_FIELDS(MOEZERO_TEST_NAME)
#undef MOEZERO_TEST_NAME
  EXPECT_EQ(names.size(), n);
  EXPECT_EQ(n, 18u);  // a new field: add it to the tests above too
}

}  // namespace
}  // namespace moezero::moe
