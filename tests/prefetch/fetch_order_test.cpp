// FetchOrder (prefetch/fetch_order.cpp): the recorded dense prefetch order of one communicator.
// Every state transition: record on the first step, replay when the order repeats (ahead()
// walks forward), invalidate when a step leaves the order, re-record that step's order, and
// replay a restored (checkpointed) order from the start of the next step.
#include "prefetch/fetch_order.h"

#include <gtest/gtest.h>

#include <vector>

namespace moezero {
namespace {

using State = FetchOrder::State;

std::vector<int> ahead_of(const FetchOrder& o) {
  const auto a = o.ahead();
  return {a.begin(), a.end()};
}

// Acquires `groups` in order and ends the step.
void run_step(FetchOrder& o, const std::vector<int>& groups) {
  for (int g : groups) o.on_acquire(g);
  o.end_step();
}

TEST(FetchOrder, RecordsOnTheFirstStep) {
  FetchOrder o;
  EXPECT_EQ(o.state(), State::Recording);
  EXPECT_TRUE(o.ahead().empty());
  EXPECT_FALSE(o.on_acquire(3));  // nothing recorded to match
  EXPECT_FALSE(o.on_acquire(1));
  EXPECT_EQ(o.state(), State::Recording);  // recording is not invalidated
  EXPECT_TRUE(o.ahead().empty());
  EXPECT_TRUE(o.recorded().empty());  // only a completed step is recorded
  o.end_step();
  EXPECT_EQ(o.state(), State::Replaying);
  EXPECT_EQ(o.recorded(), (std::vector<int>{3, 1}));
  EXPECT_EQ(ahead_of(o), (std::vector<int>{3, 1}));
}

TEST(FetchOrder, ReplaysWhenTheOrderRepeats) {
  FetchOrder o;
  run_step(o, {0, 4, 2});
  EXPECT_EQ(ahead_of(o), (std::vector<int>{0, 4, 2}));
  EXPECT_TRUE(o.on_acquire(0));
  EXPECT_EQ(ahead_of(o), (std::vector<int>{4, 2}));
  EXPECT_TRUE(o.on_acquire(4));
  EXPECT_EQ(ahead_of(o), (std::vector<int>{2}));
  EXPECT_TRUE(o.on_acquire(2));
  EXPECT_EQ(o.state(), State::Replaying);
  EXPECT_TRUE(o.ahead().empty());  // at the end of the order
  o.end_step();
  EXPECT_EQ(o.state(), State::Replaying);
  EXPECT_EQ(o.recorded(), (std::vector<int>{0, 4, 2}));
  EXPECT_EQ(ahead_of(o), (std::vector<int>{0, 4, 2}));  // from the start again
}

TEST(FetchOrder, InvalidatedWhenAStepLeavesTheOrder) {
  FetchOrder o;
  run_step(o, {0, 1, 2});
  EXPECT_TRUE(o.on_acquire(0));
  EXPECT_FALSE(o.on_acquire(2));  // 1 was next
  EXPECT_EQ(o.state(), State::Invalidated);
  EXPECT_TRUE(o.ahead().empty());
  // Even an acquire that happens to be the recorded next one does not resume the replay.
  EXPECT_FALSE(o.on_acquire(1));
  EXPECT_EQ(o.state(), State::Invalidated);
  EXPECT_TRUE(o.ahead().empty());
  EXPECT_EQ(o.recorded(), (std::vector<int>{0, 1, 2}));  // kept until the step ends
}

TEST(FetchOrder, AcquireBeyondTheRecordedOrderInvalidates) {
  FetchOrder o;
  run_step(o, {5});
  EXPECT_TRUE(o.on_acquire(5));
  EXPECT_FALSE(o.on_acquire(6));
  EXPECT_EQ(o.state(), State::Invalidated);
}

TEST(FetchOrder, ReRecordsTheStepThatLeftTheOrder) {
  FetchOrder o;
  run_step(o, {0, 1, 2});
  run_step(o, {0, 2, 1, 3});  // invalidated at its second acquire
  EXPECT_EQ(o.state(), State::Replaying);
  EXPECT_EQ(o.recorded(), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_TRUE(o.on_acquire(0));
  EXPECT_TRUE(o.on_acquire(2));
  EXPECT_EQ(ahead_of(o), (std::vector<int>{1, 3}));
}

TEST(FetchOrder, AStepWithoutAcquiresRecordsNothing) {
  FetchOrder o;
  run_step(o, {0, 1});
  o.end_step();
  EXPECT_EQ(o.state(), State::Recording);
  EXPECT_TRUE(o.recorded().empty());
  EXPECT_TRUE(o.ahead().empty());
}

TEST(FetchOrder, RestoredOrderReplaysFromTheStart) {
  FetchOrder saved;
  run_step(saved, {7, 3, 9});
  FetchOrder o = FetchOrder::restored(saved.recorded());
  EXPECT_EQ(o.state(), State::Replaying);
  EXPECT_EQ(o.recorded(), (std::vector<int>{7, 3, 9}));
  EXPECT_EQ(ahead_of(o), (std::vector<int>{7, 3, 9}));
  EXPECT_TRUE(o.on_acquire(7));
  EXPECT_EQ(ahead_of(o), (std::vector<int>{3, 9}));
  EXPECT_FALSE(o.on_acquire(9));
  EXPECT_EQ(o.state(), State::Invalidated);

  FetchOrder empty = FetchOrder::restored({});
  EXPECT_EQ(empty.state(), State::Recording);
  EXPECT_TRUE(empty.ahead().empty());
}

}  // namespace
}  // namespace moezero
