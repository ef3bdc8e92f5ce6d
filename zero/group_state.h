// zero/group_state.h — one parameter group's state on this rank, and what the ZeRO engine's
// parts share (the fetch coordinator, the gradient buckets, the optimizer step).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/trace.h"
#include "zero/zero_engine.h"

namespace moezero {
namespace zero_detail {

// Where a group's full parameters are: the fetch coordinator's one state machine
// (fetch_coordinator.h). "Held" states are kept resident by a residency policy (the shard
// cache for experts, the dense keep for dense groups), which holds this rank's shard as a slice
// of the gathered buffer (the shard's own buffer is given back: alias_shard).
enum class FetchState : uint8_t {
  Sharded,     // only the shard exists
  Gathering,   // gather issued, not acquired since (in flight or complete): waste if freed so
  Full,        // acquired
  HeldFull,    // acquired, and held by a residency policy
  Held,        // released, kept resident by a residency policy
  HeldUnused,  // kept resident by a residency policy without an acquire since its gather
};

// Who started the gather in flight or resident (expert counters, README "Prefetch"):
// OnDemand or AfterRouting: a miss; Planned: a hit; Exact: an exact prefetch; Recorded: the
// dense recorded order. Planned and Recorded gathers are discardable prefetches.
enum class FetchOrigin : uint8_t { OnDemand, Planned, AfterRouting, Exact, Recorded };

// One parameter group on this rank. Ranges are in elements of the flat, padded group buffer.
struct GroupState {
  GroupLayout layout;
  GroupComms comms;
  int n = 1;                    // ranks sharing the group
  int rank = 0;                 // this rank's position among them
  bool params_sharded = false;  // stage 3 and large enough: gathered on acquire
  bool grads_sharded = false;   // stage >= 1: gradients reduce-scattered into shards
  bool grads_deferred = false;  // stage 1: reduce-scattered once per step (last micro-batch)
  bool opt_sharded = false;     // stage >= 1: optimizer state is a shard
  bool expert = false;          // GroupKind::Expert: policy-driven prefetch, cacheable
  int64_t padded = 0;           // elements, multiple of n * kParamAlignElems
  int64_t shard_elems = 0;      // padded / n
  int64_t opt_offset = 0;       // first element of this rank's optimizer range
  int64_t opt_elems = 0;        // its length (shard_elems when opt_sharded, else padded)
  // Set when comms name reduce_intra and reduce_cross: the two-hop gradient reduce-scatter.
  std::optional<TwoHopReduce> two_hop;

  // Model states (persistent).
  TensorBuffer param_shard;          // compute dtype (shard_elems): params_sharded && bf16
  TensorBuffer full_persistent;      // compute dtype (padded): !params_sharded
  TensorBuffer master;               // f32 (opt_elems) unless it aliases the compute params
  Tensor master_view;                // f32 (opt_elems): the fp32 master range
  TensorBuffer grad_acc;             // compute dtype: (shard_elems) if grads_sharded else (padded)
  TensorBuffer exp_avg, exp_avg_sq;  // f32 (opt_elems)

  // Transient.
  TensorBuffer full;       // gathered parameters (params_sharded), compute dtype (padded)
  TensorBuffer grad_full;  // f32 (padded), alive from grad() to the bucket's reduction
  // This micro-batch's gradient accumulates straight into grad_acc (grad_full stays empty):
  // one rank, fp32, the step's first micro-batch, when grad_acc is still zero and the reduction
  // would be grad_acc = 0 + grad_full (ZeroEngine::Impl::grad).
  bool grad_direct = false;
  // grad_accum_dtype (padded), stage 1: this rank's unreduced sum of the step's earlier
  // micro-batches (absent after the first, or at one).
  TensorBuffer grad_local;
  // hpZ (comms.secondary, null when off): compute dtype (secondary_elems()), this rank's slice
  // [comms.secondary->rank() * secondary_elems(), +secondary_elems()) of the full parameters,
  // kept when the group's full buffer is first freed in a step, until the end of the step's
  // passes; while it exists, gathers of the group all-gather the partition's slices
  // (fetch_secondary.cpp). Its presence is a function of the group's fetch history, identical
  // on every rank of the sharding group.
  TensorBuffer secondary;

