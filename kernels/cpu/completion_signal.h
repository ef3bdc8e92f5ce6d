// kernels/cpu/completion_signal.h — how a host-thread stream (CpuStream, SimStream) tells
// synchronize() that its tasks are done: the count of completed tasks, and a condition variable
// notified only when that count reaches the smallest target a waiter registered, not after every
// task (each notify with a sleeping waiter is a futex wake on the worker and a context switch on
// the waiter, for nothing until the target).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace moezero::cpu {

class CompletionSignal {
 public:
  uint64_t completed() const { return completed_; }  // under the stream's lock

  // Under the stream's lock: one more task done. True when the caller must notify() (after
  // unlocking): a waiter's target is reached.
  bool complete_one() {
    ++completed_;
    if (completed_ < wake_at_) return false;
    wake_at_ = UINT64_MAX;  // the woken waiters that are not done register their target again
    return true;
  }
  void notify() { cv_.notify_all(); }

  // With `lock` (the stream's) held: waits until completed() >= target; every `poll` without
  // getting there calls on_poll() with the lock released (it may throw).
  template <typename F>
  void wait_until(std::unique_lock<std::mutex>& lock, uint64_t target,
                  std::chrono::milliseconds poll, F&& on_poll) {
    while (completed_ < target) {
      wake_at_ = std::min(wake_at_, target);
      if (cv_.wait_for(lock, poll) == std::cv_status::timeout && completed_ < target) {
        lock.unlock();
        on_poll();
        lock.lock();
      }
    }
  }

 private:
  std::condition_variable cv_;
  uint64_t completed_ = 0;
  uint64_t wake_at_ = UINT64_MAX;
};

}  // namespace moezero::cpu
