// kernels/sim/sim_device.cpp — SimDevice, SimStream and SimEvent: the CPU backend's objects
// with a virtual clock, and the simulated memory (backed and unbacked blocks).
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/sim/sim_objects.h"

namespace moezero::sim {

namespace {
// Unbacked blocks live at non-canonical x86-64 / AArch64 addresses: a dereference faults at
// once instead of corrupting memory. A gap after each block keeps them apart.
constexpr uintptr_t kFakeBase = kVirtualAddressBase;
constexpr uintptr_t kFakeLimit = kVirtualAddressLimit;
constexpr uintptr_t kFakeGap = 1 << 16;
constexpr size_t kAlign = 256;
// Backed blocks from this size on are anonymous mappings (page-aligned, so kAlign-aligned).
constexpr size_t kMappedBytes = 64 * 1024;
std::atomic<uintptr_t> g_next_fake{kFakeBase};
}  // namespace

bool is_unbacked(const void* ptr) { return is_virtual_address(ptr); }

std::vector<std::function<void()>>*& host_task_capture() {
  thread_local std::vector<std::function<void()>>* capture = nullptr;
  return capture;
}

// ---- SimStream -------------------------------------------------------------------------

SimStream::SimStream(SimDevice& device, std::string name)
    : CpuStream(device, std::move(name)), device_(device) {}

SimStream::~SimStream() { stop(); }  // its tasks and hooks use device_

double SimStream::launch_ready_s() { return device_.host_launch(); }

double SimStream::host_ready_s() const { return device_.host_now(); }

void SimStream::on_synchronized(double clock_s) { device_.host_sync_to(clock_s); }

void SimStream::enqueue_host(std::function<void()> fn) {
  if (auto* capture = host_task_capture()) {  // a real kernel's work, inside its op's task
    capture->push_back(std::move(fn));
    return;
  }
  CpuStream::enqueue_host(std::move(fn));
}

void SimStream::enqueue_timed(std::function<double(double)> fn) {
  push_timed(device_.host_launch(), std::move(fn));
}

void SimStream::enqueue_op(double duration_s, std::vector<std::function<void()>> real) {
  push_timed(device_.host_launch(), [this, duration_s, real = std::move(real)](double start) {
    for (const auto& f : real) f();
    return device_.reserve_executor(start, duration_s) + duration_s;
  });
}

double SimStream::virtual_clock_s() const { return clock_s(); }

double SimStream::reserve_local_work(double start_s, double bytes) {
  if (!device_.profile().one_executor || bytes <= 0) return start_s;
  const double d = device_.scaled(device_.profile().memory_seconds(bytes));
  return device_.reserve_executor(start_s, d) + d;
}

// ---- SimEvent --------------------------------------------------------------------------

SimEvent::SimEvent(SimDevice& device) : CpuEvent(device), device_(device) {}

void SimEvent::synchronize() const {
  CpuEvent::synchronize();
  if (auto s = state()) device_.host_sync_to(s->time_s);
}

float SimEvent::elapsed_ms_since(const Event& start) const {
  const auto [a, b] = completed_pair(start);
  return static_cast<float>((b->time_s - a->time_s) * 1e3);
}

// ---- SimDevice -------------------------------------------------------------------------

double SimDevice::reserve_executor(double start_s, double duration_s) {
  if (!profile_.one_executor || duration_s <= 0) return start_s;
  std::lock_guard lock(exec_mu_);
  double t = start_s;
  // The reservation that may overlap t: the last one starting at or before it.
  auto it = exec_busy_.upper_bound(t);
  if (it != exec_busy_.begin() && std::prev(it)->second > t) t = std::prev(it)->second;
  for (it = exec_busy_.lower_bound(t); it != exec_busy_.end() && it->first < t + duration_s; ++it)
    t = std::max(t, it->second);
  exec_busy_.emplace(t, t + duration_s);
  constexpr size_t kKeep = 8192;  // old reservations end before any stream's clock
  while (exec_busy_.size() > kKeep) exec_busy_.erase(exec_busy_.begin());
  return t;
}

SimDevice::SimDevice(int index, GpuProfile profile, SimDeviceOptions options)
    : CpuDevice(index, Derived{}), profile_(std::move(profile)), options_(options) {
  if (options_.capacity_bytes == 0) options_.capacity_bytes = profile_.memory_bytes;
  // The device itself refuses blocks past its memory (raw_alloc), as cudaMalloc does; the
  // allocator's own limit (0: none) stays for train.memory_limit.
  init(make_sim_ops(*this, options_.compute_backed), 0);
}

SimDevice::~SimDevice() { shutdown(); }  // its blocks go back through SimDevice::raw_free

std::unique_ptr<cpu::CpuStream> SimDevice::new_stream(std::string name) {
  return std::make_unique<SimStream>(*this, std::move(name));
}

std::string SimDevice::name() const {
  return "sim:" + std::to_string(index()) + " (" + profile_.name + ")";
}

std::optional<double> SimDevice::virtual_time_s() const { return host_now(); }

double SimDevice::host_launch() {
  std::lock_guard lock(host_mu_);
  host_s_ += profile_.launch_s;
  return host_s_;
}

double SimDevice::host_now() const {
  std::lock_guard lock(host_mu_);
  return host_s_;
}

void SimDevice::host_sync_to(double t) {
  std::lock_guard lock(host_mu_);
  host_s_ = std::max(host_s_, t);
}

void* SimDevice::raw_alloc(size_t bytes) { return alloc_block(bytes, options_.backed_bytes); }

void* SimDevice::raw_alloc_host_read(size_t bytes) {
  return alloc_block(bytes, std::max(options_.backed_bytes, options_.host_read_backed_bytes));
}

void* SimDevice::alloc_block(size_t bytes, uint64_t backed_limit) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lock(mem_mu_);
  if (raw_bytes_ + rounded > options_.capacity_bytes) return nullptr;  // out of device memory
  void* p = nullptr;
  if (rounded <= backed_limit) {
    if (rounded >= kMappedBytes) {  // zero pages, resident only once written: a trainer that
      // computes nothing (compute_backed = false) keeps its many small shards off the host
      p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) return nullptr;
    } else {
      p = std::aligned_alloc(kAlign, rounded);
      if (!p) return nullptr;
      std::memset(p, 0, rounded);
    }
    backed_[reinterpret_cast<uintptr_t>(p)] = rounded;
  } else {
    const uintptr_t at = g_next_fake.fetch_add(rounded + kFakeGap);
    MOEZERO_CHECK(at + rounded < kFakeLimit, "simulated device ", name(),
                  ": unbacked address space exhausted");
    p = reinterpret_cast<void*>(at);
    fake_[at] = rounded;
  }
  raw_bytes_ += rounded;
  return p;
}

