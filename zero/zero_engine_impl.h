// zero/zero_engine_impl.h — private state of ZeroEngine, shared by zero_engine.cpp (fetch,
// release, gradient buckets), zero_step.cpp (initialisation, optimizer step) and
// zero_state.cpp (state to and from the host).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/event_pool.h"
#include "zero/fetch_order.h"
#include "zero/zero_engine.h"

namespace moezero {
namespace zero_detail {

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
  int64_t padded = 0;           // elements, multiple of n * kParamAlignElems
  int64_t shard_elems = 0;      // padded / n
  int64_t opt_offset = 0;       // first element of this rank's optimizer range
  int64_t opt_elems = 0;        // its length (shard_elems when opt_sharded, else padded)

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
  TensorBuffer grad_local;  // f32 (padded), stage 1: this rank's unreduced sum of the step's
                            // earlier micro-batches (absent after the first, or at one)
  // Sharded: only the shard exists. Gathering: all-gather issued, not acquired. Full: acquired.
  // Cached: gathered, released, kept resident: by the shard cache (expert groups) or, for a
  // dense group, until the step ends (`dense_kept`, ZeroOptions::keep_dense_bytes).
  enum State { Sharded, Gathering, Full, Cached } state = Sharded;
  bool dense_kept = false;  // a dense group resident across this step's micro-batches
  bool expert = false;      // GroupKind::Expert: policy-driven prefetch, cacheable
  double keep_score = 1.0;  // the cache's lfu score (set_keep_score)
  bool prefetched = false;  // gathered ahead on a prediction or the recorded order (discardable)
  // Who started the gather in flight or resident (expert counters, README "Prefetch"):
  // OnDemand or AfterRouting: a miss; Planned: a hit; Exact: an exact prefetch.
  enum Origin { OnDemand, Planned, AfterRouting, Exact } origin = OnDemand;
  // Position of its latest gather in the issue order of the gather stream (FIFO, so also its
  // completion order); 0 before the first. A function of agreed state like the issue order.
  uint64_t ticket = 0;
  bool unused = false;  // gathered and not acquired since: wasted if freed like this (experts)
  // Cached (or acquired from the cache) with this rank's compute-dtype shard given back: the
  // gathered buffer holds the same values (ZeroEngine::Impl::alias_shard).
  bool shard_aliased = false;
  std::unique_ptr<Event> gathered;  // recorded on the gather stream after the all-gather

  size_t full_bytes(DType dt) const { return static_cast<size_t>(padded) * dtype_size_bytes(dt); }
  // What the all-gather reads: the compute-dtype shard (the master itself in fp32 mode).
  // The gradient that grad() handed out for the current micro-batch.
  Tensor grad_now() const { return grad_direct ? grad_acc.view() : grad_full.view(); }
  const Tensor& param_source() const { return param_shard ? param_shard.view() : master.view(); }
};

}  // namespace zero_detail

struct ZeroEngine::Impl {
  Impl(Device& device, EngineStreams streams, Communicator& world_misc, ZeroOptions options);

  void add_group(GroupSpec spec, GroupComms comms);
  void initialise();
  zero_detail::GroupState& group(int g);
  Tensor acquire(int g, Stream& compute);
  void release(int g, Stream& compute);
  void issue_fetch(int g);
  void prefetch_ahead();
  uint64_t live_bytes_of(const Communicator* comm) const;        // gathered bytes of comm's groups
  void count_live(const zero_detail::GroupState& st, int sign);  // +1 gathered, -1 no longer
  bool offer_to_cache(int g);  // admits a gathered expert to the shard cache (true: kept)
  void end_passes();
  Tensor grad(int g, Stream& compute);
  // A group whose gradient one rank reduces alone (flush_bucket's copy, no collective).
  bool reduced_alone(const zero_detail::GroupState& st) const {
    return st.n == 1 && !options.shard_single_rank;
  }
  void grad_ready(int g, Stream& compute);
  void accumulate_local(int g, Stream& compute);  // stage 1, not the last micro-batch
  void enqueue_reduction(int g);                  // grad_full joins its communicator's bucket
  void reduce_local_leftovers();                  // stage 1: sums whose last micro-batch never came
  struct Bucket {
    std::vector<int> groups;  // groups whose gradients await reduction
    uint64_t bytes = 0;
  };
  void flush_bucket(Bucket& b);
  void flush_buckets();
  StepResult optimizer_step(const AdamWHyper& hyper);
  // The steps of optimizer_step, in order (zero_step.cpp).
  void drain_passes();  // buckets reduced, prefetches settled, compute after reduce and gather
  // What the step's one host sync reads (enqueued on the compute stream by enqueue_readback).
  struct StepReadback {
    TensorBuffer sq;                     // f32 (norm_slots): squared shard norms, this rank
    TensorBuffer all_sq;                 // f32 (world, norm_slots): every rank's (world > 1)
    std::vector<int64_t> check_results;  // i64 (checks, 3): find_nonfinite results, on the host
  };
  StepReadback enqueue_readback(StepResult& r);  // also enqueues the copy into r.shard_sq
  void apply_adamw(const AdamWHyper& hyper, float grad_scale);  // every optimizer range
  void refresh_replicated();  // all-gather replicated groups' updated ranges (gather stream)
  void prefetch(int g, ParamProvider::FetchReason reason);
  void prefetch_block(std::span<const int> ids,
                      ParamProvider::FetchReason reason);                          // zero_block.cpp
  void prefetch_set(std::span<const int> ids, ParamProvider::FetchReason reason);  // zero_block.cpp
  void gather_block(std::span<const int> todo,
                    ParamProvider::FetchReason reason);  // zero_block.cpp
  void discard_prefetch(int g);
  void drop_resident(int g);  // a Cached or unused Gathering buffer goes back to the allocator
  // The shard cache keeps a gathered expert, which holds this rank's shard as its slice
  // [rank * shard_elems, +shard_elems): the separate compute-dtype shard buffer is given back
  // while the group stays resident (in fp32 mode master_view points into the gathered buffer)
  // and rebuilt from that slice when it leaves (unalias_shard, before the optimizer step).
  // So a cache holding every expert costs what ZeRO-2's replicated experts cost, not that
  // plus the shards.
  void alias_shard(int g);
  void unalias_shard(int g);
  void count_acquire(int g, bool issued_now);  // hit / miss / exact / needed bytes (experts)
  // compute waits for `ready`, the end of communication on another stream: timed by the trace
  // recorder when one is installed (exposed_comm_ms); `name`: its stall span (may be null)
  void wait_on_comm(Stream& compute, const Event& ready, const char* name);
  // compute waits for `ready` (the gather of group g); the wait is timed
  void measure_wait(Stream& compute, const Event& ready, int g);
  double collect_stall_ms();  // sum of timed waits since the last call (events completed)
  void collect_gather_ms();   // adds the timed expert gathers into group_counters
  std::vector<float> full_params_host(int g);
  void set_full_params_host(int g, std::span<const float> values);

