// core/virtual_time.h — what a stream of the simulated backend (kernels/sim/) offers to code
// that must not include kernels/ (the simulated communicator, comm/sim/): work that runs in
// stream order and sets the stream's virtual clock itself.
//
// Obtain it with dynamic_cast<VirtualStream*>(&stream): null on real backends.
#pragma once

#include <cstdint>
#include <functional>

namespace moezero {

// Unbacked buffers of the simulated backend live at these (non-canonical, never mapped)
// addresses: nothing may dereference them; a collective moves no bytes for them.
constexpr uintptr_t kVirtualAddressBase = uintptr_t{1} << 56;
constexpr uintptr_t kVirtualAddressLimit = uintptr_t{1} << 62;
inline bool is_virtual_address(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a >= kVirtualAddressBase && a < kVirtualAddressLimit;
}

class VirtualStream {
 public:
  virtual ~VirtualStream() = default;

  // Enqueues fn in stream order (it runs on the stream's worker thread, like enqueue_host,
  // and may block there, e.g. to meet peers). [in] fn(start_s): start_s is the virtual time
  // at which the stream reaches this point (after the previous work and after the host's
  // launch of this call); fn returns the virtual time at which its work ends (>= start_s; a
  // smaller value counts as start_s). The stream's clock becomes that end. Costs one launch
  // overhead on the host's virtual clock, as an op does. If fn throws, the stream enters its
  // sticky error state (as with enqueue_host).
  virtual void enqueue_timed(std::function<double(double start_s)> fn) = 0;

  // The stream's virtual clock now (the end of the work it has run so far), seconds.
  virtual double virtual_clock_s() const = 0;

  // Work a collective does on the device itself (copying and reducing `bytes` of this rank's
  // data): on a device whose streams share one executor (a CPU rank) it takes that executor's
  // time from `start_s` on, competing with the ops of every stream; returns when it ends.
  // Devices that copy beside their compute (GPUs: copy engines, NCCL's few SMs) return start_s.
  virtual double reserve_local_work(double start_s, double bytes) { return start_s; }
};

}  // namespace moezero
