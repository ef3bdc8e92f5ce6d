// zero/fetch_coordinator.h — the fetch side of the ZeRO engine (DESIGN.md "Coordinator"):
// the one state machine of a parameter group's full parameters, the residency policies that
// keep gathered groups past their release (core/residency.h: the expert shard cache and the
// dense keep, two policies of one interface), and the one gather path, whose wire format is a
// GatherCodec.
//
// States (GroupState::state, zero_detail::FetchState) and the transitions that move them:
//
//   Sharded --gather--> Gathering --acquire--> Full --release--> Sharded
//   Sharded --acquire (gather on demand)-----> Full
//   Full --release, kept--> Held --acquire, hit--> HeldFull --release--> Held
//   Gathering --discard, kept--> HeldUnused --acquire, hit--> HeldFull
//   Gathering | Held | HeldUnused --drop (discard, eviction, end of passes)--> Sharded
//
// hpZ (GroupComms::secondary): the gather of a Sharded group runs over the sharding group the
// first time in a step; when its full buffer is freed before the step's passes end (a release
// no residency keeps, an eviction, a discarded prefetch) this rank keeps its secondary shard,
// and while that exists the group's gathers run over the partition only. The secondary shards
// go at the end of the passes.
//
// Counters (EngineCounters, GroupCounters) and trace events are emitted by these transitions
// only: on_gathered (a gather issued), on_acquired, on_dropped, count_live; nowhere else.
//
// Rule that keeps collectives matched: every gather is issued in an order that is a pure
// function of the call sequence of acquire/release/prefetch hints, which the model makes
// identical on every rank of a group; decision state (recorded orders, live bytes, kept bytes)
// is kept per gather communicator.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/event_pool.h"
#include "core/residency.h"
#include "prefetch/budget_planner.h"
#include "prefetch/prefetch_planner.h"
#include "zero/dense_keep.h"
#include "zero/gather_codec.h"
#include "zero/group_state.h"

namespace moezero {

class FetchCoordinator {
 public:
  // [in] codec: the wire format of every gather (null: IdentityCodec). [in] planner: where
  // the dense recorded order is kept and asked (null: an own one). Not owned.
  FetchCoordinator(zero_detail::EngineShared& shared, std::unique_ptr<ResidencyCache> expert_cache,
                   std::shared_ptr<const GatherCodec> codec, prefetch::PrefetchPlanner* planner);

  void initialise();  // after every group was added: the live limit per communicator

  // ParamProvider's fetch protocol (see core/param_group.h).
  Tensor acquire(int g, Stream& compute);
  void release(int g);
  void prefetch(int g, ParamProvider::FetchReason reason);
  void prefetch_block(std::span<const int> ids, ParamProvider::FetchReason reason);
  void prefetch_set(std::span<const int> ids, ParamProvider::FetchReason reason);
  void discard_prefetch(int g);
  void set_keep_score(int g, double score);
  uint64_t fetch_ticket(int g) const;
  bool cached(int g) const;
  bool needs_fetch(int g) const;
  bool may_hold(int g) const;
  void use_held(int g);
  void hold(int g);

  // The end of a step's passes: prefetches nobody acquired are dropped, every residency
  // emptied (the optimizer is about to change the shards), the recorded orders re-learned.
  void end_passes();
  double collect_stall_ms();  // sum of timed waits since the last call (events completed)
  void collect_gather_ms();   // adds the timed expert gathers into group_counters

  // The dense recorded orders (checkpoints, zero_state.cpp).
  std::vector<std::pair<std::string, std::vector<int>>> orders() const;
  void set_orders(const std::vector<std::pair<std::string, std::vector<int>>>& orders);

 private:
  using State = zero_detail::FetchState;
  using Origin = zero_detail::FetchOrigin;
  zero_detail::GroupState& group(int g) { return m_.group(g); }
  const zero_detail::GroupState& group(int g) const {
    return *m_.groups.at(static_cast<size_t>(g));
  }
  static Origin origin_of(ParamProvider::FetchReason reason);

  // ---- the one gather path (fetch_gather.cpp)
  // One all-gather of `todo` (sharded groups of one gather communicator, in this order).
  // coalesced: the groups' wire parts side by side in one buffer, decoded into each group's
  // full buffer; otherwise `todo` is one group, gathered in place when the codec allows.
  void gather(std::span<const int> todo, Origin origin, bool coalesced);
  void gather_in_place(int g, Origin origin);
  // Transition Sharded -> Gathering of group g, its gather recorded on the gather stream.
  // wire_bytes: the all-gather's output bytes of this group in the codec's wire format.
  void on_gathered(int g, Origin origin, uint64_t ticket, uint64_t wire_bytes);
  void prefetch_ahead();  // the dense recorded order of every gather communicator
  // One communicator's walk over `next` (its recorded order ahead): the sharded dense groups in
  // order, within zero.prefetch_bucket_size bytes and the live limit, stopping at the first that
  // does not fit; gathers them when `issue`. Returns true when it reaches group `target` (taken
  // as sharded) inside the window (-1: none).
  bool walk_dense(std::span<const int> next, int target, bool issue);
  // Whether prefetch_ahead would gather group g (dense, just released) again at the next
  // acquire: the same walk, issuing nothing (the same on every rank).
  bool regathered_at_once(int g);

