// comm/local/emulated_network.h — the network model (comm/net_model.h) on the wall clock, shared
// by every channel of one LocalWorld: a collective's ranks wait until the model says it is done.
//
// Model time is seconds since the world was created. When the last rank of a collective has
// arrived, the channel start()s it; each rank then wait()s until the model's completion time,
// which moves later whenever another collective starts on a port it uses. Every start wakes the
// waiters so that they re-read their completion time; a world abort wakes them too.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "comm/net_model.h"

namespace moezero::comm {

// A finished collective as modelled: start (last arrival) and completion, model seconds.
struct ModelledSpan {
  CollectiveOp op = CollectiveOp::Barrier;
  double start_s = 0.0;
  double end_s = 0.0;
};

// What `shape` puts on the ports: net_model's per-rank NICs, or with spec.nics_per_node > 0 (and
// two tiers) the node's NICs shared as NCCL's channels share them (comm/sim/nic_traffic.h).
// The bytes each rank sends by tier (LinkTally, the counters) do not depend on it.
Traffic emulated_traffic(const CommEmulation& spec, const CollectiveShape& shape);

class EmulatedNetwork {
 public:
  using Id = NetworkModel::Id;
  static constexpr size_t kRecentSpans = 256;

  explicit EmulatedNetwork(const CommEmulation& spec);

  // Starts `shape` now. [in] waiters: how many ranks will wait() on it (each exactly once).
  Id start(const CollectiveShape& shape, int waiters);
  // Blocks until `id` completes in the model or `aborted` is set. Returns false when the abort
  // came first. The last of its waiters forgets it.
  bool wait(Id id, const std::atomic<bool>& aborted);
  // Wakes every waiter so that it sees the abort.
  void notify_abort();

  // The last kRecentSpans finished collectives, oldest first.
  std::vector<ModelledSpan> recent() const;
  // Model seconds now.
  double now_s() const;

 private:
  struct Pending {
    CollectiveOp op;
    int waiters_left;
  };
  void finish_waiter_locked(Id id, bool completed);

  const std::chrono::steady_clock::time_point origin_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  NetworkModel model_;
  std::map<Id, Pending> pending_;
  std::deque<ModelledSpan> recent_;
  uint64_t starts_ = 0;  // bumps at every start: waiters re-read their completion time
};

}  // namespace moezero::comm
