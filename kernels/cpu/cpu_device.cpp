// kernels/cpu/cpu_device.cpp — CpuDevice, CpuStream (an in-order worker thread) and CpuEvent.
#include "kernels/cpu/cpu_device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/error.h"
#if defined(__SANITIZE_THREAD__)
#include <tbb/global_control.h>
#endif
#include "kernels/cpu/cpu_ops.h"

#if MOEZERO_HAVE_OPENBLAS
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace moezero::cpu {

// ---- EventState ------------------------------------------------------------------------

void EventState::complete(double virtual_s, std::exception_ptr err) {
  {
    std::lock_guard lock(mu);
    time = std::chrono::steady_clock::now();
    time_s = virtual_s;
    error = std::move(err);
    done = true;
  }
  cv.notify_all();
}

void EventState::wait() {
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
}

bool EventState::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu);
  return cv.wait_for(lock, timeout, [&] { return done; });
}

namespace {
// How often a blocked host wait looks at the device's limit and abort flag.
constexpr std::chrono::milliseconds kWaitPoll{20};
}  // namespace

// ---- CpuStream -------------------------------------------------------------------------

CpuStream::CpuStream(CpuDevice& device, std::string name)
    : Stream(std::move(name)), device_(device), worker_([this] { run(); }) {}

CpuStream::~CpuStream() { stop(); }

void CpuStream::stop() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  worker_.join();
}

Device& CpuStream::device() const { return device_; }

void CpuStream::push(Task t) {
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(t));
    ++enqueued_;
  }
  cv_work_.notify_one();
}

void CpuStream::enqueue_host(std::function<void()> fn) {
  push(Task{launch_ready_s(), std::move(fn), nullptr, nullptr});
}

void CpuStream::push_timed(double ready_s, std::function<double(double)> fn) {
  push(Task{ready_s, nullptr, std::move(fn), nullptr});
}

void CpuStream::enqueue_marker(std::shared_ptr<EventState> state) {
  push(Task{host_ready_s(), nullptr, nullptr, std::move(state)});
}

double CpuStream::clock_s() const {
  std::lock_guard lock(mu_);
  return clock_s_;
}

void CpuStream::wait(const Event& event) {
  const auto* cpu_event = dynamic_cast<const CpuEvent*>(&event);
  MOEZERO_CHECK(cpu_event != nullptr && cpu_event->kind() == device_.kind(), "stream '", name(),
                "' on ", device_.name(), " cannot wait on an event of another backend");
  std::shared_ptr<EventState> state = cpu_event->state();
  if (!state) return;  // never recorded: nothing to wait for (CUDA semantics)
  push_timed(host_ready_s(), [state](double start) {
    state->wait();
    if (state->error) std::rethrow_exception(state->error);  // propagate along the edge
    return std::max(start, state->time_s);
  });
}

