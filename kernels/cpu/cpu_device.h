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
//
// Virtual clock. The simulated backend (kernels/sim/) is this machinery plus a virtual clock:
// every task carries the host's virtual time at its launch (`ready_s`), starts at max(stream
// clock, ready_s), and a timed task returns its virtual end; markers capture the start. The
// hooks below (launch_ready_s, host_ready_s, on_synchronized) are where a derived stream
// advances the host's clock; on the CPU they do nothing and every virtual time stays 0.
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
#include <utility>
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
  double time_s = 0.0;  // the stream's virtual time at the marker (0 on the CPU)
  std::exception_ptr error;

  void complete(double virtual_s, std::exception_ptr err);
  void wait();  // blocks until done
  // Blocks until done or `timeout` passed; true when done.
  bool wait_for(std::chrono::milliseconds timeout);
};

class CpuStream : public Stream {
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

 protected:
  // A timed task: fn(start_s) runs on the worker and returns its virtual end (a smaller
  // value counts as start_s); it starts at max(stream clock, ready_s).
  void push_timed(double ready_s, std::function<double(double start_s)> fn);
  // The stream's virtual clock (the end of the work run so far).
  double clock_s() const;
  // Hooks of the virtual clock (no-ops on the CPU): the ready time of a launched task
  // (enqueue_host), of a marker or an event wait (no launch), and what a host synchronize
  // does once the stream reached `clock_s`.
  virtual double launch_ready_s() { return 0.0; }
  virtual double host_ready_s() const { return 0.0; }
  virtual void on_synchronized(double clock_s) { (void)clock_s; }
  // Joins the worker; a derived stream whose hooks the worker calls joins it in its destructor.
  void stop();

 private:
  struct Task {
    double ready_s = 0.0;                 // the host's virtual time when it launched the task
    std::function<void()> fn;             // a host task, or
    std::function<double(double)> timed;  // a timed one (start -> end)
    std::shared_ptr<EventState> marker;   // set for markers (always run)
  };
  void push(Task t);
  void run();

  CpuDevice& device_;
  mutable std::mutex mu_;
  std::condition_variable cv_work_;
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0;
  CompletionSignal done_;  // guarded by mu_
  bool stop_ = false;
  std::exception_ptr error_;
  double clock_s_ = 0.0;  // guarded by mu_ (written by the worker)
  std::thread worker_;
};

class CpuEvent : public Event {
 public:
  explicit CpuEvent(CpuDevice& device) : device_(device) {}
  void record(Stream& stream) override;
  bool query() const override;
  void synchronize() const override;
  float elapsed_ms_since(const Event& start) const override;

  // The state of the latest record (nullptr when never recorded).
  std::shared_ptr<EventState> state() const;
  // Its device's kind: an event and a stream meet only within one backend.
  DeviceKind kind() const;

 protected:
  // Both events' states, checked recorded and complete (elapsed_ms_since).
  std::pair<std::shared_ptr<EventState>, std::shared_ptr<EventState>> completed_pair(
      const Event& start) const;
  // "CPU" or "simulated": the backend in messages.
  const char* backend_word() const;

 private:
  CpuDevice& device_;  // for its bounded host waits
  mutable std::mutex mu_;
  std::shared_ptr<EventState> state_;
};

// The CPU device; also the base of the simulated device (kernels/sim/), which adds a virtual
// clock, its own memory and its own op table through the protected constructor and hooks.
class CpuDevice : public Device {
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

 protected:
  struct Derived {};  // selects the constructor of a derived device
  // Sets only the index; the derived constructor calls init() once it can build its ops:
  // init makes the default stream (new_stream), takes the ops and makes the allocator
  // (limit `allocator_limit_bytes`, 0 = none).
  CpuDevice(int index, Derived) : index_(index) {}
  void init(std::unique_ptr<Ops> ops, size_t allocator_limit_bytes);
  // A new stream of this device's kind (the default stream too).
  virtual std::unique_ptr<CpuStream> new_stream(std::string name);
  // Synchronizes, then releases the allocator (its pending frees wait on the streams' events,
  // its blocks go back through raw_free) and the streams. Idempotent; a derived device calls
  // it in its destructor, while its raw_free and hooks still exist.
  void shutdown() noexcept;

 private:
  int index_;
  std::mutex streams_mu_;
  std::vector<std::unique_ptr<CpuStream>> streams_;  // destroyed after the allocator
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Allocator> allocator_;
};

}  // namespace moezero::cpu
