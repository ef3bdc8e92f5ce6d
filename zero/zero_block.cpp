// zero/zero_block.cpp — ZeroEngine: the coalesced gather of a block of parameter groups (a MoE
// layer's local experts under zero.moe_gather leaf/fsdp): one all-gather per block and use,
// as DeepSpeed's coalesced fetch of a leaf module and FSDP2's per-module all-gather do.
#include "core/error.h"
#include "core/ops.h"
#include "core/trace.h"
#include "zero/zero_engine_impl.h"

namespace moezero {

using zero_detail::GroupState;

void ZeroEngine::Impl::prefetch_block(std::span<const int> ids, ParamProvider::FetchReason reason) {
  std::vector<int> todo;  // sharded and neither resident nor in flight, in the caller's order
  for (int g : ids) {
    const GroupState& st = group(g);
    if (st.params_sharded && st.state == GroupState::Sharded) todo.push_back(g);
  }
  if (!todo.empty()) gather_block(todo, reason);
}

void ZeroEngine::Impl::prefetch_set(std::span<const int> ids, ParamProvider::FetchReason reason) {
  // The prefix that fits the live limit of the communicator (agreed state: the same on every
  // rank), cut into chunks of at most options.coalesce_bytes (by shape only).
  std::vector<int> chunk;
  uint64_t chunk_bytes = 0;
  for (int g : ids) {
    const GroupState& st = group(g);
    if (!st.params_sharded || st.state != GroupState::Sharded) continue;
    const uint64_t bytes = st.full_bytes(options.compute_dtype);
    if (!chunk.empty() && (chunk_bytes + bytes > options.coalesce_bytes ||
                           group(chunk.front()).comms.gather != st.comms.gather)) {
      gather_block(chunk, reason);
      chunk.clear();
      chunk_bytes = 0;
    }
    if (live_bytes_of(st.comms.gather) + chunk_bytes + bytes > live_limit_per_comm) break;
    chunk.push_back(g);
    chunk_bytes += bytes;
  }
  if (!chunk.empty()) gather_block(chunk, reason);
}

// One all-gather of `todo` (sharded groups of one gather communicator), in its order.
void ZeroEngine::Impl::gather_block(std::span<const int> todo, ParamProvider::FetchReason reason) {
  using R = ParamProvider::FetchReason;
  const bool predicted = reason == R::Predicted;
  const GroupState& first = group(todo.front());
  Communicator* comm = first.comms.gather;
  const int n = first.n;
  int64_t cols = 0;  // elements of this rank's part: every group's shard, side by side
  for (int g : todo) {
    MOEZERO_CHECK(group(g).comms.gather == comm, "prefetch_block: group '",
                  group(g).layout.spec().name, "' has another gather communicator than '",
                  first.layout.spec().name, "'");
    cols += group(g).shard_elems;
  }
  const DType dt = options.compute_dtype;
  Stream& gs = *streams.gather;
  Ops& ops = device.ops();
  gs.wait(*params_updated);  // the shards are final for this step
  TensorBuffer send(device, dt, Shape{cols}, MemTag::CommBuffer, gs, "block gather");
  TensorBuffer recv(device, dt, Shape{int64_t{n} * cols}, MemTag::CommBuffer, gs, "block gather");
  int64_t c = 0;
  for (int g : todo) {
    const GroupState& st = group(g);
    ops.cast(gs, st.param_source(), send.view().view_elems(c, Shape{st.shard_elems}));
    c += st.shard_elems;
  }
  if (trace && trace->tracing())
    trace->label_next_collective("block " + first.layout.spec().name + " +" +
                                 std::to_string(todo.size() - 1));
  Event& t0 = gather_events.take();
  Event& t1 = gather_events.take();
  t0.record(gs);
  comm->all_gather(send.view().data(), recv.view().data(), static_cast<size_t>(cols), dt, gs);
  t1.record(gs);
  counters.gathers += 1;  // one collective for the block
  const uint64_t ticket = next_ticket++;
  c = 0;
  for (int g : todo) {  // recv is (n, cols): rank r's shard of group g at [r][c, c + shard)
    GroupState& st = group(g);
    st.full = TensorBuffer(device, dt, Shape{st.padded}, MemTag::FullParam, gs,
                           st.layout.spec().name.c_str());
    for (int r = 0; r < n; ++r)
      ops.cast(gs, recv.view().view_elems(r * cols + c, Shape{st.shard_elems}),
               st.full.view().view_elems(r * st.shard_elems, Shape{st.shard_elems}));
    c += st.shard_elems;
    st.gathered->record(gs);
    if (st.expert)  // the collective's time, shared by bytes
      timed_gathers.push_back({g, &t0, &t1, static_cast<double>(st.shard_elems) / cols});
    st.state = GroupState::Gathering;
    st.ticket = ticket;  // one collective: complete together
    st.prefetched = predicted;
    st.origin = predicted            ? GroupState::Planned
                : reason == R::Exact ? GroupState::Exact
                                     : GroupState::AfterRouting;
    st.unused = true;
    if (predicted) counters.prefetched += 1;
    count_live(st, +1);
    const size_t bytes = st.full_bytes(dt);
    counters.gathered_bytes += bytes;
    (st.expert ? counters.gathered_expert_bytes : counters.gathered_dense_bytes) += bytes;
    GroupCounters& gc = group_counters[static_cast<size_t>(g)];
    gc.gathers += 1;
    gc.gathered_bytes += bytes;
  }
}

}  // namespace moezero
