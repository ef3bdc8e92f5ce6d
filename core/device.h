// core/device.h — the CUDA execution model, on both backends: Device, Stream, Event.
//
// Semantics follow CUDA exactly, so code written against them is correct on a GPU:
// - Enqueue is asynchronous: an op called on a Stream returns at once; the work runs later,
//   in the order it was enqueued on that stream. Different streams run concurrently.
// - Event::record(s) marks the point in s after everything enqueued so far; Stream::wait(e)
//   makes later work on the waiting stream start only after that point (it does not block
//   the host). Waiting on an event never recorded returns at once (as in CUDA).
// - Event::synchronize() and Stream::synchronize() block the host; each is a documented host
//   synchronisation point in callers.
// - Errors are sticky per stream, as CUDA's: a task that throws puts its stream in the error
//   state; later work on it is skipped (events recorded after it still complete, so waiters
//   are never stranded) and the first error is rethrown by synchronize()/query()/check().
//
// On the CPU backend a Stream is an in-order worker thread with a queue, so the host runs
// ahead of compute just as it does with CUDA, and a missing wait is a real race (TSAN sees it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace moezero {

class Allocator;
class Ops;
class Event;

// Sim: the simulated backend (kernels/sim/): virtual time, no computation on big buffers.
enum class DeviceKind : uint8_t { Cpu, Cuda, Sim };
// Whether the host reads a buffer's contents back (Device::raw_alloc_host_read).
enum class HostRead : uint8_t { No, Yes };

const char* device_kind_name(DeviceKind k);

class Stream {
 public:
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  virtual class Device& device() const = 0;
  // Name for traces and error messages ("compute", "gather", "a2a", "reduce", ...).
  const std::string& name() const { return name_; }

  // [in] fn: host work that runs when the stream reaches this point, in order with the rest
  // of the stream's work (CPU: on the worker thread; CUDA: cudaLaunchHostFunc, so fn must not
  // call CUDA). If fn throws, the stream enters the error state.
  virtual void enqueue_host(std::function<void()> fn) = 0;

  // Later work on this stream waits until `event`'s last record has completed. Non-blocking.
  virtual void wait(const Event& event) = 0;

  // Blocks the host until all work enqueued so far has finished; rethrows the stream's error.
  virtual void synchronize() = 0;

  // True when all work enqueued so far has finished. Rethrows the stream's error.
  virtual bool query() = 0;

  // Rethrows the stream's sticky error, if any, without waiting.
  virtual void check() = 0;

 protected:
  explicit Stream(std::string name) : name_(std::move(name)) {}

 private:
  std::string name_;
};

class Event {
 public:
  virtual ~Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Captures the current end of `stream`. Re-recording replaces the previous capture (waits
  // already enqueued keep waiting on the old one, as in CUDA).
  virtual void record(Stream& stream) = 0;
  // True when the captured work has completed (or the event was never recorded).
  virtual bool query() const = 0;
  // Blocks the host until the captured work has completed. Rethrows an error of the stream
  // the event was recorded on if that work failed.
  virtual void synchronize() const = 0;
  // Milliseconds between two completed events (both must have been recorded and completed).
  virtual float elapsed_ms_since(const Event& start) const = 0;

 protected:
  Event() = default;
};

// One compute device: a CPU (one per rank thread) or one CUDA GPU.
class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  virtual int index() const = 0;
  virtual std::string name() const = 0;  // "cpu:0", "cuda:0 (NVIDIA H200)"

  // The stream ops use when the caller has no other; created with the device.
  virtual Stream& default_stream() = 0;
  // Streams are owned by the device and live as long as it does, so a Buffer (which names
  // its streams) can never outlive one. Buffers must not outlive their device.
  virtual Stream& create_stream(std::string name) = 0;
  virtual std::unique_ptr<Event> create_event() = 0;

  // Blocks until every stream of this device is idle.
  virtual void synchronize() = 0;

