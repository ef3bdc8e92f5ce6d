// zero/zero_engine.cpp — group state, gather/release, gradient buckets (see zero_engine.h).
// The optimizer step and parameter initialisation live in zero_step.cpp.
#include <algorithm>

#include "core/error.h"
#include "core/ops.h"
#include "core/trace.h"
#include "zero/zero_engine_impl.h"

namespace moezero {

using zero_detail::GroupState;

ZeroEngine::ZeroEngine(Device& device, EngineStreams streams, std::vector<GroupSpec> groups,
                       const std::function<GroupComms(const GroupSpec&)>& comms_of,
                       Communicator& world_misc, ZeroOptions options,
                       std::unique_ptr<ResidencyCache> expert_cache)
    : impl_(std::make_unique<Impl>(device, streams, world_misc, options)), options_(options) {
  impl_->cache = std::move(expert_cache);
  MOEZERO_CHECK(options.stage >= 0 && options.stage <= 3, "zero stage must be 0..3, got ",
                options.stage);
  MOEZERO_CHECK(options.compute_dtype == DType::F32 || options.compute_dtype == DType::BF16,
                "compute dtype must be f32 or bf16, got ", dtype_name(options.compute_dtype));
  MOEZERO_CHECK(streams.compute && streams.gather && streams.reduce,
                "ZeroEngine needs compute, gather and reduce streams");
  for (auto& spec : groups) {
    GroupComms comms = comms_of(spec);
    MOEZERO_CHECK(comms.gather && comms.reduce, "group '", spec.name, "' has no communicators");
    impl_->add_group(std::move(spec), comms);
  }
  impl_->initialise();
}

ZeroEngine::~ZeroEngine() = default;

int ZeroEngine::group_count() const { return static_cast<int>(impl_->groups.size()); }
const GroupLayout& ZeroEngine::layout(int group) const { return impl_->group(group).layout; }
EngineCounters ZeroEngine::counters() const { return impl_->counters; }
GroupCounters ZeroEngine::group_counters(int group) const {
  impl_->group(group);  // range check
  return impl_->group_counters[static_cast<size_t>(group)];
}
void ZeroEngine::set_trace(TraceRecorder* trace) { impl_->trace = trace; }
int64_t ZeroEngine::step_count() const { return impl_->step; }

Tensor ZeroEngine::acquire(int group, Stream& compute) { return impl_->acquire(group, compute); }
void ZeroEngine::release(int group, Stream& compute) { impl_->release(group, compute); }
Tensor ZeroEngine::grad(int group, Stream& compute) { return impl_->grad(group, compute); }
void ZeroEngine::grad_ready(int group, Stream& compute) { impl_->grad_ready(group, compute); }
void ZeroEngine::prefetch(int group, Stream&, FetchReason reason) {
  impl_->prefetch(group, reason);
}
void ZeroEngine::prefetch_block(std::span<const int> groups, Stream&, FetchReason reason) {
  impl_->prefetch_block(groups, reason);
}
void ZeroEngine::prefetch_set(std::span<const int> groups, Stream&, FetchReason reason) {
  impl_->prefetch_set(groups, reason);
}
void ZeroEngine::discard_prefetch(int group) { impl_->discard_prefetch(group); }
void ZeroEngine::set_keep_score(int group, double score) {
  auto& st = impl_->group(group);
  st.keep_score = score;
  if (impl_->cache && impl_->cache->contains(group)) impl_->cache->set_score(group, score);
}
uint64_t ZeroEngine::fetch_ticket(int group) const {
  const auto& st = *impl_->groups.at(static_cast<size_t>(group));
  return st.state == zero_detail::GroupState::Gathering ? st.ticket : 0;
}
bool ZeroEngine::cached(int group) const {
  return impl_->groups.at(static_cast<size_t>(group))->state == zero_detail::GroupState::Cached;
}
bool ZeroEngine::needs_fetch(int group) const {
  const auto& st = *impl_->groups.at(static_cast<size_t>(group));
  return st.params_sharded && st.state == zero_detail::GroupState::Sharded;
}
bool ZeroEngine::may_hold(int group) const {
  const auto& st = *impl_->groups.at(static_cast<size_t>(group));
  if (!st.params_sharded || st.state != zero_detail::GroupState::Full) return true;
  if (impl_->cache && impl_->cache->contains(group)) return true;  // resident anyway: free
  if (st.dense_kept) return true;                                  // kept to the step's end
  // Its bytes are counted live already: holding keeps them so, within the limit.
  return impl_->live_bytes_of(st.comms.gather) <= impl_->live_limit_per_comm;
}
void ZeroEngine::use_held(int group) {
  const auto& st = *impl_->groups.at(static_cast<size_t>(group));
  MOEZERO_CHECK(!st.params_sharded || st.state == zero_detail::GroupState::Full,
                "use_held of parameter group '", st.layout.spec().name, "', which is not held");
  if (st.expert) impl_->counters.needed_expert_bytes += st.full_bytes(options_.compute_dtype);
}
void ZeroEngine::finish_backward() {
  impl_->flush_buckets();
  impl_->micro_batch += 1;
}
StepResult ZeroEngine::step(const AdamWHyper& hyper) { return impl_->optimizer_step(hyper); }
std::vector<float> ZeroEngine::full_params_host(int group) {
  return impl_->full_params_host(group);
}

void ZeroEngine::set_full_params_host(int group, std::span<const float> values) {
  impl_->set_full_params_host(group, values);
}

// ---- Impl: fetch and release ------------------------------------------------------------

ZeroEngine::Impl::Impl(Device& d, EngineStreams s, Communicator& misc, ZeroOptions o)
    : device(d), streams(s), world_misc(misc), options(o) {
  params_updated = device.create_event();
  replicated_ready = device.create_event();
  reduce_done = device.create_event();
}

GroupState& ZeroEngine::Impl::group(int g) {
  MOEZERO_CHECK(g >= 0 && g < static_cast<int>(groups.size()), "parameter group index ", g,
                " out of range (", groups.size(), " groups)");
  return *groups[static_cast<size_t>(g)];
}

void ZeroEngine::Impl::issue_fetch(int g) {
  GroupState& st = group(g);
  Stream& gs = *streams.gather;
  const size_t bytes = st.full_bytes(options.compute_dtype);
  st.full = TensorBuffer(device, options.compute_dtype, Shape{st.padded}, MemTag::FullParam, gs,
                         st.layout.spec().name.c_str());
  gs.wait(*params_updated);  // the shards are final for this step
  const Tensor& src = st.param_source();
  Event* timed_end = nullptr;
  if (st.expert) {  // per-expert gather time: two pooled events, resolved at the step's sync
    Event& start = gather_events.take();
    timed_end = &gather_events.take();
    timed_gathers.push_back({g, &start, timed_end});
    start.record(gs);
  }
  if (trace && trace->tracing()) trace->label_next_collective(st.layout.spec().name);
  st.comms.gather->all_gather(src.data(), st.full.view().data(),
                              static_cast<size_t>(st.shard_elems), options.compute_dtype, gs);
  if (timed_end) timed_end->record(gs);
  st.gathered->record(gs);
  st.state = GroupState::Gathering;
  st.ticket = next_ticket++;
  st.origin = GroupState::OnDemand;
  st.unused = true;
  count_live(st, +1);
  counters.gathered_bytes += bytes;
  (st.expert ? counters.gathered_expert_bytes : counters.gathered_dense_bytes) += bytes;
  counters.gathers += 1;
  GroupCounters& gc = group_counters[static_cast<size_t>(g)];
  gc.gathers += 1;
  gc.gathered_bytes += bytes;
}

void ZeroEngine::Impl::count_acquire(int g, bool issued_now) {
  GroupState& st = group(g);
  if (!st.expert) return;  // dense groups follow the recorded order: not a prediction
  const size_t bytes = st.full_bytes(options.compute_dtype);
  GroupCounters& gc = group_counters[static_cast<size_t>(g)];
  counters.needed_expert_bytes += bytes;
  if (st.state == GroupState::Cached && !issued_now) return;  // a cache hit: no gather
  if (!st.unused) return;  // resident from an earlier acquire (cannot happen; stay exact)
  if (st.origin == GroupState::Planned) {
    counters.prefetch_hits += 1;
    gc.prefetch_hits += 1;
  } else if (st.origin == GroupState::Exact) {
    counters.exact_prefetches += 1;
    gc.exact_prefetches += 1;
  } else {  // OnDemand, AfterRouting: started once the need was known
    counters.prefetch_misses += 1;
    counters.miss_bytes += bytes;
    gc.prefetch_misses += 1;
  }
}

Tensor ZeroEngine::Impl::acquire(int g, Stream& compute) {
  GroupState& st = group(g);
  // Follow the recorded order of this group's communicator; once this step leaves it, no
  // prefetch by order for that communicator until the step ends.
  orders[comm_key(st.comms.gather)].on_acquire(g);
  Tensor out;
  if (!st.params_sharded) {
    if (st.expert) counters.needed_expert_bytes += st.full_bytes(options.compute_dtype);
    wait_on_comm(compute, *replicated_ready, "wait replicated params");
    out = st.full_persistent.view();
  } else {
    MOEZERO_CHECK(st.state != GroupState::Full, "acquire of parameter group '",
                  st.layout.spec().name, "', which is already acquired (release it first)");
    if (st.state == GroupState::Cached && st.dense_kept) {  // kept from an earlier micro-batch
      st.full.buffer().retag(MemTag::FullParam);
      counters.dense_kept_hits += 1;
      count_live(st, +1);
    } else if (st.state == GroupState::Cached) {
      if (cache->lookup(g, step) == CacheLookup::Hit) {
        cache->pin(g);
        st.full.buffer().retag(MemTag::FullParam);
        counters.cache_hits += 1;
        group_counters[static_cast<size_t>(g)].cache_hits += 1;
        if (trace && trace->tracing())
          trace->cache_event("hit", st.layout.spec().name, st.layout.spec().layer,
                             st.layout.spec().expert, st.full_bytes(options.compute_dtype));
        count_live(st, +1);
      } else {  // stale (cannot happen while the cache is emptied at every step; stay safe)
        drop_resident(g);
      }
    } else if (st.expert && cache) {
      counters.cache_misses += 1;
      group_counters[static_cast<size_t>(g)].cache_misses += 1;
      if (trace && trace->tracing())
        trace->cache_event("miss", st.layout.spec().name, st.layout.spec().layer,
                           st.layout.spec().expert, st.full_bytes(options.compute_dtype));
    }
    const bool issue_now = st.state == GroupState::Sharded;
    if (issue_now) issue_fetch(g);
    count_acquire(g, issue_now);
    st.unused = false;
    measure_wait(compute, *st.gathered, g);
    st.full.buffer().record_stream(compute);
    st.state = GroupState::Full;
    st.prefetched = false;
    out = st.full.view();
  }
  prefetch_ahead();
  return out;
}

void ZeroEngine::Impl::prefetch_ahead() {
  // Decisions about a group's gather must be identical on every rank of its sharding group,
  // or that communicator's collectives would be issued in different orders (a hang, or a
  // divergence error). The ranks of a sharding group share exactly: the groups of that
  // communicator, the order in which they are acquired, and when they are released. So each
  // communicator has its own recorded order, position, window and live-bytes limit, computed
  // from its own groups only; its walk issues gathers in recorded order and stops at the first
  // group that does not fit (never skipping ahead). Experts of other EDP groups, or the
  // position of the rank's last acquire among them, never enter a decision.
  for (auto& [key, o] : orders) {  // keyed by group and channel: the same order on every rank
    const std::span<const int> next = o.ahead();  // empty unless replaying
    if (next.empty()) continue;
    uint64_t ahead = 0;
    uint64_t live = live_bytes_of(group(o.recorded().front()).comms.gather);
    for (int g : next) {
      GroupState& st = group(g);
      if (!st.params_sharded || st.expert) continue;  // experts: prefetched by their policy
      const size_t bytes = st.full_bytes(options.compute_dtype);
      if (st.state == GroupState::Sharded) {
        if (ahead + bytes > options.prefetch_bucket_bytes || live + bytes > live_limit_per_comm)
          break;
        issue_fetch(g);
        st.prefetched = true;
        counters.prefetched += 1;
        live += bytes;
      }
      ahead += bytes;  // in flight or just issued
      if (ahead >= options.prefetch_bucket_bytes) break;
    }
  }
}

uint64_t ZeroEngine::Impl::live_bytes_of(const Communicator* comm) const {
  auto it = live_by_comm.find(comm);
  return it == live_by_comm.end() ? 0 : it->second;
}

void ZeroEngine::Impl::count_live(const GroupState& st, int sign) {
  const uint64_t bytes = st.full_bytes(options.compute_dtype);
  uint64_t& of_comm = live_by_comm[st.comms.gather];
  if (sign > 0) {
    of_comm += bytes;
    live_bytes += bytes;
    counters.peak_live_bytes = std::max<uint64_t>(counters.peak_live_bytes, live_bytes);
  } else {
    of_comm -= bytes;
    live_bytes -= bytes;
  }
  if (trace && trace->tracing()) trace->counter("live_full_param_bytes", live_bytes);
}

bool ZeroEngine::Impl::offer_to_cache(int g) {
  GroupState& st = group(g);
  CacheAdmit a = cache->admit(g, st.full_bytes(options.compute_dtype), step, st.keep_score);
  for (int e : a.evicted) {
    if (trace && trace->tracing()) {
      const GroupSpec& spec = group(e).layout.spec();
      trace->cache_event("evict", spec.name, spec.layer, spec.expert,
                         group(e).full_bytes(options.compute_dtype));
    }
    drop_resident(e);
    counters.cache_evictions += 1;
  }
  if (trace && trace->tracing()) trace->counter("cache_bytes", cache->counters().bytes_resident);
  if (!a.admitted) return false;
  st.full.buffer().retag(MemTag::Cache);
  st.state = GroupState::Cached;
  alias_shard(g);
  return true;
}

void ZeroEngine::Impl::alias_shard(int g) {
  GroupState& st = group(g);
  if (st.shard_aliased) return;
  // bf16 mode: the bf16 shard is only the all-gather's source (the fp32 master stays); fp32
  // mode: the shard is the master itself, whose readers between here and unalias_shard
  // (state export, full_params_host) go through master_view.
  TensorBuffer& shard = st.param_shard ? st.param_shard : st.master;
  // The gather of this group (maybe still in flight) reads it on the gather stream; the last
  // optimizer step wrote it on the compute stream.
  shard.buffer().record_stream(*streams.gather);
  shard.buffer().record_stream(*streams.compute);
  if (!st.param_shard)
    st.master_view = st.full.view().view_elems(st.rank * st.shard_elems, Shape{st.shard_elems});
  shard.reset();
  st.shard_aliased = true;
}

void ZeroEngine::Impl::unalias_shard(int g) {
  GroupState& st = group(g);
  if (!st.shard_aliased) return;
  // On the gather stream: after the group's all-gather (FIFO), before the next gathers that
  // read the shard; the optimizer step's compute waits for the gather stream (drain_passes).
  Stream& gs = *streams.gather;
  const DType dt = options.compute_dtype;
  const bool fp32 = dt == DType::F32;
  TensorBuffer shard(device, dt, Shape{st.shard_elems}, MemTag::ParamShard, gs,
                     st.layout.spec().name.c_str());
  const Tensor mine = st.full.view().view_elems(st.rank * st.shard_elems, Shape{st.shard_elems});
  device.memcpy_async(shard.view().data(), mine.data(), mine.size_bytes(), gs);
  shard.buffer().record_stream(*streams.compute);  // the optimizer updates it there
  if (fp32) {
    st.master = std::move(shard);
    st.master_view = st.master.view();
  } else {
    st.param_shard = std::move(shard);
  }
  st.shard_aliased = false;
}

void ZeroEngine::Impl::release(int g, Stream& compute) {
  GroupState& st = group(g);
  if (!st.params_sharded) return;
  MOEZERO_CHECK(st.state == GroupState::Full, "release of parameter group '", st.layout.spec().name,
                "', which is not acquired");
  count_live(st, -1);
  if (!st.expert && (st.dense_kept || keep_dense(g))) {
    st.full.buffer().retag(MemTag::Cache);
    st.state = GroupState::Cached;
    return;
  }
  if (st.expert && cache) {
    if (cache->contains(g)) {  // served by the cache: still resident
      cache->unpin(g);
      st.full.buffer().retag(MemTag::Cache);
      st.state = GroupState::Cached;
      return;
    }
    if (offer_to_cache(g)) return;
  }
  st.full.reset();  // stream-safe: reused only after gather and compute passed this point
  st.state = GroupState::Sharded;
}

bool ZeroEngine::Impl::keep_dense(int g) {
  GroupState& st = group(g);
  // Reused by the next micro-batch of this step (never past the step: the optimizer changes
  // the shard); the last micro-batch's own forward-to-backward reuse is the model's may_hold.
  if (micro_batch + 1 >= options.micro_batches_per_step) return false;
  const uint64_t bytes = st.full_bytes(options.compute_dtype);
  uint64_t& kept = dense_kept_by_comm[st.comms.gather];
  if (kept + bytes > options.keep_dense_bytes) return false;
  kept += bytes;
  st.dense_kept = true;
  alias_shard(g);  // the gathered buffer holds this rank's shard: give the shard's memory back
  return true;
}

void ZeroEngine::Impl::drop_resident(int g) {
  GroupState& st = group(g);
  if (st.expert && st.unused) {  // gathered, never acquired, and not kept any longer: waste
    const size_t bytes = st.full_bytes(options.compute_dtype);
    counters.wasted_bytes += bytes;
    group_counters[static_cast<size_t>(g)].wasted_bytes += bytes;
  }
  st.unused = false;
  if (st.state == GroupState::Gathering) count_live(st, -1);
  unalias_shard(g);
  st.full.reset();
  st.state = GroupState::Sharded;
  st.prefetched = false;
}

void ZeroEngine::Impl::prefetch(int g, ParamProvider::FetchReason reason) {
  GroupState& st = group(g);
  if (!st.params_sharded || st.state != GroupState::Sharded) return;  // replicated or resident
  const size_t bytes = st.full_bytes(options.compute_dtype);
  if (live_bytes_of(st.comms.gather) + bytes > live_limit_per_comm) return;
  issue_fetch(g);
  using R = ParamProvider::FetchReason;
  const bool predicted = reason == R::Predicted;
  st.prefetched = predicted;
  st.origin = predicted            ? GroupState::Planned
              : reason == R::Exact ? GroupState::Exact
                                   : GroupState::AfterRouting;
  if (predicted) counters.prefetched += 1;
}

void ZeroEngine::Impl::discard_prefetch(int g) {
  GroupState& st = group(g);
  if (!st.params_sharded || st.state != GroupState::Gathering || !st.prefetched) return;
  st.prefetched = false;
  // Kept by the cache: not waste unless it leaves the cache unused (drop_resident counts it).
  if (st.expert && cache && !cache->contains(g) && offer_to_cache(g)) {
    count_live(st, -1);  // kept for a later acquire (its gather may still be in flight)
    return;
  }
  drop_resident(g);
}

void ZeroEngine::Impl::wait_on_comm(Stream& compute, const Event& ready, const char* name) {
  if (trace)
    trace->comm_wait(compute, ready, name);
  else
    compute.wait(ready);
}

void ZeroEngine::Impl::measure_wait(Stream& compute, const Event& ready, int g) {
  Event* before = &stall_events.take();
  Event* after = &stall_events.take();
  timed_waits.emplace_back(before, after);
  const int span =
      trace && trace->tracing()
          ? trace->begin_span(compute, SpanKind::Stall, "wait " + group(g).layout.spec().name)
          : -1;
  before->record(compute);
  wait_on_comm(compute, ready, nullptr);  // traced as the stall span above
  after->record(compute);
  if (trace) trace->end_span(span);
}

double ZeroEngine::Impl::collect_stall_ms() {
  double ms = 0.0;
  for (auto [before, after] : timed_waits) {
    after->synchronize();
    ms += after->elapsed_ms_since(*before);
  }
  timed_waits.clear();
  stall_events.recycle();
  return ms;
}

void ZeroEngine::Impl::collect_gather_ms() {
  for (const TimedGather& t : timed_gathers) {
    t.end->synchronize();
    group_counters[static_cast<size_t>(t.group)].gather_ms +=
        t.share * t.end->elapsed_ms_since(*t.start);
  }
  timed_gathers.clear();
  gather_events.recycle();
}

void ZeroEngine::Impl::end_passes() {
  // Prefetched groups that nobody acquired: give their memory back. The shard cache is
  // emptied: the optimizer is about to change every shard.
  for (size_t i = 0; i < groups.size(); ++i) {
    GroupState& p = *groups[i];
    if (p.params_sharded && p.state == GroupState::Gathering) {
      drop_resident(static_cast<int>(i));
      counters.prefetch_waste += 1;
    }
    MOEZERO_CHECK(p.state != GroupState::Full, "parameter group '", p.layout.spec().name,
                  "' is still acquired at the optimizer step (missing release)");
  }
  for (size_t i = 0; i < groups.size(); ++i) {  // dense groups kept across micro-batches
    GroupState& p = *groups[i];
    if (!p.dense_kept) continue;
    if (p.state == GroupState::Cached) drop_resident(static_cast<int>(i));
    p.dense_kept = false;
  }
  dense_kept_by_comm.clear();
  if (cache) {
    for (int g : cache->invalidate_all()) drop_resident(g);
    if (trace && trace->tracing()) trace->counter("cache_bytes", cache->counters().bytes_resident);
  }
  for (auto& [key, o] : orders) o.end_step();  // (re-)learn each communicator's order
}

// ---- Impl: gradients --------------------------------------------------------------------

Tensor ZeroEngine::Impl::grad(int g, Stream& compute) {
  GroupState& st = group(g);
  if (st.grad_direct) return st.grad_acc.view();
  if (!st.grad_full && reduced_alone(st) && !st.grads_deferred && micro_batch == 0 &&
      options.compute_dtype == DType::F32) {
    // One rank, fp32, first micro-batch: the accumulator is zero (filled at the last step), so
    // accumulating into it gives the bits of 0 + grad_full, with no buffer, fill or axpy.
    st.grad_direct = true;
    return st.grad_acc.view();
  }
  if (!st.grad_full) {
    st.grad_full = TensorBuffer(device, DType::F32, Shape{st.padded}, MemTag::Grad, compute,
                                st.layout.spec().name.c_str());
    device.ops().fill(compute, st.grad_full, 0.0);
  }
  return st.grad_full.view();
}

void ZeroEngine::Impl::grad_ready(int g, Stream& compute) {
  GroupState& st = group(g);
  MOEZERO_CHECK(st.grad_direct || static_cast<bool>(st.grad_full), "grad_ready of group '",
                st.layout.spec().name, "' without grad() in this backward pass");
  check_gradient(g, compute);  // hook and non-finite scan, before anything reads it
  if (st.grad_direct) {        // already where the reduction would put it (grad())
    st.grad_direct = false;
    return;
  }
  if (st.grads_deferred && micro_batch + 1 < options.micro_batches_per_step) {
    accumulate_local(g, compute);
    return;
  }
  if (st.grad_local) {  // stage 1, last micro-batch: this rank's sum of the whole step
    device.ops().axpy(compute, 1.0f, st.grad_local, st.grad_full);
    st.grad_local.reset();
  }
  enqueue_reduction(g);
}

void ZeroEngine::Impl::accumulate_local(int g, Stream& compute) {
  GroupState& st = group(g);
  if (!st.grad_local) {  // the first micro-batch's gradient becomes the sum
    st.grad_local = std::move(st.grad_full);
    st.grad_full.reset();  // a moved-from TensorBuffer keeps its view
    return;
  }
  device.ops().axpy(compute, 1.0f, st.grad_full, st.grad_local);
  st.grad_full.reset();
}

void ZeroEngine::Impl::enqueue_reduction(int g) {
  GroupState& st = group(g);
  // One bucket per reduce communicator: a bucket's composition (hence the size of its
  // collective) must be a function of that communicator's groups only, never of how other
  // groups (experts of other EDP groups) interleave on this rank.
  st.grad_full.buffer().record_stream(*streams.reduce);
  Bucket& b = buckets[comm_key(st.comms.reduce)];
  b.groups.push_back(g);
  b.bytes += static_cast<uint64_t>(st.padded) * dtype_size_bytes(options.compute_dtype);
  if (b.bytes >= options.reduce_bucket_bytes) flush_bucket(b);
}

void ZeroEngine::Impl::reduce_local_leftovers() {
  // Group order: the same on every rank of each reduce communicator.
  for (size_t i = 0; i < groups.size(); ++i) {
    GroupState& st = *groups[i];
    if (!st.grad_local) continue;
    st.grad_full = std::move(st.grad_local);
    st.grad_local.reset();  // a moved-from TensorBuffer keeps its view
    enqueue_reduction(static_cast<int>(i));
  }
}

void ZeroEngine::Impl::check_gradient(int g, Stream& compute) {
  GroupState& st = group(g);
  if (options.grad_hook)
    options.grad_hook(
        GradReadyInfo{g, &st.layout, st.grad_now(), &compute, step_calls, micro_batch});
  if (!options.check_finite) return;
  // One i64 (3) result per check, in chunks that live as long as the engine; read at the step.
  const auto k = static_cast<int64_t>(checks.size());
  const auto chunk = static_cast<size_t>(k / kChecksPerChunk);
  if (chunk == check_chunks.size())
    check_chunks.emplace_back(device, DType::I64, Shape{kChecksPerChunk, 3}, MemTag::Other, compute,
                              "non-finite checks");
  // Scanned at the step, and only if the global norm is non-finite, when the step's gradient
  // accumulator will hold exactly this gradient: one rank and one micro-batch, with the
  // gradient accumulated in place (fp32) or copied into the zero accumulator (flush_bucket: in
  // bf16, rounded: NaN and infinities keep their places; an fp32 value that overflows bf16
  // becomes an infinity the optimizer would see, and is reported as one). grad_direct is the
  // fp32 case.
  if (reduced_alone(st) && !st.grads_deferred && options.micro_batches_per_step == 1) {
    checks.push_back({g, micro_batch, true});
    return;
  }
  device.ops().find_nonfinite(
      compute, st.grad_now(),
      check_chunks[chunk].view().view_elems((k % kChecksPerChunk) * 3, Shape{3}));
  checks.push_back({g, micro_batch});
}

void ZeroEngine::Impl::flush_buckets() {
  for (auto& [key, b] : buckets) flush_bucket(b);  // key order: the same on every rank
}

namespace {
// "grads layers.3.experts.5 +2": the first group of a gradient bucket and how many follow.
std::string bucket_label(const std::string& first, size_t groups) {
  return "grads " + first + (groups > 1 ? " +" + std::to_string(groups - 1) : std::string());
}
}  // namespace

void ZeroEngine::Impl::flush_bucket(Bucket& b) {
  if (b.groups.empty()) return;
  const std::vector<int>& bucket = b.groups;
  Ops& ops = device.ops();
  Stream& rs = *streams.reduce;
  auto ready = device.create_event();
  ready->record(*streams.compute);         // every grad write of the bucket is before this point
  rs.wait(*ready);                         // the wait holds what it needs; the event may go
  const DType dt = options.compute_dtype;  // gradients travel in the compute dtype
  const GroupState& first = group(bucket.front());
  const int n = first.n;
  Communicator* comm = first.comms.reduce;

  const bool acc_zero = micro_batch == 0 && !first.grads_deferred;  // since the last step
  if (reduced_alone(first) && (dt == DType::F32 || acc_zero)) {
    // One rank: the sum over the group is this gradient; no bucket copy, no collective. The
    // same bits as the paths below: their copies are exact and the accumulation is this axpy
    // (fp32), or, into a zero accumulator, 0 + round(grad) = round(grad) (bf16).
    for (int g : bucket) {
      GroupState& st = group(g);
      if (dt == DType::F32)
        ops.axpy(rs, 1.0f, st.grad_full, st.grad_acc);
      else
        ops.cast(rs, st.grad_full, st.grad_acc);
    }
  } else if (first.grads_sharded && (n > 1 || options.shard_single_rank)) {
    int64_t cols = 0;
    for (int g : bucket) cols += group(g).shard_elems;
    TensorBuffer send(device, dt, Shape{n * cols}, MemTag::CommBuffer, rs, "reduce bucket");
    TensorBuffer recv(device, dt, Shape{cols}, MemTag::CommBuffer, rs, "reduce bucket");
    int64_t c = 0;
    for (int g : bucket) {  // layout (n, cols): rank r's part of every group, side by side
      GroupState& st = group(g);
      for (int r = 0; r < n; ++r)
        ops.cast(rs, st.grad_full.view().view_elems(r * st.shard_elems, Shape{st.shard_elems}),
                 send.view().view_elems(r * cols + c, Shape{st.shard_elems}));
      c += st.shard_elems;
    }
    if (trace && trace->tracing())
      trace->label_next_collective(bucket_label(first.layout.spec().name, bucket.size()));
    comm->reduce_scatter(send.view().data(), recv.view().data(), static_cast<size_t>(cols), dt,
                         ReduceOp::Sum, rs);
    counters.reduce_scattered_bytes += send.view().size_bytes();
    c = 0;
    for (int g : bucket) {
      GroupState& st = group(g);
      ops.axpy(rs, 1.0f, recv.view().view_elems(c, Shape{st.shard_elems}), st.grad_acc);
      c += st.shard_elems;
    }
  } else {
    int64_t total = 0;
    for (int g : bucket) total += group(g).padded;
    TensorBuffer buf(device, dt, Shape{total}, MemTag::CommBuffer, rs, "all-reduce bucket");
    int64_t c = 0;
    for (int g : bucket) {
      GroupState& st = group(g);
      ops.cast(rs, st.grad_full, buf.view().view_elems(c, Shape{st.padded}));
      c += st.padded;
    }
    if (n > 1) {
      if (trace && trace->tracing())
        trace->label_next_collective(bucket_label(first.layout.spec().name, bucket.size()));
      comm->all_reduce(buf.view().data(), buf.view().data(), static_cast<size_t>(total), dt,
                       ReduceOp::Sum, rs);
      counters.all_reduced_bytes += buf.view().size_bytes();
    }
    c = 0;
    for (int g : bucket) {
      GroupState& st = group(g);
      ops.axpy(rs, 1.0f, buf.view().view_elems(c, Shape{st.padded}), st.grad_acc);
      c += st.padded;
    }
  }
  for (int g : bucket) group(g).grad_full.reset();  // freed once the reduce stream passes
  reduce_done->record(rs);
  reduce_recorded = true;
  b.groups.clear();
  b.bytes = 0;
}

}  // namespace moezero
