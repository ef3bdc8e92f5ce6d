// Stream/Event semantics of the device model on every backend that can run here:
// in-order execution, host run-ahead, cross-stream event waits, re-record, timing, and the
// sticky-error model (errors propagate along event edges; waiters never hang), and bounded
// host waits: fault injection through the device interface (a stream task that never ends, a
// peer that fails) on every backend that can run here (CUDA cases run in scripts/gpu_check.sh).
#include "core/device.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <latch>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "kernels/backend.h"

namespace moezero {
namespace {

using namespace std::chrono_literals;

TEST(CpuStream, RunsTasksInEnqueueOrder) {
  auto dev = make_cpu_device(0);
  Stream& s = dev->create_stream("compute");
  std::vector<int> seen;  // touched only by the worker until synchronize()
  for (int i = 0; i < 1000; ++i) s.enqueue_host([&seen, i] { seen.push_back(i); });
  s.synchronize();
  ASSERT_EQ(seen.size(), 1000u);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(seen[i], i);
}

TEST(CpuStream, HostRunsAheadOfWork) {
  auto dev = make_cpu_device(0);
  Stream& s = dev->default_stream();
  std::latch gate(1);
  std::atomic<bool> ran{false};
  s.enqueue_host([&] { gate.wait(); });
  s.enqueue_host([&] { ran = true; });
  // Enqueue returned although the first task is blocked: the host is ahead of the stream.
  EXPECT_FALSE(s.query());
  EXPECT_FALSE(ran.load());
  gate.count_down();
  s.synchronize();
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(s.query());
}

TEST(CpuStream, EventOrdersWorkAcrossStreams) {
  auto dev = make_cpu_device(0);
  Stream& producer = dev->create_stream("gather");
  Stream& consumer = dev->create_stream("compute");
  auto ready = dev->create_event();
  int value = 0;  // written by producer, read by consumer: the event is the only ordering
  int observed = -1;
  producer.enqueue_host([&] {
    std::this_thread::sleep_for(30ms);
    value = 42;
  });
  ready->record(producer);
  consumer.wait(*ready);
  consumer.enqueue_host([&] { observed = value; });
  consumer.synchronize();
  EXPECT_EQ(observed, 42);
}

TEST(CpuStream, WaitOnNeverRecordedEventIsNoOp) {
  auto dev = make_cpu_device(0);
  auto e = dev->create_event();
  EXPECT_TRUE(e->query());
  dev->default_stream().wait(*e);
  dev->default_stream().synchronize();
  e->synchronize();
}

TEST(CpuStream, WaitCapturesTheRecordCurrentAtWaitTime) {
  auto dev = make_cpu_device(0);
  Stream& a = dev->create_stream("a");
  Stream& b = dev->create_stream("b");
  auto e = dev->create_event();
  std::latch first_gate(1), second_gate(1);
  a.enqueue_host([&] { first_gate.wait(); });
  e->record(a);
  std::atomic<bool> b_ran{false};
  b.wait(*e);  // waits for the first record only
  b.enqueue_host([&] { b_ran = true; });
  a.enqueue_host([&] { second_gate.wait(); });
  e->record(a);  // re-record: must not delay b
  first_gate.count_down();
  b.synchronize();
  EXPECT_TRUE(b_ran.load());
  EXPECT_FALSE(e->query());  // the second record is still blocked
  second_gate.count_down();
  e->synchronize();
  EXPECT_TRUE(e->query());
}

TEST(CpuStream, EventElapsedTimeCoversTheWork) {
  auto dev = make_cpu_device(0);
  Stream& s = dev->default_stream();
  auto start = dev->create_event();
  auto stop = dev->create_event();
  start->record(s);
  s.enqueue_host([] { std::this_thread::sleep_for(20ms); });
  stop->record(s);
  stop->synchronize();
  EXPECT_GE(stop->elapsed_ms_since(*start), 19.0f);
}

TEST(CpuStream, ErrorIsStickyAndPropagatesAlongEvents) {
  auto dev = make_cpu_device(0);
  Stream& a = dev->create_stream("a");
  Stream& b = dev->create_stream("b");
  std::atomic<bool> later_ran{false}, dependent_ran{false};
  a.enqueue_host([] { MOEZERO_THROW("injected failure"); });
  a.enqueue_host([&] { later_ran = true; });
  auto e = dev->create_event();
  e->record(a);
  b.wait(*e);
  b.enqueue_host([&] { dependent_ran = true; });
  try {
    a.synchronize();
    FAIL() << "synchronize must rethrow the stream's error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("injected failure"), std::string::npos);
  }
  EXPECT_FALSE(later_ran.load());
  EXPECT_THROW(e->synchronize(), Error);  // the marker completed, carrying the error
  EXPECT_THROW(b.synchronize(), Error);   // the dependent stream inherited it, no hang
  EXPECT_FALSE(dependent_ran.load());
  EXPECT_THROW(a.check(), Error);  // still sticky
}

TEST(Backends, CudaSkipsWithReasonWhenUnavailable) {
  std::string why;
  if (!cuda_available(&why)) {
    EXPECT_FALSE(why.empty());
    EXPECT_THROW(make_cuda_device(0), Error);
    EXPECT_EQ(cuda_free_memory(0), 0u) << "no CUDA: free memory unknown";
    GTEST_SKIP() << "CUDA unavailable: " << why;
  }
  EXPECT_GT(cuda_free_memory(0), 0u) << "cudaMemGetInfo: the memory estimate's device limit";
  auto dev = make_cuda_device(0);
  Stream& s = dev->create_stream("compute");
  std::atomic<int> n{0};
  for (int i = 0; i < 10; ++i) s.enqueue_host([&n, i] { EXPECT_EQ(n.fetch_add(1), i); });
  s.synchronize();
  EXPECT_EQ(n.load(), 10);
}

// ---- Bounded host waits (Device, "Bounded host waits") ----------------------------------

// A stream task that blocks until released: the "kernel waiting for a dead peer".
struct StuckTask {
  std::mutex mu;
  std::condition_variable cv;
  bool released = false;
  void block() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return released; });
  }
  void release() {
    {
      std::lock_guard lock(mu);
      released = true;
    }
    cv.notify_all();
  }
};