  // ---- hpZ secondary shards (fetch_secondary.cpp)
  // Gathers the groups of `todo` that hold a secondary shard over their partition (one
  // all-gather; coalesced: side by side) and returns the others, in `todo`'s order.
  std::vector<int> gather_secondary(std::span<const int> todo, Origin origin, bool coalesced);
  // Before group g's full buffer is freed within the step: this rank's slice of it over its
  // partition, kept (when it has a partition and no secondary shard yet).
  void keep_secondary(int g);
  void drop_secondaries();  // end of passes: every secondary shard, in group order

  // ---- the shard cache's value policy (fetch_value.cpp; shard_cache.eviction=value)
  bool values_keep() const;                // the expert cache ranks by KeepScore::Density
  double keep_value(int g) const;          // expert g's density now (prefetch/budget_planner.h)
  prefetch::StepClock step_clock() const;  // where the step is (budget_planner.h)
  void note_layer(int layer);              // the layer running now (acquires, Needed hints)
  // Refreshes every resident expert's density; those unpinned and worth 0 (no use left in the
  // step) are evicted and freed.
  void refresh_values();
  // A hint of `reason` Needed (a layer's forward after routing): `ids` are used in this
  // micro-batch, and the routing of their layers is known.
  void note_needed(std::span<const int> ids, ParamProvider::FetchReason reason);

  // ---- transitions and residency
  void count_acquire(int g);  // hit / miss / exact / needed bytes
  void count_live(const zero_detail::GroupState& st, int sign);  // +1 gathered, -1 no longer
  uint64_t live_bytes_of(const Communicator* comm) const;
  // The residency policy that may keep group g: the shard cache (experts, may be null) or the
  // dense keep of its gather communicator.
  ResidencyCache* residency(const zero_detail::GroupState& st) const;
  bool offer(int g, State kept_as);  // admits a gathered group to its residency (true: kept)
  // Gathering or Held*: the buffer goes back to the allocator (hpZ: after keep_secondary, unless
  // the step's passes are ending).
  enum class Secondary : uint8_t { Keep, Skip };
  void drop_resident(int g, Secondary secondary = Secondary::Keep);
  void alias_shard(int g);
  void unalias_shard(int g);
  void measure_wait(Stream& compute, const Event& ready, int g);
  void trace_cache(const char* what, int g);

  static std::string comm_key(const Communicator* c) {
    return c->group().str() + "/" + c->channel();
  }

  zero_detail::EngineShared& m_;
  std::unique_ptr<ResidencyCache> cache_;  // expert shard cache (may be null)
  std::shared_ptr<const GatherCodec> codec_;
  // The dense recorded order of every gather communicator, keyed by comm_key (see
  // prefetch_ahead): iteration order must be the same on every rank, so never by address.
  std::unique_ptr<prefetch::PrefetchPlanner> own_planner_;  // when none was given
  prefetch::PrefetchPlanner* planner_;
  // Gathered (Gathering or acquired) bytes of params_sharded groups: all, and per gather
  // communicator (the latter is what prefetch decisions see; never iterated).
  uint64_t live_bytes_ = 0;
  std::map<const Communicator*, uint64_t> live_by_comm_;
  // Dense groups kept gathered across micro-batches (dense_keep.h), one policy per gather
  // communicator: a function of that communicator's groups and their release order, so the
  // same on all of its ranks (end_passes drops what they kept in group order).
  std::map<const Communicator*, std::unique_ptr<ResidencyCache>> dense_keep_;
  // zero.max_live_parameters split evenly over the gather communicators of sharded groups (the
  // world and this rank's EDP group): each communicator's prefetch decisions see only its own
  // groups (identical on its ranks), and the shares add up to the limit.
  uint64_t live_limit_per_comm_ = 0;
  uint64_t next_ticket_ = 1;  // GroupState::ticket of the next gather issued
  // The value policy's step clock: the model's layers (1 + the largest GroupSpec::layer), and
  // the layer of the latest acquire or Needed hint in pass() cur_layer_pass_.
  int layers_ = 1;
  int cur_layer_ = 0;
  int64_t cur_layer_pass_ = -1;
  // hpZ: bytes of the secondary shards held (the trace's secondary_shard_bytes counter).
  uint64_t secondary_bytes_ = 0;
  // Event pairs around this step's expert all-gathers on the gather stream (pooled events).
  struct TimedGather {
    int group = -1;
    Event* start = nullptr;
    Event* end = nullptr;
    double share = 1.0;  // of the collective's time (a coalesced gather: by bytes)
  };
  std::vector<TimedGather> timed_gathers_;
  EventPool gather_events_;  // recycled by collect_gather_ms
  // Event pairs around this step's waits of the compute stream on gathers (pooled events).
  std::vector<std::pair<Event*, Event*>> timed_waits_;
  EventPool stall_events_;  // recycled by collect_stall_ms
};

}  // namespace moezero
