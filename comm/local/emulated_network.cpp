// comm/local/emulated_network.cpp — waits on the network model in wall-clock time.
#include "comm/local/emulated_network.h"

#include <cmath>

#include "comm/sim/nic_traffic.h"
#include "core/error.h"

namespace moezero::comm {

namespace {
using Clock = std::chrono::steady_clock;
}

Traffic emulated_traffic(const CommEmulation& spec, const CollectiveShape& shape) {
  // nics_per_node 0 keeps net_model's per-rank flows (nic_traffic.h); config_checks refuses
  // nics_per_node > 0 without ranks_per_node.
  return nic_collective_traffic(SimNetworkSpec{spec, spec.nics_per_node}, shape);
}

EmulatedNetwork::EmulatedNetwork(const CommEmulation& spec) : model_(spec) {}

double EmulatedNetwork::now_s() const {
  return std::chrono::duration<double>(Clock::now() - origin_).count();
}

EmulatedNetwork::Id EmulatedNetwork::start(const CollectiveShape& shape, int waiters) {
  MOEZERO_CHECK(waiters >= 1, "EmulatedNetwork::start: no waiters");
  const Traffic traffic = emulated_traffic(model_.spec(), shape);
  std::lock_guard<std::mutex> lock(mu_);
  const Id id = model_.start(now_s(), traffic);
  pending_[id] = Pending{shape.op, waiters};
  ++starts_;
  cv_.notify_all();
  return id;
}

void EmulatedNetwork::finish_waiter_locked(Id id, bool completed) {
  Pending& p = pending_.at(id);
  if (--p.waiters_left > 0) return;
  if (completed || model_.finished(id)) {
    if (recent_.size() == kRecentSpans) recent_.pop_front();
    recent_.push_back(ModelledSpan{p.op, model_.start_s(id), model_.completion_s(id)});
    model_.release(id);
  }
  // An aborted collective's flows stay in the model: the world is dead.
  pending_.erase(id);
}

bool EmulatedNetwork::wait(Id id, const std::atomic<bool>& aborted) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const double now = now_s();
    model_.advance_to(now);
    const double until = model_.projected_completion_s(id);
    if (model_.finished(id) && now >= until) break;
    if (aborted.load()) {
      finish_waiter_locked(id, false);
      return false;
    }
    const uint64_t seen = starts_;
    // Round up so that the wake-up is never before the modelled completion.
    const auto deadline =
        origin_ + std::chrono::nanoseconds(static_cast<int64_t>(std::ceil(until * 1e9)));
    cv_.wait_until(lock, deadline, [&] { return aborted.load() || starts_ != seen; });
  }
  finish_waiter_locked(id, true);
  return true;
}

void EmulatedNetwork::notify_abort() {
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

std::vector<ModelledSpan> EmulatedNetwork::recent() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {recent_.begin(), recent_.end()};
}

}  // namespace moezero::comm
