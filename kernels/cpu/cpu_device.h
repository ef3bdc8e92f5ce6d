// kernels/cpu/cpu_device.h — the CPU backend of the device model (core/device.h).
//
// CpuStream: one worker thread with a FIFO queue; tasks run in enqueue order. The host only
// enqueues, so it runs ahead of the work exactly as with a CUDA stream.
// CpuEvent: each record() creates a fresh completion state that a marker task on the stream
// completes (with a timestamp, or with the stream's error); waits capture the state current
// at wait() time, so re-recording never disturbs earlier waits (CUDA semantics).
// Error model: a task that throws stores the stream's sticky error; later tasks are skipped,
// but markers (events) still complete — carrying the error, so every waiter wakes and the
// error propagates along event edges into dependent streams.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/ops.h"
#include "kernels/cpu/completion_signal.h"

namespace moezero::cpu {

class CpuDevice;

// Completion state of one record() of an event.
struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::chrono::steady_clock::time_point time;
  std::exception_ptr error;

  void complete(std::exception_ptr err);
  void wait();  // blocks until done
  // Blocks until done or `timeout` passed; true when done.
  bool wait_for(std::chrono::milliseconds timeout);
};

class CpuStream final : public Stream {
 public:
  CpuStream(CpuDevice& device, std::string name);
  ~CpuStream() override;

  Device& device() const override;
  void enqueue_host(std::function<void()> fn) override;
  void wait(const Event& event) override;
  void synchronize() override;
  bool query() override;
  void check() override;

  // Enqueues a marker that completes `state` when the stream reaches it (runs even after an
  // error, carrying that error).
  void enqueue_marker(std::shared_ptr<EventState> state);

 private:
  struct Task {
    std::function<void()> fn;
    std::shared_ptr<EventState> marker;  // set for markers (always run)
  };
  void push(Task t);
  void run();

  CpuDevice& device_;
  std::mutex mu_;
  std::condition_variable cv_work_;
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0;
  CompletionSignal done_;  // guarded by mu_
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

class CpuEvent final : public Event {
 public:
  explicit CpuEvent(CpuDevice& device) : device_(device) {}
  void record(Stream& stream) override;
  bool query() const override;
  void synchronize() const override;
  float elapsed_ms_since(const Event& start) const override;

  // The state of the latest record (nullptr when never recorded).
  std::shared_ptr<EventState> state() const;

 private:
  CpuDevice& device_;  // for its bounded host waits
  mutable std::mutex mu_;
  std::shared_ptr<EventState> state_;
};

class CpuDevice final : public Device {
 public:
  CpuDevice(int index, size_t capacity_bytes);
  ~CpuDevice() override;

  DeviceKind kind() const override { return DeviceKind::Cpu; }
  int index() const override { return index_; }
  std::string name() const override { return "cpu:" + std::to_string(index_); }
  Stream& default_stream() override { return *streams_.front(); }
  Stream& create_stream(std::string name) override;
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(*this); }
  void synchronize() override;
  Ops& ops() override { return *ops_; }
  Allocator& allocator() override { return *allocator_; }
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr) override;
  void memcpy_async(void* dst, const void* src, size_t bytes, Stream& stream) override;
  void memset_async(void* dst, int value, size_t bytes, Stream& stream) override;

 private:
  int index_;
  std::mutex streams_mu_;
  std::vector<std::unique_ptr<CpuStream>> streams_;  // destroyed after the allocator
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Allocator> allocator_;
};

}  // namespace moezero::cpu
