// kernels/sim/sim_device.cpp — SimDevice, SimStream (an in-order worker with a virtual clock)
// and SimEvent.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "kernels/sim/sim_objects.h"

namespace moezero::sim {

namespace {
// How often a blocked host wait looks at the device's limit and abort flag.
constexpr std::chrono::milliseconds kWaitPoll{20};
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

// ---- SimEventState ---------------------------------------------------------------------

void SimEventState::complete(double time, std::exception_ptr err) {
  {
    std::lock_guard lock(mu);
    time_s = time;
    error = std::move(err);
    done = true;
  }
  cv.notify_all();
}

bool SimEventState::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu);
  return cv.wait_for(lock, timeout, [&] { return done; });
}

// ---- SimStream -------------------------------------------------------------------------

SimStream::SimStream(SimDevice& device, std::string name)
    : Stream(std::move(name)), device_(device), worker_([this] { run(); }) {}

SimStream::~SimStream() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  worker_.join();
}

Device& SimStream::device() const { return device_; }

void SimStream::push(Task t) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(t));
    ++enqueued_;
  }
  cv_work_.notify_one();
}

void SimStream::enqueue_host(std::function<void()> fn) {
  if (auto* capture = host_task_capture()) {  // a real kernel's work, inside its op's task
    capture->push_back(std::move(fn));
    return;
  }
  push(Task{device_.host_launch(),
            [fn = std::move(fn)](double start) {
              fn();
              return start;
            },
            nullptr});
}

void SimStream::enqueue_timed(std::function<double(double)> fn) {
  push(Task{device_.host_launch(), std::move(fn), nullptr});
}

void SimStream::enqueue_op(double duration_s, std::vector<std::function<void()>> real) {
  push(Task{device_.host_launch(),
            [this, duration_s, real = std::move(real)](double start) {
              for (const auto& f : real) f();
              return device_.reserve_executor(start, duration_s) + duration_s;
            },
            nullptr});
}

double SimStream::reserve_local_work(double start_s, double bytes) {
  if (!device_.profile().one_executor || bytes <= 0) return start_s;
  const double d = device_.scaled(device_.profile().memory_seconds(bytes));
  return device_.reserve_executor(start_s, d) + d;
}

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

void SimStream::enqueue_marker(std::shared_ptr<SimEventState> state) {
  push(Task{device_.host_now(), nullptr, std::move(state)});
}

double SimStream::virtual_clock_s() const {
  std::lock_guard lock(mu_);
  return clock_s_;
}

void SimStream::wait(const Event& event) {
  const auto* sim_event = dynamic_cast<const SimEvent*>(&event);
  MOEZERO_CHECK(sim_event != nullptr, "stream '", name(), "' on ", device_.name(),
                " cannot wait on an event of another backend");
  std::shared_ptr<SimEventState> state = sim_event->state();
  if (!state) return;  // never recorded: nothing to wait for (CUDA semantics)
  push(Task{device_.host_now(),
            [state](double start) {
              std::unique_lock lock(state->mu);
              state->cv.wait(lock, [&] { return state->done; });
              if (state->error) std::rethrow_exception(state->error);  // along the edge
              return std::max(start, state->time_s);
            },
            nullptr});
}

