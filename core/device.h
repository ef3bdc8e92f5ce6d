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

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace moezero {

class Allocator;
class Ops;
class Event;

enum class DeviceKind : uint8_t { Cpu, Cuda };

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

  // The op table of this backend (kernels/).
  virtual Ops& ops() = 0;
  // The caching allocator of this device (counts bytes by tag).
  virtual Allocator& allocator() = 0;

  // Raw memory, used by the Allocator only. Aligned to at least 256 bytes. raw_alloc returns
  // nullptr when the device is out of memory (the allocator turns that into an error).
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* ptr) = 0;

  // Copies `bytes` between any two of: this device's memory, host memory. Asynchronous in
  // `stream`: host memory must stay valid (and unmodified) until the stream passes the copy.
  virtual void memcpy_async(void* dst, const void* src, size_t bytes, Stream& stream) = 0;
  // dst[0..bytes) = byte `value`, in stream order.
  virtual void memset_async(void* dst, int value, size_t bytes, Stream& stream) = 0;

 protected:
  Device() = default;
};

}  // namespace moezero