std::string backend_name(DeviceKind k) { return device_kind_name(k); }

class HostWaits : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    std::string why;
    if (GetParam() == DeviceKind::Cuda && !cuda_available(&why))
      GTEST_SKIP() << "CUDA unavailable: " << why;
    dev = make_device(GetParam(), 0);
  }
  std::unique_ptr<Device> dev;
};

TEST_P(HostWaits, StuckStreamTimesOutNamingTheWaitAndWhatWasInFlight) {
  dev->set_host_wait_limit(150ms);
  int hook_calls = 0;
  dev->add_wait_expiry_hook([&] {
    ++hook_calls;
    return std::string("all_reduce on group [0,1] seq 7 (aborted)");
  });
  Stream& s = dev->create_stream("reduce");
  auto stuck = std::make_shared<StuckTask>();  // the task keeps it alive until it ends
  s.enqueue_host([stuck] { stuck->block(); });
  auto e = dev->create_event();
  e->record(s);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    s.synchronize();
    ADD_FAILURE() << "synchronize of a stuck stream returned";
  } catch (const TimeoutError& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("stream 'reduce'"), std::string::npos) << m;
    EXPECT_NE(m.find("comm.timeout_s"), std::string::npos) << m;
    EXPECT_NE(m.find("all_reduce on group [0,1] seq 7"), std::string::npos) << m;
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(waited, 0.14);
  EXPECT_LT(waited, 10.0);
  EXPECT_EQ(hook_calls, 1);
  EXPECT_THROW(e->synchronize(), TimeoutError);  // an event behind the stuck task: bounded too
  EXPECT_EQ(hook_calls, 2);
  stuck->release();  // the "peer" comes back: the stream drains and later waits succeed
  s.synchronize();
  e->synchronize();
}

TEST_P(HostWaits, AnotherRanksFailureEndsAnUnboundedWait) {
  // No limit (the default): only the abort ends the wait, with the failing rank's reason.
  Stream& s = dev->create_stream("compute");
  auto stuck = std::make_shared<StuckTask>();  // the task keeps it alive until it ends
  s.enqueue_host([stuck] { stuck->block(); });
  std::thread other([&] {
    std::this_thread::sleep_for(100ms);
    dev->abort_host_waits("rank 1 failed: boom");
  });
  try {
    s.synchronize();
    ADD_FAILURE() << "synchronize returned although the stream is stuck";
  } catch (const TimeoutError& err) {
    EXPECT_NE(std::string(err.what()).find("aborted (rank 1 failed: boom)"), std::string::npos)
        << err.what();
  }
  other.join();
  stuck->release();
  while (!s.query()) std::this_thread::sleep_for(1ms);  // the released task ends
  auto again = std::make_shared<StuckTask>();  // any later wait that would block fails at once
  s.enqueue_host([again] { again->block(); });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(s.synchronize(), TimeoutError) << "an aborted device stays aborted";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  again->release();
  while (!s.query()) std::this_thread::sleep_for(1ms);  // drained before the device goes
}

TEST_P(HostWaits, RemovedHooksAreNotCalledAndFastWaitsNeverExpire) {
  dev->set_host_wait_limit(100ms);
  int calls = 0;
  const int id = dev->add_wait_expiry_hook([&] {
    ++calls;
    return std::string("gone");
  });
  dev->remove_wait_expiry_hook(id);
  Stream& s = dev->create_stream("gather");
  for (int i = 0; i < 50; ++i) s.enqueue_host([] {});
  s.synchronize();                             // work that finishes is never cut short
  auto stuck = std::make_shared<StuckTask>();  // the task keeps it alive until it ends
  s.enqueue_host([stuck] { stuck->block(); });
  try {
    s.synchronize();
    ADD_FAILURE() << "no timeout";
  } catch (const TimeoutError& err) {
    EXPECT_EQ(std::string(err.what()).find("gone"), std::string::npos) << err.what();
  }
  EXPECT_EQ(calls, 0);
  stuck->release();
  s.synchronize();
}

INSTANTIATE_TEST_SUITE_P(Backends, HostWaits, ::testing::ValuesIn(compiled_backends()),
                         [](const auto& info) { return backend_name(info.param); });

}  // namespace
}  // namespace moezero