void SimStream::run() {
  for (;;) {
    Task task;
    {
      std::unique_lock lock(mu_);
      cv_work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr err;
    double start = 0.0;
    {
      std::lock_guard lock(mu_);
      err = error_;
      start = std::max(clock_s_, task.ready_s);
    }
    double end = start;
    if (task.marker) {
      task.marker->complete(start, err);
    } else if (!err) {
      try {
        end = std::max(start, task.fn(start));
      } catch (...) {
        std::lock_guard lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
    task = Task{};  // release captures on the worker, before signalling completion
    bool wake = false;
    {
      std::lock_guard lock(mu_);
      clock_s_ = std::max(clock_s_, end);
      wake = done_.complete_one();
    }
    if (wake) done_.notify();
  }
}

void SimStream::synchronize() {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  const uint64_t target = enqueued_;
  // The check may run expiry hooks (and throws); it runs without the lock.
  done_.wait_until(lock, target, kWaitPoll, [&] {
    device_.check_host_wait(start, "stream '" + name() + "' of " + device_.name());
  });
  const double clock = clock_s_;
  std::exception_ptr err = error_;
  lock.unlock();
  device_.host_sync_to(clock);
  if (err) std::rethrow_exception(err);
}

bool SimStream::query() {
  std::lock_guard lock(mu_);
  if (error_) std::rethrow_exception(error_);
  return done_.completed() == enqueued_;
}

void SimStream::check() {
  std::lock_guard lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

// ---- SimEvent --------------------------------------------------------------------------

void SimEvent::record(Stream& stream) {
  auto* sim_stream = dynamic_cast<SimStream*>(&stream);
  MOEZERO_CHECK(sim_stream != nullptr, "a simulated event cannot be recorded on stream '",
                stream.name(), "' of ", stream.device().name());
  auto state = std::make_shared<SimEventState>();
  {
    std::lock_guard lock(mu_);
    state_ = state;
  }
  sim_stream->enqueue_marker(std::move(state));
}

std::shared_ptr<SimEventState> SimEvent::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

bool SimEvent::query() const {
  auto s = state();
  if (!s) return true;
  std::lock_guard lock(s->mu);
  if (s->done && s->error) std::rethrow_exception(s->error);
  return s->done;
}

void SimEvent::synchronize() const {
  auto s = state();
  if (!s) return;
  const auto start = std::chrono::steady_clock::now();
  while (!s->wait_for(kWaitPoll)) device_.check_host_wait(start, "an event of " + device_.name());
  if (s->error) std::rethrow_exception(s->error);
  device_.host_sync_to(s->time_s);
}

float SimEvent::elapsed_ms_since(const Event& start) const {
  const auto* other = dynamic_cast<const SimEvent*>(&start);
  MOEZERO_CHECK(other != nullptr, "elapsed_ms_since: start event is not a simulated event");
  auto a = other->state();
  auto b = state();
  MOEZERO_CHECK(a && b, "elapsed_ms_since: both events must have been recorded");
  auto time = [](const std::shared_ptr<SimEventState>& s) {
    std::lock_guard lock(s->mu);
    MOEZERO_CHECK(s->done, "elapsed_ms_since: both events must have completed");
    return s->time_s;
  };
  return static_cast<float>((time(b) - time(a)) * 1e3);
}

// ---- SimDevice -------------------------------------------------------------------------

SimDevice::SimDevice(int index, GpuProfile profile, SimDeviceOptions options)
    : index_(index), profile_(std::move(profile)), options_(options) {
  if (options_.capacity_bytes == 0) options_.capacity_bytes = profile_.memory_bytes;
  streams_.push_back(std::make_unique<SimStream>(*this, "default"));
  ops_ = make_sim_ops(*this, options_.compute_backed);
  // The device itself refuses blocks past its memory (raw_alloc), as cudaMalloc does; the
  // allocator's own limit stays for train.memory_limit.
  allocator_ = std::make_unique<Allocator>(*this, 0);
}

SimDevice::~SimDevice() {
  try {
    synchronize();
  } catch (...) {
    // Errors were for the work's owner to collect; destruction must not throw.
  }
  allocator_.reset();  // needs the streams (pending frees wait on their events)
  streams_.clear();
}

std::string SimDevice::name() const {
  return "sim:" + std::to_string(index_) + " (" + profile_.name + ")";
}

Stream& SimDevice::create_stream(std::string name) {
  std::lock_guard lock(streams_mu_);
  streams_.push_back(std::make_unique<SimStream>(*this, std::move(name)));
  return *streams_.back();
}

void SimDevice::synchronize() {
  std::vector<SimStream*> all;
  {
    std::lock_guard lock(streams_mu_);
    for (auto& s : streams_) all.push_back(s.get());
  }
  std::exception_ptr first;
  for (SimStream* s : all) {
    try {
      s->synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
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

void* SimDevice::raw_alloc(size_t bytes) {
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lock(mem_mu_);
  if (raw_bytes_ + rounded > options_.capacity_bytes) return nullptr;  // out of device memory
  void* p = nullptr;
  if (rounded <= options_.backed_bytes) {
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

uint64_t guaranteed_backed_bytes(const SimDeviceOptions& options) {
  return options.backed_bytes <= 4096 ? 0 : (options.backed_bytes - 4096) * 4 / 5;
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
