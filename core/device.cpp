// core/device.cpp — device kind names (device.h holds the Device, Stream and Event interfaces).
#include "core/device.h"

#include <thread>

#include "core/error.h"

namespace moezero {

const char* device_kind_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Cuda: return "cuda";
    case DeviceKind::Sim: return "sim";
  }
  return "unknown";
}

int Device::add_wait_expiry_hook(std::function<std::string()> hook) {
  std::lock_guard lock(hooks_mu_);
  hooks_[next_hook_id_] = std::move(hook);
  return next_hook_id_++;
}

void Device::remove_wait_expiry_hook(int id) {
  std::lock_guard lock(hooks_mu_);  // waits for a hook running on another thread
  hooks_.erase(id);
}

void Device::abort_host_waits(const std::string& why) {
  {
    std::lock_guard lock(hooks_mu_);
    if (abort_reason_.empty()) abort_reason_ = why;
  }
  // The hooks run on the waiting thread (check_host_wait), never here: a communicator is
  // aborted by the thread that uses it (ncclCommAbort frees it).
  waits_aborted_ = true;
}

void Device::expire_host_wait(const std::string& what, const std::string& cause) {
  std::string in_flight;
  {
    std::lock_guard lock(hooks_mu_);
    for (auto& [id, hook] : hooks_) {
      std::string said;
      try {
        said = hook();
      } catch (const std::exception& e) {
        said = e.what();
      }
      if (!said.empty()) in_flight += (in_flight.empty() ? "" : "; ") + said;
    }
  }
  MOEZERO_THROW_AS(TimeoutError, "waiting on ", what, ": ", cause,
                   in_flight.empty() ? std::string() : "; in flight: " + in_flight);
}

void Device::check_host_wait(std::chrono::steady_clock::time_point start, const std::string& what) {
  if (waits_aborted_) {
    std::string why;
    {
      std::lock_guard lock(hooks_mu_);
      why = abort_reason_;
    }
    expire_host_wait(what, "aborted (" + why + ")");
  }
  const int64_t limit = wait_limit_ms_.load();
  if (limit > 0 && std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(limit))
    expire_host_wait(what, "no progress within comm.timeout_s = " +
                               std::to_string(static_cast<double>(limit) / 1000.0) +
                               " s (a peer may have died or diverged)");
}

void Device::bounded_host_wait(const std::function<bool()>& ready, const std::string& what) {
  // The per-layer host syncs are on the critical path: spin (yielding) for the first 2 ms, as
  // cudaStreamSynchronize's default scheduling would, then sleep at most 100 us per look.
  const auto start = std::chrono::steady_clock::now();
  constexpr auto kSpin = std::chrono::milliseconds(2);
  constexpr auto kMaxPause = std::chrono::microseconds(100);
  auto pause = std::chrono::microseconds(10);
  while (!ready()) {
    check_host_wait(start, what);
    if (std::chrono::steady_clock::now() - start < kSpin) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, kMaxPause);
    }
  }
}

}  // namespace moezero
