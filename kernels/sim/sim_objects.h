// kernels/sim/sim_objects.h — internal: the simulated backend's Device, Stream and Event
// (kernels/sim/sim_device.h is the public face). The stream machinery is the CPU backend's
// (kernels/cpu/cpu_device.h: an in-order worker thread per stream, sticky errors, markers that
// always complete, bounded host waits), with a virtual clock advanced by the tasks in order.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/virtual_time.h"
#include "kernels/cpu/completion_signal.h"
#include "kernels/sim/sim_device.h"

namespace moezero::sim {

class SimDevice;

// Completion state of one record() of an event: the virtual time it captured.
struct SimEventState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  double time_s = 0.0;
  std::exception_ptr error;

  void complete(double time, std::exception_ptr err);
  bool wait_for(std::chrono::milliseconds timeout);  // true when done
};

class SimStream final : public Stream, public VirtualStream {
 public:
  SimStream(SimDevice& device, std::string name);
  ~SimStream() override;

  Device& device() const override;
  void enqueue_host(std::function<void()> fn) override;
  void wait(const Event& event) override;
  void synchronize() override;
  bool query() override;
  void check() override;

  void enqueue_timed(std::function<double(double start_s)> fn) override;
  double virtual_clock_s() const override;
  double reserve_local_work(double start_s, double bytes) override;

  // An op: launched by the host now (one launch overhead), it starts at max(clock, launch)
  // and lasts `duration_s`; `real` (may be empty) runs on the worker first.
  void enqueue_op(double duration_s, std::vector<std::function<void()>> real);
  // A marker completing `state` with the stream's virtual time (runs after an error too).
  void enqueue_marker(std::shared_ptr<SimEventState> state);

 private:
  struct Task {
    double ready_s = 0.0;              // the host's virtual time when it launched the task
    std::function<double(double)> fn;  // start -> end; throws to fail the stream
    std::shared_ptr<SimEventState> marker;
  };
  void push(Task t);
  void run();

  SimDevice& device_;
  mutable std::mutex mu_;
  std::condition_variable cv_work_;
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0;
  cpu::CompletionSignal done_;  // guarded by mu_
  bool stop_ = false;
  std::exception_ptr error_;
  double clock_s_ = 0.0;  // guarded by mu_ (written by the worker)
  std::thread worker_;
};

class SimEvent final : public Event {
 public:
  explicit SimEvent(SimDevice& device) : device_(device) {}
  void record(Stream& stream) override;
  bool query() const override;
  void synchronize() const override;
  float elapsed_ms_since(const Event& start) const override;
  std::shared_ptr<SimEventState> state() const;

 private:
  SimDevice& device_;
  mutable std::mutex mu_;
  std::shared_ptr<SimEventState> state_;
};

class SimDevice final : public Device {
 public:
  SimDevice(int index, GpuProfile profile, SimDeviceOptions options);
  ~SimDevice() override;

  DeviceKind kind() const override { return DeviceKind::Sim; }
  int index() const override { return index_; }
  std::string name() const override;
  Stream& default_stream() override { return *streams_.front(); }
  Stream& create_stream(std::string name) override;
  std::unique_ptr<Event> create_event() override { return std::make_unique<SimEvent>(*this); }
  void synchronize() override;
  std::optional<double> virtual_time_s() const override;
  Ops& ops() override { return *ops_; }
  Allocator& allocator() override { return *allocator_; }
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr) override;
  void memcpy_async(void* dst, const void* src, size_t bytes, Stream& stream) override;
  void memset_async(void* dst, int value, size_t bytes, Stream& stream) override;

  const GpuProfile& profile() const { return profile_; }
  // The host's virtual clock: one launch (returns the time after it), and a host sync.
  // GpuProfile::one_executor: the earliest `duration_s` at or after `start_s` when the
  // device's one executor is free, reserved; returns its start (start_s when streams run
  // concurrently). Reservations fill gaps, so the order streams reach them matters little.
  double reserve_executor(double start_s, double duration_s);
  double host_launch();
  double host_now() const;
  void host_sync_to(double t);
  // Whether `ptr` lies in a backed block of this device.
  bool is_backed_device(const void* ptr) const;
  // An op's duration on this device's profile (sharing applied).
  double scaled(double seconds) const { return seconds * profile_.sharing; }

 private:
  int index_;
  GpuProfile profile_;
  SimDeviceOptions options_;
  std::mutex exec_mu_;
  std::map<double, double> exec_busy_;  // start -> end of reserved executor intervals
  mutable std::mutex host_mu_;
  double host_s_ = 0.0;
  mutable std::mutex mem_mu_;
  std::map<uintptr_t, size_t> backed_;  // backed block start -> size
  std::map<uintptr_t, size_t> fake_;    // fake block start -> size
  uint64_t raw_bytes_ = 0;              // backed + fake bytes held
  std::mutex streams_mu_;
  std::vector<std::unique_ptr<SimStream>> streams_;  // destroyed after the allocator
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Allocator> allocator_;
};

// The op table of a simulated device (sim_ops.cpp).
std::unique_ptr<Ops> make_sim_ops(SimDevice& device, bool compute_backed);

// While set on this thread, SimStream::enqueue_host appends to the vector instead of
// enqueuing (a real CPU kernel's work joins its op's task).
std::vector<std::function<void()>>*& host_task_capture();

}  // namespace moezero::sim
