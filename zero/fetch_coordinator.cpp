// zero/fetch_coordinator.cpp — the group state machine: acquire, release, residency (shard
// cache for experts, dense keep for dense groups) and the end of a step's passes. The gather
// path and the prefetch hints live in fetch_gather.cpp. See fetch_coordinator.h.
#include "zero/fetch_coordinator.h"

#include <algorithm>

#include "core/error.h"
#include "core/trace.h"

namespace moezero {

using zero_detail::GroupState;

FetchCoordinator::FetchCoordinator(zero_detail::EngineShared& shared,
                                   std::unique_ptr<ResidencyCache> expert_cache,
                                   std::shared_ptr<const GatherCodec> codec,
                                   prefetch::PrefetchPlanner* planner)
    : m_(shared),
      cache_(std::move(expert_cache)),
      codec_(codec ? std::move(codec) : std::make_shared<IdentityCodec>()),
      own_planner_(planner ? nullptr : std::make_unique<prefetch::PrefetchPlanner>()),
      planner_(planner ? planner : own_planner_.get()),
      gather_events_(shared.device),
      stall_events_(shared.device) {}

void FetchCoordinator::initialise() {
  std::vector<const Communicator*> comms;
  for (auto& p : m_.groups)
    if (p->params_sharded && std::find(comms.begin(), comms.end(), p->comms.gather) == comms.end())
      comms.push_back(p->comms.gather);
  live_limit_per_comm_ = m_.options.zero.max_live_parameters / std::max<uint64_t>(1, comms.size());
  for (auto& p : m_.groups) layers_ = std::max(layers_, p->layout.spec().layer + 1);
  // Reused by the next micro-batch of this step (never past the step: the optimizer changes
  // the shard); the last micro-batch's own forward-to-backward reuse is the model's may_hold.
  const auto reusable = [this] { return m_.micro_batch + 1 < m_.options.micro_batches_per_step; };
  for (auto& p : m_.groups)
    if (p->params_sharded && !p->expert && !dense_keep_.count(p->comms.gather))
      dense_keep_[p->comms.gather] =
          std::make_unique<DenseKeep>(m_.options.zero.keep_dense_bytes, reusable);
}

ResidencyCache* FetchCoordinator::residency(const GroupState& st) const {
  if (st.expert) return cache_.get();
  auto it = dense_keep_.find(st.comms.gather);
  return it == dense_keep_.end() ? nullptr : it->second.get();
}

// ---- queries -----------------------------------------------------------------------------

void FetchCoordinator::set_keep_score(int g, double score) {
  GroupState& st = group(g);
  st.keep_score = score;
  st.used_pass = st.routed_pass = -1;      // a training routing: uses of this pass come after it
  if (st.expert && values_keep()) return;  // densities are refreshed before every decision
  ResidencyCache* r = residency(st);
  if (r && r->contains(g)) r->set_score(g, score);
}
uint64_t FetchCoordinator::fetch_ticket(int g) const {
  const GroupState& st = group(g);
  return st.state == State::Gathering ? st.ticket : 0;
}
bool FetchCoordinator::cached(int g) const {
  const State s = group(g).state;
  return s == State::Held || s == State::HeldUnused;
}
bool FetchCoordinator::needs_fetch(int g) const {
  const GroupState& st = group(g);
  return st.params_sharded && st.state == State::Sharded;
}
bool FetchCoordinator::may_hold(int g) const {
  const GroupState& st = group(g);
  if (!st.params_sharded || !st.acquired()) return true;
  if (st.state == State::HeldFull) return true;  // resident anyway: free
  // Its bytes are counted live already: holding keeps them so, within the limit.
  return live_bytes_of(st.comms.gather) <= live_limit_per_comm_;
}
void FetchCoordinator::use_held(int g) {
  const GroupState& st = group(g);
  MOEZERO_CHECK(!st.params_sharded || st.acquired(), "use_held of parameter group '",
                st.layout.spec().name, "', which is not held");
  if (st.expert) m_.counters.needed_expert_bytes += st.full_bytes(m_.options.compute_dtype);
  group(g).used_pass = m_.pass();
  note_layer(st.layout.spec().layer);
}
void FetchCoordinator::hold(int g) {
  GroupState& st = group(g);
  if (!st.params_sharded || st.held_outside_live) return;
  MOEZERO_CHECK(st.acquired(), "hold of parameter group '", st.layout.spec().name,
                "', which is not acquired");
  count_live(st, -1);  // held without a limit: the live limit bounds what is gathered ahead
  st.held_outside_live = true;
}
uint64_t FetchCoordinator::live_bytes_of(const Communicator* comm) const {
  auto it = live_by_comm_.find(comm);
  return it == live_by_comm_.end() ? 0 : it->second;
}

// ---- acquire and release -----------------------------------------------------------------

Tensor FetchCoordinator::acquire(int g, Stream& compute) {
  GroupState& st = group(g);
  // Follow the recorded order of this group's communicator; once this step leaves it, no
  // prefetch by order for that communicator until the step ends.
  planner_->dense_acquired(comm_key(st.comms.gather), g);
  Tensor out;
  if (!st.params_sharded) {
    if (st.expert) m_.counters.needed_expert_bytes += st.full_bytes(m_.options.compute_dtype);
    m_.wait_on_comm(compute, *m_.replicated_ready, "wait replicated params");
    out = st.full_persistent.view();
  } else {
    MOEZERO_CHECK(!st.acquired(), "acquire of parameter group '", st.layout.spec().name,
                  "', which is already acquired (release it first)");
    st.used_pass = m_.pass();
    note_layer(st.layout.spec().layer);
    if (st.state == State::Held || st.state == State::HeldUnused) {
      ResidencyCache& r = *residency(st);
      if (r.lookup(g, m_.step) == CacheLookup::Hit) {  // kept since an earlier release
        r.pin(g);
        if (st.expert) {
          m_.counters.cache_hits += 1;
          m_.group_counters[static_cast<size_t>(g)].cache_hits += 1;
          trace_cache("hit", g);
        } else {
          m_.counters.dense_kept_hits += 1;
        }
        st.full.buffer().retag(MemTag::FullParam);
        count_live(st, +1);
        st.state = State::HeldFull;
      } else {  // stale (cannot happen while residencies are emptied at every step; stay safe)
        drop_resident(g);
      }
    } else if (st.expert && cache_) {
      m_.counters.cache_misses += 1;
      m_.group_counters[static_cast<size_t>(g)].cache_misses += 1;
      trace_cache("miss", g);
    }
    if (st.state == State::Sharded) gather(std::span<const int>(&g, 1), Origin::OnDemand, false);
    count_acquire(g);
    measure_wait(compute, *st.gathered, g);
    st.full.buffer().record_stream(compute);
    if (st.state != State::HeldFull) st.state = State::Full;
    out = st.full.view();
  }
  prefetch_ahead();
  return out;
}

void FetchCoordinator::count_acquire(int g) {
  GroupState& st = group(g);
  if (!st.expert) return;  // dense groups follow the recorded order: not a prediction
  const size_t bytes = st.full_bytes(m_.options.compute_dtype);
  GroupCounters& gc = m_.group_counters[static_cast<size_t>(g)];
  m_.counters.needed_expert_bytes += bytes;
  if (st.state != State::Gathering) return;  // a residency hit: no gather
  if (st.origin == Origin::Planned) {
    m_.counters.prefetch_hits += 1;
    gc.prefetch_hits += 1;
  } else if (st.origin == Origin::Exact) {
    m_.counters.exact_prefetches += 1;
    gc.exact_prefetches += 1;
  } else {  // OnDemand, AfterRouting: started once the need was known
    m_.counters.prefetch_misses += 1;
    m_.counters.miss_bytes += bytes;
    gc.prefetch_misses += 1;
  }
}

void FetchCoordinator::release(int g) {
  GroupState& st = group(g);
  if (!st.params_sharded) return;
  MOEZERO_CHECK(st.acquired(), "release of parameter group '", st.layout.spec().name,
                "', which is not acquired");
  if (st.held_outside_live)
    st.held_outside_live = false;  // out of the live count since hold()
  else
    count_live(st, -1);
  if (st.state == State::HeldFull) {  // served by a residency: still resident
    residency(st)->unpin(g);
    st.full.buffer().retag(MemTag::Cache);
    st.state = State::Held;
    if (st.expert && values_keep()) refresh_values();  // freed when no use is left
    return;
  }
  if (residency(st) && offer(g, State::Held)) return;
  // A dense group released in a micro-batch's forward that the recorded order's prefetch would
  // gather again at once for its backward (within the prefetch window) stays as if prefetched:
  // the same bytes resident at the same time, one all-gather fewer, and none queued on the
  // gather stream in front of the expert gathers that routing starts meanwhile. Between
  // micro-batches zero.keep_dense_bytes decides, as before.
  if (!st.expert && m_.backward_pass != m_.pass() && regathered_at_once(g)) {
    count_live(st, +1);
    st.state = State::Gathering;
    st.origin = Origin::Recorded;
    return;
  }
  // hpZ: the next gather of the step stays inside the partition; the value policy knows when
  // there is none (no use left before the optimizer update).
  if (!(st.expert && values_keep() && keep_value(g) == 0.0)) keep_secondary(g);
  st.full.reset();  // stream-safe: reused only after gather and compute passed this point
  st.state = State::Sharded;
}

void FetchCoordinator::discard_prefetch(int g) {
  GroupState& st = group(g);
  if (!st.params_sharded || st.state != State::Gathering) return;
  if (st.origin != Origin::Planned && st.origin != Origin::Recorded) return;  // not a guess
  // Kept by the shard cache: not waste unless it leaves the cache unused (drop_resident counts
  // it). The dense keep takes only groups acquired in this micro-batch.
  if (st.expert && cache_ && !cache_->contains(g) && offer(g, State::HeldUnused)) {
    count_live(st, -1);  // kept for a later acquire (its gather may still be in flight)
    return;
  }
  drop_resident(g);
}

// ---- residency ---------------------------------------------------------------------------

bool FetchCoordinator::offer(int g, State kept_as) {
  GroupState& st = group(g);
  ResidencyCache& r = *residency(st);
  const bool by_value = st.expert && values_keep();
  if (by_value) refresh_values();  // every resident expert's density as of now
  CacheAdmit a = r.admit(g, st.full_bytes(m_.options.compute_dtype), m_.step,
                         by_value ? keep_value(g) : st.keep_score);
  for (int e : a.evicted) {
    trace_cache("evict", e);
    drop_resident(e);
    m_.counters.cache_evictions += 1;
  }
  if (st.expert && m_.tracing()) m_.trace->counter("cache_bytes", r.counters().bytes_resident);
  if (!a.admitted) return false;
  st.full.buffer().retag(MemTag::Cache);
  // The gathered buffer holds this rank's shard (exact codecs): give the shard's memory back.
  if (codec_->exact()) alias_shard(g);
  st.state = kept_as;
  return true;
}

// Before the state becomes Held*: the gathered buffer holds this rank's shard as its slice
// [rank * shard_elems, +shard_elems), so the separate compute-dtype shard buffer is given back
// while the group stays resident (in fp32 mode master_view points into the gathered buffer),
// and rebuilt from that slice when it leaves (unalias_shard, before the optimizer step). So a
// cache holding every expert costs what ZeRO-2's replicated experts cost, not that plus the
// shards.
void FetchCoordinator::alias_shard(int g) {
  GroupState& st = group(g);
  // bf16 mode: the bf16 shard is only the all-gather's source (the fp32 master stays); fp32
  // mode: the shard is the master itself, whose readers between here and unalias_shard
  // (state export, full_params_host) go through master_view.
  TensorBuffer& shard = st.param_shard ? st.param_shard : st.master;
  // The gather of this group (maybe still in flight) reads it on the gather stream; the last
  // optimizer step wrote it on the compute stream.
  shard.buffer().record_stream(*m_.streams.gather);
  shard.buffer().record_stream(*m_.streams.compute);
  if (!st.param_shard)
    st.master_view = st.full.view().view_elems(st.rank * st.shard_elems, Shape{st.shard_elems});
  shard.reset();
  st.shard_in_full = true;
}

void FetchCoordinator::unalias_shard(int g) {
  GroupState& st = group(g);
  st.shard_in_full = false;
  // On the gather stream: after the group's all-gather (FIFO), before the next gathers that
  // read the shard; the optimizer step's compute waits for the gather stream (drain_passes).
  Stream& gs = *m_.streams.gather;
  const DType dt = m_.options.compute_dtype;
  TensorBuffer shard(m_.device, dt, Shape{st.shard_elems}, MemTag::ParamShard, gs,
                     st.layout.spec().name.c_str());
  const Tensor mine = st.full.view().view_elems(st.rank * st.shard_elems, Shape{st.shard_elems});
  m_.device.memcpy_async(shard.view().data(), mine.data(), mine.size_bytes(), gs);
  shard.buffer().record_stream(*m_.streams.compute);  // the optimizer updates it there
  if (dt == DType::F32) {
    st.master = std::move(shard);
    st.master_view = st.master.view();
  } else {
    st.param_shard = std::move(shard);
  }
}

void FetchCoordinator::drop_resident(int g, Secondary secondary) {
  GroupState& st = group(g);
  if (st.expert && st.unused()) {  // gathered, never acquired, and not kept any longer: waste
    const size_t bytes = st.full_bytes(m_.options.compute_dtype);
    m_.counters.wasted_bytes += bytes;
    m_.group_counters[static_cast<size_t>(g)].wasted_bytes += bytes;
  }
  if (st.state == State::Gathering) count_live(st, -1);
  if (secondary == Secondary::Keep) keep_secondary(g);
  if (st.shard_aliased()) unalias_shard(g);
  st.full.reset();
  st.state = State::Sharded;
}

void FetchCoordinator::count_live(const GroupState& st, int sign) {
  const uint64_t bytes = st.full_bytes(m_.options.compute_dtype);
  uint64_t& of_comm = live_by_comm_[st.comms.gather];
  if (sign > 0) {
    of_comm += bytes;
    live_bytes_ += bytes;
    m_.counters.peak_live_bytes = std::max<uint64_t>(m_.counters.peak_live_bytes, live_bytes_);
  } else {
    of_comm -= bytes;
    live_bytes_ -= bytes;
  }
  if (m_.tracing()) m_.trace->counter("live_full_param_bytes", live_bytes_);
}

void FetchCoordinator::trace_cache(const char* what, int g) {
  if (!m_.tracing()) return;
  const GroupState& st = group(g);
  m_.trace->cache_event(what, st.layout.spec().name, st.layout.spec().layer,
                        st.layout.spec().expert, st.full_bytes(m_.options.compute_dtype));
}

// ---- the end of a step's passes ----------------------------------------------------------

void FetchCoordinator::end_passes() {
  // Prefetched groups that nobody acquired: give their memory back. Every residency is
  // emptied: the optimizer is about to change every shard.
  for (size_t i = 0; i < m_.groups.size(); ++i) {
    GroupState& p = *m_.groups[i];
    if (p.params_sharded && p.state == State::Gathering) {
      drop_resident(static_cast<int>(i), Secondary::Skip);
      m_.counters.prefetch_waste += 1;
    }
    MOEZERO_CHECK(!p.acquired(), "parameter group '", p.layout.spec().name,
                  "' is still acquired at the optimizer step (missing release)");
  }
  std::vector<int> kept;  // dense groups kept across micro-batches, dropped in group order
  for (auto& [comm, keep] : dense_keep_)
    for (int g : keep->invalidate_all()) kept.push_back(g);
  std::sort(kept.begin(), kept.end());
  for (int g : kept) drop_resident(g, Secondary::Skip);
  if (cache_) {
    for (int g : cache_->invalidate_all()) drop_resident(g, Secondary::Skip);
    if (m_.tracing()) m_.trace->counter("cache_bytes", cache_->counters().bytes_resident);
  }
  drop_secondaries();    // hpZ: the shards they were cut from change too
  planner_->end_step();  // (re-)learn each communicator's order
}

// ---- timings -----------------------------------------------------------------------------

void FetchCoordinator::measure_wait(Stream& compute, const Event& ready, int g) {
  Event* before = &stall_events_.take();
  Event* after = &stall_events_.take();
  timed_waits_.emplace_back(before, after);
  const int span = m_.tracing() ? m_.trace->begin_span(compute, SpanKind::Stall,
                                                       "wait " + group(g).layout.spec().name)
                                : -1;
  before->record(compute);
  m_.wait_on_comm(compute, ready, nullptr);  // traced as the stall span above
  after->record(compute);
  if (m_.trace) m_.trace->end_span(span);
}

double FetchCoordinator::collect_stall_ms() {
  double ms = 0.0;
  for (auto [before, after] : timed_waits_) {
    after->synchronize();
    ms += after->elapsed_ms_since(*before);
  }
  timed_waits_.clear();
  stall_events_.recycle();
  return ms;
}

void FetchCoordinator::collect_gather_ms() {
  for (const TimedGather& t : timed_gathers_) {
    t.end->synchronize();
    m_.group_counters[static_cast<size_t>(t.group)].gather_ms +=
        t.share * t.end->elapsed_ms_since(*t.start);
  }
  timed_gathers_.clear();
  gather_events_.recycle();
}

// ---- recorded orders ---------------------------------------------------------------------

std::vector<std::pair<std::string, std::vector<int>>> FetchCoordinator::orders() const {
  return planner_->dense_orders();
}

void FetchCoordinator::set_orders(
    const std::vector<std::pair<std::string, std::vector<int>>>& orders) {
  planner_->set_dense_orders(orders);
}

}  // namespace moezero
