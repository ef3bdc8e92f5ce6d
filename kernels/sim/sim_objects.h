// kernels/sim/sim_objects.h — internal: the simulated backend's Device, Stream and Event
// (kernels/sim/sim_device.h is the public face). They are the CPU backend's objects
// (kernels/cpu/cpu_device.h: an in-order worker thread per stream, sticky errors, markers that
// always complete, bounded host waits) with a virtual clock: the host's clock advances at each
// launch (CpuStream's hooks), ops are timed tasks, and the device has its own memory (backed
// and unbacked blocks) and op table.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/virtual_time.h"
#include "kernels/cpu/cpu_device.h"
#include "kernels/sim/sim_device.h"

namespace moezero::sim {

class SimDevice;

class SimStream final : public cpu::CpuStream, public VirtualStream {
 public:
  SimStream(SimDevice& device, std::string name);
  ~SimStream() override;

  // Inside an op's capture (host_task_capture), a real kernel's work joins its op's task.
  void enqueue_host(std::function<void()> fn) override;

  void enqueue_timed(std::function<double(double start_s)> fn) override;
  double virtual_clock_s() const override;
  double reserve_local_work(double start_s, double bytes) override;

  // An op: launched by the host now (one launch overhead), it starts at max(clock, launch)
  // and lasts `duration_s`; `real` (may be empty) runs on the worker first.
  void enqueue_op(double duration_s, std::vector<std::function<void()>> real);

 protected:
  double launch_ready_s() override;               // one launch on the host's clock
  double host_ready_s() const override;           // the host's clock now
  void on_synchronized(double clock_s) override;  // the host's clock catches up

 private:
  SimDevice& device_;
};

class SimEvent final : public cpu::CpuEvent {
 public:
  explicit SimEvent(SimDevice& device);
  // Also moves the host's clock to the event's virtual time.
  void synchronize() const override;
  // The virtual difference.
  float elapsed_ms_since(const Event& start) const override;

 private:
  SimDevice& device_;
};

class SimDevice final : public cpu::CpuDevice {
 public:
  SimDevice(int index, GpuProfile profile, SimDeviceOptions options);
  ~SimDevice() override;

  DeviceKind kind() const override { return DeviceKind::Sim; }
  std::string name() const override;
  std::unique_ptr<Event> create_event() override { return std::make_unique<SimEvent>(*this); }
  std::optional<double> virtual_time_s() const override;
  void* raw_alloc(size_t bytes) override;
  void* raw_alloc_host_read(size_t bytes) override;
  bool separates_host_read() const override { return true; }
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
  // A block of `bytes`, real memory when at most `backed_limit` (else an unbacked address).
  void* alloc_block(size_t bytes, uint64_t backed_limit);
  // Whether `ptr` lies in a backed block of this device.
  bool is_backed_device(const void* ptr) const;
  // An op's duration on this device's profile (sharing applied).
  double scaled(double seconds) const { return seconds * profile_.sharing; }

 protected:
  std::unique_ptr<cpu::CpuStream> new_stream(std::string name) override;

 private:
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
};

// The op table of a simulated device (sim_ops.cpp).
std::unique_ptr<Ops> make_sim_ops(SimDevice& device, bool compute_backed);

// While set on this thread, SimStream::enqueue_host appends to the vector instead of
// enqueuing (a real CPU kernel's work joins its op's task).
std::vector<std::function<void()>>*& host_task_capture();

}  // namespace moezero::sim
