// `moezero plan`'s recommendation (tools/plan_choice.h): the fastest that fits, unless rows tie
// within the measured steps' jitter, when the least memory of the tie wins.
#include "tools/plan_choice.h"

#include <gtest/gtest.h>

namespace moezero::cli {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(PlanChoice, TheFastestThatFitsWithoutJitter) {
  const std::optional<PlanChoice> c = choose_plan({{"z2", 100.0, 0.0, 40 * kGiB, true},
                                                   {"z3", 100.5, 0.0, 10 * kGiB, true},
                                                   {"z1", 90.0, 0.0, 90 * kGiB, false}});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->fastest, "z2");
  EXPECT_EQ(c->recommended, "z2");
  EXPECT_EQ(c->tied, (std::vector<std::string>{"z2"}));
}

TEST(PlanChoice, RowsWithinTheJitterTieAndTheLeastMemoryWins) {
  // moe13b-like: cache=100 1.8 % faster than z2, inside z2's 2 % jitter.
  const std::optional<PlanChoice> c = choose_plan({{"z2", 11850.0, 0.02, 60 * kGiB, true},
                                                   {"cache=100", 11633.0, 0.005, 30 * kGiB, true},
                                                   {"z3", 13000.0, 0.01, 5 * kGiB, true}});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->fastest, "cache=100");
  EXPECT_EQ(c->tied, (std::vector<std::string>{"cache=100", "z2"}));
  EXPECT_EQ(c->recommended, "cache=100");  // the least memory of the two
  // The same with the memory the other way round: the slower row is recommended.
  const std::optional<PlanChoice> d = choose_plan(
      {{"z2", 11850.0, 0.02, 20 * kGiB, true}, {"cache=100", 11633.0, 0.0, 30 * kGiB, true}});
  ASSERT_TRUE(d);
  EXPECT_EQ(d->fastest, "cache=100");
  EXPECT_EQ(d->recommended, "z2");
  // Beyond both jitters: no tie.
  const std::optional<PlanChoice> e = choose_plan(
      {{"z2", 11850.0, 0.01, 20 * kGiB, true}, {"cache=100", 11633.0, 0.0, 30 * kGiB, true}});
  ASSERT_TRUE(e);
  EXPECT_EQ(e->recommended, "cache=100");
  EXPECT_EQ(e->tied.size(), 1u);
}

TEST(PlanChoice, EqualTimesGoToTheFirstListedAndNothingFitsIsNone) {
  const std::optional<PlanChoice> c =
      choose_plan({{"a", 10.0, 0.0, 5, true}, {"b", 10.0, 0.0, 5, true}});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->fastest, "a");
  EXPECT_EQ(c->recommended, "a");
  EXPECT_EQ(c->tied, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(choose_plan({{"a", 10.0, 0.0, 5, false}}));
  EXPECT_FALSE(choose_plan({}));
}

TEST(PlanChoice, JitterIsMaxOverMinOfTheSteps) {
  EXPECT_DOUBLE_EQ(step_jitter({100.0, 125.0}), 0.25);
  EXPECT_DOUBLE_EQ(step_jitter({125.0, 100.0, 110.0}), 0.25);
  EXPECT_DOUBLE_EQ(step_jitter({100.0}), 0.0);
  EXPECT_DOUBLE_EQ(step_jitter({}), 0.0);
}

}  // namespace

// train.memory_limit, when set and below the GPU's memory, is what a peak must fit.
TEST(PlanChoice, MemoryIsTheGpusOrTheConfigsSmallerLimit) {
  const uint64_t gpu = 80ull << 30;
  EXPECT_EQ(plan_memory(gpu, 0).bytes, gpu);
  EXPECT_FALSE(plan_memory(gpu, 0).from_memory_limit);
  EXPECT_EQ(plan_memory(gpu, 70ull << 30).bytes, 70ull << 30);
  EXPECT_TRUE(plan_memory(gpu, 70ull << 30).from_memory_limit);
  EXPECT_EQ(plan_memory(gpu, 100ull << 30).bytes, gpu);  // the GPU has no more
  EXPECT_FALSE(plan_memory(gpu, 100ull << 30).from_memory_limit);
}

}  // namespace moezero::cli