  // Fetch state (fetch_coordinator.h): where the full parameters are, and of the latest
  // gather: who started it, and its position in the issue order of the gather stream (FIFO,
  // so also its completion order; 0 before the first; a function of agreed state).
  FetchState state = FetchState::Sharded;
  FetchOrigin origin = FetchOrigin::OnDemand;
  uint64_t ticket = 0;
  double keep_score = 1.0;  // the cache's lfu score (set_keep_score)
  // The value policy's record of this micro-batch (shard_cache.eviction=value; fetch_value.cpp),
  // as EngineShared::pass() values: the pass in which its layer's forward declared the experts
  // it needs (a Needed hint), in which it was acquired or used held (or declared needed), and
  // in which its gradient was asked for (its backward). -1: never.
  int64_t routed_pass = -1, used_pass = -1, grad_pass = -1;
  std::unique_ptr<Event> gathered;  // recorded on the gather stream after the all-gather

  size_t full_bytes(DType dt) const { return static_cast<size_t>(padded) * dtype_size_bytes(dt); }
  int64_t secondary_elems() const { return padded / comms.secondary->size(); }
  // The gradient that grad() handed out for the current micro-batch.
  Tensor grad_now() const { return grad_direct ? grad_acc.view() : grad_full.view(); }
  // What the all-gather reads: the compute-dtype shard (the master itself in fp32 mode).
  const Tensor& param_source() const { return param_shard ? param_shard.view() : master.view(); }
  // Held by a residency policy with an exact codec: this rank's compute-dtype shard is the
  // slice [rank * shard_elems, +shard_elems) of `full` (alias_shard; a lossy codec keeps the
  // shard's own buffer).
  bool shard_aliased() const { return shard_in_full; }
  bool shard_in_full = false;  // set by alias_shard, cleared by unalias_shard
  // Acquired and held until its release (FetchCoordinator::hold): its bytes are out of the
  // live count (the release does not take them out again).
  bool held_outside_live = false;
  bool acquired() const { return state == FetchState::Full || state == FetchState::HeldFull; }
  // Gathered and not acquired since: wasted if freed like this (experts).
  bool unused() const { return state == FetchState::Gathering || state == FetchState::HeldUnused; }
};

// What the engine's parts share: the device and streams, the options, the groups, the
// counters, the trace and the step clock.
struct EngineShared {
  EngineShared(Device& d, EngineStreams s, ZeroOptions o)
      : device(d), streams(s), options(std::move(o)) {
    params_updated = device.create_event();
    replicated_ready = device.create_event();
  }

  GroupState& group(int g) {
    MOEZERO_CHECK(g >= 0 && g < static_cast<int>(groups.size()), "parameter group index ", g,
                  " out of range (", groups.size(), " groups)");
    return *groups[static_cast<size_t>(g)];
  }
  // compute waits for `ready`, the end of communication on another stream: timed by the trace
  // recorder when one is installed (exposed_comm_ms); `name`: its stall span (may be null)
  void wait_on_comm(Stream& compute, const Event& ready, const char* name) {
    if (trace)
      trace->comm_wait(compute, ready, name);
    else
      compute.wait(ready);
  }
  bool tracing() const { return trace && trace->tracing(); }

  Device& device;
  EngineStreams streams;
  ZeroOptions options;
  std::vector<std::unique_ptr<GroupState>> groups;
  std::unique_ptr<Event> params_updated;    // compute: shards final for this step
  std::unique_ptr<Event> replicated_ready;  // gather: replicated params refreshed
  int64_t step = 0;                         // optimizer steps applied
  int64_t micro_batch = 0;                  // finish_backward calls since the last step
  // The current micro-batch of the current step as one number (distinct per micro-batch).
  int64_t pass() const { return step * (int64_t{1} << 32) + micro_batch; }
  int64_t backward_pass = -1;  // pass() of the latest grad() call: that pass's backward began
  EngineCounters counters;
  std::vector<GroupCounters> group_counters;  // per group, like counters
  TraceRecorder* trace = nullptr;
};

}  // namespace zero_detail
}  // namespace moezero
