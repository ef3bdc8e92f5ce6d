// zero/fetch_gather.cpp — FetchCoordinator: the one gather path (a codec's wire format, one
// group in place or a block of groups coalesced, as DeepSpeed's coalesced fetch of a leaf
// module and FSDP2's per-module all-gather do) and the prefetch hints that start gathers.
#include "core/error.h"
#include "core/ops.h"
#include "core/trace.h"
#include "zero/fetch_coordinator.h"

namespace moezero {

using zero_detail::GroupState;

FetchCoordinator::Origin FetchCoordinator::origin_of(ParamProvider::FetchReason reason) {
  using R = ParamProvider::FetchReason;
  return reason == R::Predicted ? Origin::Planned
         : reason == R::Exact   ? Origin::Exact
                                : Origin::AfterRouting;
}

void FetchCoordinator::gather(std::span<const int> todo, Origin origin, bool coalesced) {
  // hpZ: groups with a secondary shard this step are gathered inside their partition.
  const std::vector<int> rest = gather_secondary(todo, origin, coalesced);
  if (rest.empty()) return;
  todo = rest;
  if (!coalesced && codec_->in_place()) {
    MOEZERO_CHECK(todo.size() == 1, "gather: ", todo.size(), " groups, not coalesced");
    gather_in_place(todo.front(), origin);
    return;
  }
  const GroupState& first = group(todo.front());
  Communicator* comm = first.comms.gather;
  const int n = first.n;
  const DType dt = m_.options.compute_dtype;
  const DType wire_dt = codec_->wire_shape(first.shard_elems, dt).dtype;
  int64_t cols = 0;  // wire elements of this rank's part: every group's part, side by side
  for (int g : todo) {
    MOEZERO_CHECK(group(g).comms.gather == comm, "gather: group '", group(g).layout.spec().name,
                  "' has another gather communicator than '", first.layout.spec().name, "'");
    const WireShape w = codec_->wire_shape(group(g).shard_elems, dt);
    MOEZERO_CHECK(w.dtype == wire_dt, "gather: codec ", codec_->name(),
                  " gives groups of one gather different wire dtypes");
    cols += w.elems;
  }
  Stream& gs = *m_.streams.gather;
  Ops& ops = m_.device.ops();
  gs.wait(*m_.params_updated);  // the shards are final for this step
  TensorBuffer send(m_.device, wire_dt, Shape{cols}, MemTag::CommBuffer, gs, "block gather");
  TensorBuffer recv(m_.device, wire_dt, Shape{int64_t{n} * cols}, MemTag::CommBuffer, gs,
                    "block gather");
  int64_t c = 0;
  for (int g : todo) {
    const GroupState& st = group(g);
    const int64_t w = codec_->wire_shape(st.shard_elems, dt).elems;
    codec_->encode(ops, gs, st.param_source(), send.view().view_elems(c, Shape{w}));
    c += w;
  }
  if (m_.tracing())
    m_.trace->label_next_collective("block " + first.layout.spec().name + " +" +
                                    std::to_string(todo.size() - 1));
  Event& t0 = gather_events_.take();
  Event& t1 = gather_events_.take();
  t0.record(gs);
  comm->all_gather(send.view().data(), recv.view().data(), static_cast<size_t>(cols), wire_dt, gs);
  t1.record(gs);
  m_.counters.gathers += 1;  // one collective for the block
  const uint64_t ticket = next_ticket_++;
  c = 0;
  for (int g : todo) {  // recv is (n, cols): rank r's part of group g at [r][c, c + w)
    GroupState& st = group(g);
    const int64_t w = codec_->wire_shape(st.shard_elems, dt).elems;
    st.full = TensorBuffer(m_.device, dt, Shape{st.padded}, MemTag::FullParam, gs,
                           st.layout.spec().name.c_str());
    for (int r = 0; r < n; ++r)
      codec_->decode(ops, gs, recv.view().view_elems(r * cols + c, Shape{w}),
                     st.full.view().view_elems(r * st.shard_elems, Shape{st.shard_elems}));
    c += w;
    if (st.expert)  // the collective's time, shared by bytes
      timed_gathers_.push_back({g, &t0, &t1, static_cast<double>(w) / static_cast<double>(cols)});
    on_gathered(g, origin, ticket,
                static_cast<uint64_t>(n) * static_cast<uint64_t>(w) * dtype_size_bytes(wire_dt));
  }
}

// One group, gathered from its shard straight into its full buffer (the codec's wire part is
// the shard itself).
void FetchCoordinator::gather_in_place(int g, Origin origin) {
  GroupState& st = group(g);
  Stream& gs = *m_.streams.gather;
  const DType dt = m_.options.compute_dtype;
  st.full = TensorBuffer(m_.device, dt, Shape{st.padded}, MemTag::FullParam, gs,
                         st.layout.spec().name.c_str());
  gs.wait(*m_.params_updated);  // the shards are final for this step
  Event* timed_end = nullptr;
  if (st.expert) {  // per-expert gather time: two pooled events, resolved at the step's sync
    Event& start = gather_events_.take();
    timed_end = &gather_events_.take();
    timed_gathers_.push_back({g, &start, timed_end});
    start.record(gs);
  }
  if (m_.tracing()) m_.trace->label_next_collective(st.layout.spec().name);
  st.comms.gather->all_gather(st.param_source().data(), st.full.view().data(),
                              static_cast<size_t>(st.shard_elems), dt, gs);
  if (timed_end) timed_end->record(gs);
  m_.counters.gathers += 1;
  on_gathered(g, origin, next_ticket_++, st.full_bytes(dt));  // the wire part is the shard
}

// The transition Sharded -> Gathering: every gather's counters, in one place.
void FetchCoordinator::on_gathered(int g, Origin origin, uint64_t ticket, uint64_t wire_bytes) {
  GroupState& st = group(g);
  st.gathered->record(*m_.streams.gather);
  st.state = State::Gathering;
  st.ticket = ticket;  // a coalesced gather: one collective, complete together
  st.origin = origin;
  if (origin == Origin::Planned || origin == Origin::Recorded) m_.counters.prefetched += 1;
  count_live(st, +1);
  const size_t bytes = st.full_bytes(m_.options.compute_dtype);
  EngineCounters& k = m_.counters;
  k.gathered_bytes += bytes;
  k.gathered_wire_bytes += wire_bytes;
  (st.expert ? k.gathered_expert_bytes : k.gathered_dense_bytes) += bytes;
  GroupCounters& gc = m_.group_counters[static_cast<size_t>(g)];
  gc.gathers += 1;
  gc.gathered_bytes += bytes;
}

// ---- prefetch hints ----------------------------------------------------------------------

void FetchCoordinator::prefetch(int g, ParamProvider::FetchReason reason) {
  note_needed(std::span<const int>(&g, 1), reason);
  GroupState& st = group(g);
  if (!st.params_sharded || st.state != State::Sharded) return;  // replicated or resident
  const size_t bytes = st.full_bytes(m_.options.compute_dtype);
  if (live_bytes_of(st.comms.gather) + bytes > live_limit_per_comm_) return;
  gather(std::span<const int>(&g, 1), origin_of(reason), false);
}

void FetchCoordinator::prefetch_block(std::span<const int> ids, ParamProvider::FetchReason reason) {
  note_needed(ids, reason);
  std::vector<int> todo;  // sharded and neither resident nor in flight, in the caller's order
  for (int g : ids) {
    const GroupState& st = group(g);
    if (st.params_sharded && st.state == State::Sharded) todo.push_back(g);
  }
  if (!todo.empty()) gather(todo, origin_of(reason), true);
}

void FetchCoordinator::prefetch_set(std::span<const int> ids, ParamProvider::FetchReason reason) {
  note_needed(ids, reason);
  // The prefix that fits the live limit of the communicator (agreed state: the same on every
  // rank), cut into chunks of at most options.coalesce_shard_bytes per rank of the
  // communicator (by shape only).
  std::vector<int> chunk;
  uint64_t chunk_bytes = 0;
  for (int g : ids) {
    const GroupState& st = group(g);
    if (!st.params_sharded || st.state != State::Sharded) continue;
    const uint64_t bytes = st.full_bytes(m_.options.compute_dtype);
    const uint64_t chunk_limit =
        m_.options.coalesce_shard_bytes * static_cast<uint64_t>(st.comms.gather->size());
    if (!chunk.empty() && (chunk_bytes + bytes > chunk_limit ||
                           group(chunk.front()).comms.gather != st.comms.gather)) {
      gather(chunk, origin_of(reason), true);
      chunk.clear();
      chunk_bytes = 0;
    }
    if (live_bytes_of(st.comms.gather) + chunk_bytes + bytes > live_limit_per_comm_) break;
    chunk.push_back(g);
    chunk_bytes += bytes;
  }
  if (!chunk.empty()) gather(chunk, origin_of(reason), true);
}

void FetchCoordinator::prefetch_ahead() {
  // Decisions about a group's gather must be identical on every rank of its sharding group,
  // or that communicator's collectives would be issued in different orders (a hang, or a
  // divergence error). The ranks of a sharding group share exactly: the groups of that
  // communicator, the order in which they are acquired, and when they are released. So each
  // communicator has its own recorded order, position, window and live-bytes limit, computed
  // from its own groups only; its walk issues gathers in recorded order and stops at the first
  // group that does not fit (never skipping ahead). Experts of other EDP groups, or the
  // position of the rank's last acquire among them, never enter a decision.
  planner_->each_dense_ahead([this](std::span<const int> next) { walk_dense(next, -1, true); });
}

bool FetchCoordinator::walk_dense(std::span<const int> next, int target, bool issue) {
  uint64_t ahead = 0;  // the planner's channels: the same order on every rank
  uint64_t live = live_bytes_of(group(next.front()).comms.gather);
  for (int g : next) {
    GroupState& st = group(g);
    if (!st.params_sharded || st.expert) continue;  // experts: prefetched by their policy
    const size_t bytes = st.full_bytes(m_.options.compute_dtype);
    if (st.state == State::Sharded || g == target) {
      if (ahead + bytes > m_.options.zero.prefetch_bucket_size ||
          live + bytes > live_limit_per_comm_)
        return false;
      if (g == target) return true;
      if (issue) gather(std::span<const int>(&g, 1), Origin::Recorded, false);
      live += bytes;
    }
    ahead += bytes;  // in flight or just issued
    if (ahead >= m_.options.zero.prefetch_bucket_size) return false;
  }
  return false;
}

bool FetchCoordinator::regathered_at_once(int g) {
  bool found = false;
  planner_->each_dense_ahead([&](std::span<const int> next) {
    if (!found && group(next.front()).comms.gather == group(g).comms.gather)
      found = walk_dense(next, g, false);
  });
  return found;
}

}  // namespace moezero