void CpuStream::run() {
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
        if (task.timed)
          end = std::max(start, task.timed(start));
        else
          task.fn();
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

void CpuStream::synchronize() {
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
  on_synchronized(clock);
  if (err) std::rethrow_exception(err);
}

bool CpuStream::query() {
  std::lock_guard lock(mu_);
  if (error_) std::rethrow_exception(error_);
  return done_.completed() == enqueued_;
}

void CpuStream::check() {
  std::lock_guard lock(mu_);
  if (error_) std::rethrow_exception(error_);
}

// ---- CpuEvent --------------------------------------------------------------------------

DeviceKind CpuEvent::kind() const { return device_.kind(); }

const char* CpuEvent::backend_word() const {
  return device_.kind() == DeviceKind::Sim ? "simulated" : "CPU";
}

void CpuEvent::record(Stream& stream) {
  auto* cpu_stream = dynamic_cast<CpuStream*>(&stream);
  MOEZERO_CHECK(cpu_stream != nullptr && stream.device().kind() == device_.kind(), "a ",
                backend_word(), " event cannot be recorded on stream '", stream.name(), "' of ",
                stream.device().name());
  auto state = std::make_shared<EventState>();
  {
    std::lock_guard lock(mu_);
    state_ = state;
  }
  cpu_stream->enqueue_marker(std::move(state));
}

std::shared_ptr<EventState> CpuEvent::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

bool CpuEvent::query() const {
  auto s = state();
  if (!s) return true;
  std::lock_guard lock(s->mu);
  if (s->done && s->error) std::rethrow_exception(s->error);
  return s->done;
}

void CpuEvent::synchronize() const {
  auto s = state();
  if (!s) return;
  const auto start = std::chrono::steady_clock::now();
  while (!s->wait_for(kWaitPoll)) device_.check_host_wait(start, "an event of " + device_.name());
  if (s->error) std::rethrow_exception(s->error);
}

std::pair<std::shared_ptr<EventState>, std::shared_ptr<EventState>> CpuEvent::completed_pair(
    const Event& start) const {
  const auto* other = dynamic_cast<const CpuEvent*>(&start);
  MOEZERO_CHECK(other != nullptr && other->kind() == device_.kind(),
                "elapsed_ms_since: start event is not a ", backend_word(), " event");
  auto a = other->state();
  auto b = state();
  MOEZERO_CHECK(a && b, "elapsed_ms_since: both events must have been recorded");
  auto done = [](const std::shared_ptr<EventState>& s) {
    std::lock_guard lock(s->mu);
    return s->done;
  };
  MOEZERO_CHECK(done(a) && done(b), "elapsed_ms_since: both events must have completed");
  return {std::move(a), std::move(b)};
}

float CpuEvent::elapsed_ms_since(const Event& start) const {
  const auto [a, b] = completed_pair(start);
  return std::chrono::duration<float, std::milli>(b->time - a->time).count();
}

// ---- CpuDevice -------------------------------------------------------------------------

CpuDevice::CpuDevice(int index, size_t capacity_bytes) : index_(index) {
#if MOEZERO_HAVE_OPENBLAS
  // Ranks are threads and kernels parallelise with oneTBB above BLAS: one BLAS thread per call.
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
#endif
#if defined(__SANITIZE_THREAD__)
  // oneTBB is not built with ThreadSanitizer: the happens-before edges of its task handoff are
  // invisible, so every parallel_for would be reported. Under TSAN, kernels run their loops on
  // the calling (stream) thread; our own threads (ranks, streams, collectives) stay checked.
  static tbb::global_control serial_tbb(tbb::global_control::max_allowed_parallelism, 1);
#endif
  init(make_cpu_ops(), capacity_bytes);
}

void CpuDevice::init(std::unique_ptr<Ops> ops, size_t allocator_limit_bytes) {
  streams_.push_back(new_stream("default"));
  ops_ = std::move(ops);
  allocator_ = std::make_unique<Allocator>(*this, allocator_limit_bytes);
}

CpuDevice::~CpuDevice() { shutdown(); }

void CpuDevice::shutdown() noexcept {
  if (!allocator_ && streams_.empty()) return;
  try {
    synchronize();
  } catch (...) {
    // Errors were for the work's owner to collect; destruction must not throw.
  }
  allocator_.reset();  // needs the streams (pending frees wait on their events)
  streams_.clear();
}

std::unique_ptr<CpuStream> CpuDevice::new_stream(std::string name) {
  return std::make_unique<CpuStream>(*this, std::move(name));
}

Stream& CpuDevice::create_stream(std::string name) {
  std::lock_guard lock(streams_mu_);
  streams_.push_back(new_stream(std::move(name)));
  return *streams_.back();
}

void CpuDevice::synchronize() {
  std::vector<CpuStream*> all;
  {
    std::lock_guard lock(streams_mu_);
    for (auto& s : streams_) all.push_back(s.get());
  }
  std::exception_ptr first;
  for (CpuStream* s : all) {
    try {
      s->synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void* CpuDevice::raw_alloc(size_t bytes) {
  constexpr size_t kAlign = 256;
  size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  return std::aligned_alloc(kAlign, rounded);
}

void CpuDevice::raw_free(void* ptr) { std::free(ptr); }

void CpuDevice::memcpy_async(void* dst, const void* src, size_t bytes, Stream& stream) {
  MOEZERO_CHECK(&stream.device() == this, "memcpy_async on ", name(), " given stream of ",
                stream.device().name());
  if (bytes == 0) return;
  stream.enqueue_host([dst, src, bytes] { std::memcpy(dst, src, bytes); });
}

void CpuDevice::memset_async(void* dst, int value, size_t bytes, Stream& stream) {
  MOEZERO_CHECK(&stream.device() == this, "memset_async on ", name(), " given stream of ",
                stream.device().name());
  if (bytes == 0) return;
  stream.enqueue_host([dst, value, bytes] { std::memset(dst, value, bytes); });
}

}  // namespace moezero::cpu