  // The host's virtual clock in seconds on the simulated backend (kernels/sim/sim_device.h):
  // what a wall clock would read on the simulated machine. nullopt on real devices.
  virtual std::optional<double> virtual_time_s() const { return std::nullopt; }

  // The op table of this backend (kernels/).
  virtual Ops& ops() = 0;
  // The caching allocator of this device (counts bytes by tag).
  virtual Allocator& allocator() = 0;

  // Raw memory, used by the Allocator only. Aligned to at least 256 bytes. raw_alloc returns
  // nullptr when the device is out of memory (the allocator turns that into an error).
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr) = 0;
  // A block whose contents the host reads back (HostRead::Yes: core/host_exchange's buffers).
  // Only the simulated backend tells them apart: it backs big blocks with real memory only
  // when the host reads them (kernels/sim/sim_device.h), and returns true from
  // separates_host_read() so that the allocator caches the two kinds apart.
  virtual void* raw_alloc_host_read(size_t bytes) { return raw_alloc(bytes); }
  virtual bool separates_host_read() const { return false; }

  // Copies `bytes` between any two of: this device's memory, host memory. Asynchronous in
  // `stream`: host memory must stay valid (and unmodified) until the stream passes the copy.
  virtual void memcpy_async(void* dst, const void* src, size_t bytes, Stream& stream) = 0;
  // dst[0..bytes) = byte `value`, in stream order.
  virtual void memset_async(void* dst, int value, size_t bytes, Stream& stream) = 0;

  // True when raw_free waits for the whole device (cudaFree does): the allocator then lets
  // every stream drain (a bounded wait) before it gives cached blocks back, so that it never
  // frees while a collective of this device may be in flight (the classic NCCL deadlock).
  virtual bool raw_free_synchronizes() const { return false; }

  // ---- Bounded host waits ---------------------------------------------------------------
  // Every host wait of this device (Stream::synchronize, Event::synchronize, synchronize())
  // may depend on a peer's collective. With a limit set (the rank's comm.timeout_s; 0 =
  // unbounded, the default), a wait that outlasts it calls every expiry hook once (the rank's
  // NCCL communicators abort themselves there, so their kernels end, and say which op of
  // which group was in flight) and throws TimeoutError naming the wait and what they said.
  // abort_host_waits(why), from any thread (another rank that failed), makes the waits in
  // progress and all later ones run the hooks (on the waiting thread) and throw with `why`.
  void set_host_wait_limit(std::chrono::milliseconds limit) { wait_limit_ms_ = limit.count(); }
  std::chrono::milliseconds host_wait_limit() const {
    return std::chrono::milliseconds(wait_limit_ms_.load());
  }
  // [in] hook: returns a description of what it aborted ("" when nothing was in flight).
  int add_wait_expiry_hook(std::function<std::string()> hook);
  void remove_wait_expiry_hook(int id);
  void abort_host_waits(const std::string& why);
  // Polls `ready` (cheap, non-blocking) until true against the limit and aborts: spinning for
  // the first 2 ms, then sleeping at most 100 us between looks. [in] what: the wait, for the error
  // ("stream 'compute' of cuda:0").
  void bounded_host_wait(const std::function<bool()>& ready, const std::string& what);
  // The waits' deadline check for backends that block on their own primitives: throws (after
  // the hooks) when aborted or when `start` is older than the limit.
  void check_host_wait(std::chrono::steady_clock::time_point start, const std::string& what);

 protected:
  Device() = default;

 private:
  [[noreturn]] void expire_host_wait(const std::string& what, const std::string& cause);
  std::atomic<int64_t> wait_limit_ms_{0};
  std::atomic<bool> waits_aborted_{false};
  std::mutex hooks_mu_;
  std::string abort_reason_;  // guarded by hooks_mu_
  int next_hook_id_ = 0;
  std::map<int, std::function<std::string()>> hooks_;
};

}  // namespace moezero
