// tests/comm/process_groups_test.cpp — world / EP / EDP groups and their validation.
#include "core/process_groups.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace moezero {
namespace {

std::vector<std::vector<int>> ranks_of(const std::vector<ProcessGroup>& gs) {
  std::vector<std::vector<int>> out;
  for (const auto& g : gs) out.push_back(g.ranks);
  return out;
}

TEST(ProcessGroups, World4Ep2) {
  ProcessGroups g(4, 2, 8);
  EXPECT_EQ(g.world().ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ranks_of(g.ep_groups()), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(ranks_of(g.edp_groups()), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  EXPECT_EQ(g.ep_group_of(3).name, "ep1");
  EXPECT_EQ(g.edp_group_of(3).name, "edp1");
  EXPECT_EQ(g.ep_rank(3), 1);
  EXPECT_EQ(g.edp_rank(3), 1);
  EXPECT_EQ(g.experts_per_rank(), 4);
  EXPECT_EQ(g.first_local_expert(1), 4);
  EXPECT_EQ(g.ep_owner_of_expert(5), 1);
  EXPECT_EQ(g.ep_group_of(2).str(), "ep1{2,3}");
}

TEST(ProcessGroups, World8Ep4) {
  ProcessGroups g(8, 4, 8);
  EXPECT_EQ(ranks_of(g.ep_groups()), (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(ranks_of(g.edp_groups()),
            (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(g.edp_size(), 2);
  for (int r = 0; r < 8; ++r) {
    EXPECT_TRUE(g.ep_group_of(r).contains(r));
    EXPECT_TRUE(g.edp_group_of(r).contains(r));
    EXPECT_EQ(g.ep_group_of(r).group_rank(r), g.ep_rank(r));
    EXPECT_EQ(g.edp_group_of(r).group_rank(r), g.edp_rank(r));
  }
}

TEST(ProcessGroups, World6Ep3) {
  ProcessGroups g(6, 3, 3);
  EXPECT_EQ(ranks_of(g.ep_groups()), (std::vector<std::vector<int>>{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(ranks_of(g.edp_groups()), (std::vector<std::vector<int>>{{0, 3}, {1, 4}, {2, 5}}));
  EXPECT_EQ(g.experts_per_rank(), 1);
}

TEST(ProcessGroups, Ep1AndEpWorldAreTheExtremes) {
  ProcessGroups dp(4, 1, 2);  // pure data parallel: EP groups are single ranks
  EXPECT_EQ(dp.ep_groups().size(), 4u);
  EXPECT_EQ(dp.edp_groups()[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  ProcessGroups ep(4, 4, 4);  // pure expert parallel: EDP groups are single ranks
  EXPECT_EQ(ep.edp_groups().size(), 4u);
}

void expect_error(int world, int ep, int experts, const std::string& needle) {
  try {
    ProcessGroups g(world, ep, experts);
    FAIL() << "expected an error for (" << world << ", " << ep << ", " << experts << ")";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find(needle), std::string::npos) << e.what();
  }
}

TEST(ProcessGroups, InvalidConfigurationsNameTheValues) {
  expect_error(6, 4, 8, "ep_size 4 does not divide the world size 6");
  expect_error(4, 2, 3, "num_experts 3 is not divisible by ep_size 2");
  expect_error(4, 0, 4, "ep_size must be >= 1, got 0");
  expect_error(0, 1, 4, "world size must be >= 1, got 0");
  expect_error(4, 2, 0, "num_experts must be >= 1, got 0");
}

TEST(ProcessGroups, OutOfRangeRanksAndExperts) {
  ProcessGroups g(4, 2, 4);
  EXPECT_THROW(g.ep_group_of(4), Error);
  EXPECT_THROW(g.edp_rank(-1), Error);
  EXPECT_THROW(g.ep_owner_of_expert(4), Error);
  EXPECT_THROW(g.world().group_rank(7), Error);
}

// hpZ's secondary partitions: blocks of k consecutive ranks; a group's members in one.
TEST(ProcessGroups, SecondaryPartitions) {
  const ProcessGroups g(8, 2, 4);  // EDP {0,2,4,6} {1,3,5,7}
  const ProcessGroup w = g.world();
  EXPECT_EQ(secondary_partition_of(w, 5, 4).ranks, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(secondary_partition_of(w, 5, 4).name, "world.hpz1");
  EXPECT_EQ(secondary_partition_of(g.edp_groups()[1], 5, 4).ranks, (std::vector<int>{5, 7}));
  EXPECT_EQ(secondary_partition_of(g.edp_groups()[0], 2, 2).ranks, (std::vector<int>{2}));
  EXPECT_EQ(secondary_partition_members(w, 4), 4);
  EXPECT_EQ(secondary_partition_members(g.edp_groups()[0], 4), 2);
  EXPECT_EQ(secondary_partition_members(g.edp_groups()[0], 2), 1);  // one rank per partition
  EXPECT_EQ(secondary_partition_members(g.edp_groups()[0], 8), 4);
  // World 12, EP 4: EDP {0,4,8} has 2 ranks in {0..5} and 1 in {6..11}.
  EXPECT_EQ(secondary_partition_members(ProcessGroups(12, 4, 4).edp_groups()[0], 6), 0);
  EXPECT_THROW(secondary_partition_of(g.edp_groups()[0], 1, 2), Error);  // not a member
}

}  // namespace
}  // namespace moezero
