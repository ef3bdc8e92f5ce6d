// DenseKeep, the dense residency policy: first come first kept within the budget, only while a
// later micro-batch reuses the groups, nothing evicted, emptied in group order.
#include "zero/dense_keep.h"

#include <gtest/gtest.h>

namespace moezero {
namespace {

TEST(DenseKeep, KeepsInReleaseOrderWithinTheBudget) {
  bool reusable = true;
  DenseKeep keep(100, [&] { return reusable; });
  EXPECT_TRUE(keep.admit(7, 60, 0, 1.0).admitted);
  EXPECT_FALSE(keep.admit(3, 50, 0, 1.0).admitted);  // 110 > 100: refused, nothing evicted
  const CacheAdmit a = keep.admit(5, 40, 0, 1.0);
  EXPECT_TRUE(a.admitted);
  EXPECT_TRUE(a.evicted.empty());
  EXPECT_TRUE(keep.contains(7));
  EXPECT_FALSE(keep.contains(3));
  EXPECT_EQ(keep.lookup(7, 0), CacheLookup::Hit);
  EXPECT_EQ(keep.lookup(3, 0), CacheLookup::Miss);
  EXPECT_EQ(keep.counters().bytes_resident, 100u);
  EXPECT_EQ(keep.counters().refusals, 1u);
  EXPECT_EQ(keep.invalidate_all(), (std::vector<int>{5, 7}));  // group order
  EXPECT_FALSE(keep.contains(7));
  EXPECT_EQ(keep.counters().bytes_resident, 0u);
  // The budget is per step: after invalidate_all it is whole again.
  EXPECT_TRUE(keep.admit(3, 100, 1, 1.0).admitted);
}

TEST(DenseKeep, KeepsNothingForTheStepsLastMicroBatch) {
  bool reusable = false;
  DenseKeep keep(1000, [&] { return reusable; });
  EXPECT_FALSE(keep.admit(1, 10, 0, 1.0).admitted);
  reusable = true;
  EXPECT_TRUE(keep.admit(1, 10, 0, 1.0).admitted);
}

TEST(DenseKeep, AnEntryOfAnotherVersionIsStale) {
  DenseKeep keep(1000, [] { return true; });
  ASSERT_TRUE(keep.admit(1, 10, 0, 1.0).admitted);
  EXPECT_EQ(keep.lookup(1, 1), CacheLookup::Stale);
  EXPECT_FALSE(keep.contains(1));
  EXPECT_EQ(keep.counters().bytes_resident, 0u);
}

}  // namespace
}  // namespace moezero
