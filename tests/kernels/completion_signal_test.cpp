// tests/kernels/completion_signal_test.cpp — the host streams' completion signal: waiters wake
// when their target is reached (several, with different targets, at once), the worker notifies
// only at registered targets (not after every task), and a wait that never gets there polls.
#include "kernels/cpu/completion_signal.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace moezero::test {
namespace {

using namespace std::chrono_literals;

TEST(CompletionSignal, WaitersWakeAtTheirTargetsAndTheWorkerRarelyNotifies) {
  std::mutex mu;
  cpu::CompletionSignal sig;
  constexpr uint64_t kTasks = 400;
  std::vector<uint64_t> seen(3, 0);
  std::vector<std::thread> waiters;
  const uint64_t targets[] = {100, 250, kTasks};
  for (int w = 0; w < 3; ++w) {
    waiters.emplace_back([&, w] {
      std::unique_lock lock(mu);
      sig.wait_until(lock, targets[w], 1000ms, [] { FAIL() << "a waiter polled (timed out)"; });
      seen[static_cast<size_t>(w)] = sig.completed();
    });
  }
  std::this_thread::sleep_for(20ms);  // the waiters register first
  int notifies = 0;
  for (uint64_t t = 0; t < kTasks; ++t) {
    bool wake = false;
    {
      std::lock_guard lock(mu);
      wake = sig.complete_one();
    }
    if (wake) {
      ++notifies;
      sig.notify();
    }
    if (t % 50 == 0) std::this_thread::sleep_for(1ms);
  }
  for (auto& t : waiters) t.join();
  for (int w = 0; w < 3; ++w) EXPECT_GE(seen[static_cast<size_t>(w)], targets[w]) << w;
  // One notify per target reached (plus a few when a woken waiter re-registers late), never one
  // per task.
  EXPECT_GE(notifies, 1);
  EXPECT_LE(notifies, 12) << "the worker notified " << notifies << " times for " << kTasks
                          << " tasks";
  std::unique_lock lock(mu);
  int polls = 0;
  sig.wait_until(lock, kTasks, 1ms, [&] { ++polls; });  // already there: returns at once
  EXPECT_EQ(polls, 0);
}

TEST(CompletionSignal, AWaitThatNeverGetsThereCallsItsPollWithoutTheLock) {
  std::mutex mu;
  cpu::CompletionSignal sig;
  std::unique_lock lock(mu);
  int polls = 0;
  EXPECT_THROW(sig.wait_until(lock, 1, 2ms,
                              [&] {
                                EXPECT_TRUE(mu.try_lock()) << "polled with the lock held";
                                mu.unlock();
                                if (++polls == 3) throw std::runtime_error("expired");
                              }),
               std::runtime_error);
  EXPECT_EQ(polls, 3);
}

}  // namespace
}  // namespace moezero::test
