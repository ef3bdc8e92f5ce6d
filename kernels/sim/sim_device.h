// kernels/sim/sim_device.h — the simulated backend: a Device whose streams keep virtual time.
//
// Streams, events and waits follow core/device.h exactly (each stream is an in-order worker
// thread, as on the CPU backend: host tasks and collectives behave the same), but ops do not
// compute on big buffers. Each op advances its stream's virtual clock by a duration modelled
// from its FLOPs and bytes on a GPU profile; the host has its own virtual clock that every
// launch advances by the profile's launch overhead. docs/simulator.md: the model and its
// assumptions.
//
// Virtual time (seconds from the device's creation):
//   host launch:  host += launch_s; the op may start at the new host time (ops, copies,
//                 memsets, enqueue_host, VirtualStream::enqueue_timed; not record/wait).
//   op:           start = max(stream clock, host time of its launch); stream clock = start +
//                 duration (the op's model, times the profile's `sharing`).
//   Event:        record captures max(stream clock, host time) at that point of the stream;
//                 Stream::wait(e) makes later work start at >= e's time; elapsed_ms_since is
//                 the virtual difference.
//   host syncs:   Stream/Event/Device::synchronize wait (wall) for the work, then set the host
//                 clock to max(host, awaited virtual time). Device::virtual_time_s() reads it.
// Memory: raw blocks of at most `backed_bytes` are real memory (zeroed at allocation; host
// reads of counters and scalars work), and so are blocks the host reads back (HostRead::Yes:
// core/host_exchange's buffers) of at most `host_read_backed_bytes`; other blocks get unbacked
// fake addresses (a 40 GB shard costs nothing on this machine). The allocator counts both by tag,
// as usual; the device refuses blocks past `capacity_bytes` (the profile's memory) as cudaMalloc
// would. An op whose tensors are all backed also runs the CPU kernel for real (right values in
// small buffers); an op touching any unbacked tensor computes nothing, except find_nonfinite, which
// writes {-1, 0, 0} ("all finite") into a backed result. sum_squares then adds 0.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"

namespace moezero::sim {

struct MeasuredRates;  // kernels/sim/measured_profile.h

// One accelerator (or this machine's CPU) as the cost model sees it. Achieved rates follow a
// saturating curve by problem size: rate(x) = peak * max_eff * x / (x + x_half), i.e. an op
// costs (x + x_half) / (peak * max_eff): x_half is the fixed cost of a small op, in work units.
struct GpuProfile {
  std::string name;         // "h100"
  std::string description;  // "NVIDIA H100 SXM5 80GB"
  double bf16_flops = 0;    // peak dense bf16 tensor-core FLOP/s
  double fp32_flops = 0;    // peak dense fp32 FLOP/s (GEMMs on f32 operands)
  double hbm_bytes_per_s = 0;
  double host_link_bytes_per_s = 0;  // host <-> device copies (PCIe), per direction
  double launch_s = 0;               // host overhead of one launch (kernel, copy, host func)
  uint64_t memory_bytes = 0;
  double gemm_max_efficiency = 1;  // fraction of peak a large GEMM reaches
  double gemm_half_flops = 0;      // FLOPs at which a GEMM reaches half of that
  double mem_max_efficiency = 1;   // fraction of hbm bandwidth a large streaming op reaches
  double mem_half_bytes = 0;       // bytes at which a streaming op reaches half of that
  int sharing = 1;  // ranks sharing one compute unit: every op's duration is multiplied by it
  // One executor for all streams of a device (a CPU rank runs one op at a time, whichever
  // stream it belongs to; a GPU runs streams concurrently): ops of different streams and the
  // local copies of collectives (VirtualStream::reserve_local_work) take turns on it.
  bool one_executor = false;
  // The measured compute profile (kernels/sim/measured_profile.h): op kinds it measured take
  // its durations instead of the curves above. Null: the library profile.
  std::shared_ptr<const MeasuredRates> measured;

  // Modelled durations (seconds, before `sharing`).
  double gemm_seconds(double flops, bool bf16) const;
  double memory_seconds(double bytes) const;
};

// The profiles of kernels/sim/gpu_profiles.json (compiled in), by name.
// Throws UserError listing the known names when `name` is not one of them.
GpuProfile gpu_profile(const std::string& name);
std::vector<std::string> gpu_profile_names();

struct SimDeviceOptions {
  // Device memory for OOM; 0 = the profile's memory_bytes.
  uint64_t capacity_bytes = 0;
  // Raw blocks up to this size are real memory. The caching allocator may serve a request
  // from a cached block up to 1.25x + 4 KiB its size, so requests of at most
  // (backed_bytes - 4096) * 4 / 5 bytes (48 KiB by default) are always backed.
  uint64_t backed_bytes = 64 * 1024;
  // Blocks the host reads back (Device::raw_alloc_host_read) are real up to the larger of this
  // and backed_bytes, with the same 4/5 guarantee for requests. The trainer on the simulated
  // backend keeps backed_bytes small and sets this to its largest host exchange: then only
  // the buffers whose contents decide something cost memory on this machine.
  uint64_t host_read_backed_bytes = 0;
  // False: no op computes, not even on backed buffers (find_nonfinite still writes its "all
  // finite" stand-in). The trainer on the simulated backend needs this: its host plans come
  // from a routing source, so small kernels computing on other values would disagree with them.
  bool compute_backed = true;
};

// The largest request that is guaranteed real memory under `options` (see backed_bytes), and
// the largest host-read request (see host_read_backed_bytes).
uint64_t guaranteed_backed_bytes(const SimDeviceOptions& options);
uint64_t guaranteed_host_read_backed_bytes(const SimDeviceOptions& options);

// "sim:<index>" on `profile`. Throws on bad options (backed_bytes below 8 KiB).
std::unique_ptr<Device> make_sim_device(int index, const GpuProfile& profile,
                                        SimDeviceOptions options = {});

// True when `ptr` is an unbacked (fake) address of a simulated device: never dereference it.
bool is_unbacked(const void* ptr);

}  // namespace moezero::sim