  Device& device;
  EngineStreams streams;
  Communicator& world_misc;
  ZeroOptions options;
  std::vector<std::unique_ptr<zero_detail::GroupState>> groups;

  std::unique_ptr<Event> params_updated;    // compute: shards final for this step
  std::unique_ptr<Event> replicated_ready;  // gather: replicated params refreshed
  std::unique_ptr<Event> reduce_done;       // reduce: last bucket reduced
  bool reduce_recorded = false;

  // Prefetch by recorded order, kept per gather communicator (see prefetch_ahead).
  // Keyed by comm_key: iteration order (which communicator's prefetches are issued first)
  // must be the same on every rank, so never key by address.
  std::map<std::string, FetchOrder> orders;
  static std::string comm_key(const Communicator* c) {
    return c->group().str() + "/" + c->channel();
  }
  // Gathered (Gathering or Full) bytes of params_sharded groups: all, and per gather
  // communicator (the latter is what prefetch decisions see; never iterated).
  uint64_t live_bytes = 0;
  std::map<const Communicator*, uint64_t> live_by_comm;
  // Dense groups kept gathered across micro-batches, bytes per gather communicator: a function
  // of that communicator's groups and their release order, so the same on all of its ranks.
  std::map<const Communicator*, uint64_t> dense_kept_by_comm;
  bool keep_dense(int g);  // at release: keep this dense group to the step's end if it fits
  // max_live_bytes split evenly over the gather communicators of sharded groups (the world
  // and this rank's EDP group): each communicator's prefetch decisions see only its own
  // groups (identical on its ranks), and the shares add up to the limit.
  uint64_t live_limit_per_comm = 0;

  std::map<std::string, Bucket> buckets;  // one per reduce communicator, keyed by comm_key

  int64_t step = 0;
  EngineCounters counters;

  // Gradient health (docs/health.md).
  int64_t step_calls = 0;   // calls of optimizer_step (applied or skipped)
  int64_t micro_batch = 0;  // finish_backward calls since the last step
  int norm_slots = 0;       // max group count over the ranks of world_misc
  static constexpr int64_t kChecksPerChunk = 256;
  std::vector<TensorBuffer> check_chunks;  // i64 (kChecksPerChunk, 3): find_nonfinite results
  struct Check {
    int group;
    int64_t micro_batch;
    // Not scanned at grad_ready: the gradient went straight into grad_acc and stays there
    // unchanged until the step (one rank, fp32, one micro-batch per step), so the step scans it
    // only when the gradient norm is not finite (every non-finite element makes it so).
    bool deferred = false;
  };
  std::vector<Check> checks;  // this step's checks, in the order they were enqueued
  void check_gradient(int g, Stream& compute);
  std::optional<NonFiniteGrad> resolve_checks(const std::vector<int64_t>& results);
  // Fills the results of the deferred checks: none when the norm is finite, else scans now.
  void run_deferred_checks(std::vector<int64_t>& results, bool norm_finite);
  std::vector<GroupCounters> group_counters;  // per group, like counters
  TraceRecorder* trace = nullptr;
  // Event pairs around this step's expert all-gathers on the gather stream (pooled events).
  struct TimedGather {
    int group = -1;
    Event* start = nullptr;
    Event* end = nullptr;
    double share = 1.0;  // of the collective's time (a coalesced gather: by bytes)
  };
  std::vector<TimedGather> timed_gathers;
  uint64_t next_ticket = 1;               // GroupState::ticket of the next gather issued
  EventPool gather_events{device};        // recycled by collect_gather_ms
  std::unique_ptr<ResidencyCache> cache;  // expert shard cache (may be null)
  // Event pairs around this step's waits of the compute stream on gathers (pooled events).
  std::vector<std::pair<Event*, Event*>> timed_waits;
  EventPool stall_events{device};  // recycled by collect_stall_ms
};

}  // namespace moezero