void SimDevice::raw_free(void* ptr) {
  if (!ptr) return;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(mem_mu_);
  if (auto it = fake_.find(p); it != fake_.end()) {
    raw_bytes_ -= it->second;
    fake_.erase(it);
    return;
  }
  auto it = backed_.find(p);
  MOEZERO_CHECK(it != backed_.end(), "simulated device ", name(), ": raw_free of unknown block");
  const size_t size = it->second;
  raw_bytes_ -= size;
  backed_.erase(it);
  if (size >= kMappedBytes)
    ::munmap(ptr, size);
  else
    std::free(ptr);
}

bool SimDevice::is_backed_device(const void* ptr) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(mem_mu_);
  auto it = backed_.upper_bound(p);
  if (it == backed_.begin()) return false;
  --it;
  return p < it->first + it->second;
}

void SimDevice::memcpy_async(void* dst, const void* src, size_t bytes, Stream& stream) {
  MOEZERO_CHECK(&stream.device() == this, "memcpy_async on ", name(), " given stream of ",
                stream.device().name());
  if (bytes == 0) return;
  auto& s = static_cast<SimStream&>(stream);
  const bool src_fake = is_unbacked(src), dst_fake = is_unbacked(dst);
  const bool src_dev = src_fake || is_backed_device(src);
  const bool dst_dev = dst_fake || is_backed_device(dst);
  const double b = static_cast<double>(bytes);
  double seconds = 0.0;
  if (src_dev && dst_dev)
    seconds = profile_.memory_seconds(2.0 * b);  // read + write in device memory
  else if (src_dev || dst_dev)
    seconds = profile_.host_link_bytes_per_s > 0 ? b / profile_.host_link_bytes_per_s : 0.0;
  std::vector<std::function<void()>> real;
  if (!src_fake && !dst_fake)
    real.emplace_back([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  else if (src_fake && !dst_fake)  // an unbacked buffer reads as zeros
    real.emplace_back([dst, bytes] { std::memset(dst, 0, bytes); });
  s.enqueue_op(scaled(seconds), std::move(real));
}

void SimDevice::memset_async(void* dst, int value, size_t bytes, Stream& stream) {
  MOEZERO_CHECK(&stream.device() == this, "memset_async on ", name(), " given stream of ",
                stream.device().name());
  if (bytes == 0) return;
  auto& s = static_cast<SimStream&>(stream);
  std::vector<std::function<void()>> real;
  if (!is_unbacked(dst)) real.emplace_back([dst, value, bytes] { std::memset(dst, value, bytes); });
  s.enqueue_op(scaled(profile_.memory_seconds(static_cast<double>(bytes))), std::move(real));
}

// ---- factory -------------------------------------------------------------------------------

namespace {
uint64_t guaranteed_of(uint64_t backed) { return backed <= 4096 ? 0 : (backed - 4096) * 4 / 5; }
}  // namespace

uint64_t guaranteed_backed_bytes(const SimDeviceOptions& options) {
  return guaranteed_of(options.backed_bytes);
}

uint64_t guaranteed_host_read_backed_bytes(const SimDeviceOptions& options) {
  return guaranteed_of(std::max(options.backed_bytes, options.host_read_backed_bytes));
}

std::unique_ptr<Device> make_sim_device(int index, const GpuProfile& profile,
                                        SimDeviceOptions options) {
  MOEZERO_REQUIRE(options.backed_bytes >= 8192,
                  "make_sim_device: backed_bytes must be >= 8192, got ", options.backed_bytes);
  MOEZERO_REQUIRE(profile.sharing >= 1, "make_sim_device: profile '", profile.name,
                  "' has sharing ", profile.sharing, " (must be >= 1)");
  return std::make_unique<SimDevice>(index, profile, options);
}

}  // namespace moezero::sim
