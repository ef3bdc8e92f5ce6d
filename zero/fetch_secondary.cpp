// zero/fetch_secondary.cpp — FetchCoordinator: hpZ, ZeRO++'s hierarchical partitions
// (zero.hpz_partition_size; docs/zero.md "hpZ").
//
// A group's first gather of a step runs over its sharding group (the world, or the experts' EDP
// group) and crosses the slow tier. When its full buffer is freed before the step's passes end
// (a release that no residency keeps, an eviction from one, a discarded prefetch), this rank
// first keeps its slice of it over its secondary partition (GroupComms::secondary: the
// sharding group's members inside this rank's block of hpz_partition_size consecutive ranks,
// normally its node): full / m elements for m such members, copied on the gather stream. So a
// group that a residency keeps for the step costs no secondary shard, and one that is freed
// costs 1/m of itself instead of the whole. Every later gather of the group in the step
// (backward's re-gather, the next micro-batches) all-gathers those slices over the partition
// only, the fast tier. The slices are copies of the decoded full
// buffer, so a re-gather returns exactly what the first gather returned, whatever the codec.
// The secondary shards go at the end of the step's passes, before the optimizer changes the
// shards they were cut from.
//
// Collectives stay matched: whether a group has a secondary shard is a function of its gathers,
// releases and residency decisions in the step, which every rank of its sharding group shares
// (the same calls in the same order, residencies kept per communicator), so they all choose the
// same communicator for the same gather.
#include <string>

#include "core/error.h"
#include "core/ops.h"
#include "core/trace.h"
#include "zero/fetch_coordinator.h"

namespace moezero {

using zero_detail::GroupState;

std::vector<int> FetchCoordinator::gather_secondary(std::span<const int> todo, Origin origin,
                                                    bool coalesced) {
  std::vector<int> rest, mine;
  for (int g : todo) (group(g).secondary ? mine : rest).push_back(g);
  if (mine.empty()) return rest;
  MOEZERO_CHECK(coalesced || mine.size() == 1, "gather: ", mine.size(), " groups, not coalesced");
  const GroupState& first = group(mine.front());
  Communicator* comm = first.comms.secondary;
  const int m = comm->size();
  const DType dt = m_.options.compute_dtype;
  Stream& gs = *m_.streams.gather;
  int64_t cols = 0;  // elements of this rank's part: every group's secondary shard, side by side
  for (int g : mine) {
    MOEZERO_CHECK(group(g).comms.secondary == comm, "gather: group '", group(g).layout.spec().name,
                  "' has another hpZ partition than '", first.layout.spec().name, "'");
    cols += group(g).secondary_elems();
  }
  for (int g : mine) {
    GroupState& st = group(g);
    st.full = TensorBuffer(m_.device, dt, Shape{st.padded}, MemTag::FullParam, gs,
                           st.layout.spec().name.c_str());
    if (m_.tracing()) trace_cache("secondary_gather", g);
  }
  if (m_.tracing())
    m_.trace->label_next_collective(
        "hpz " + first.layout.spec().name +
        (mine.size() > 1 ? " +" + std::to_string(mine.size() - 1) : std::string()));
  Event& t0 = gather_events_.take();
  Event& t1 = gather_events_.take();
  t0.record(gs);
  if (mine.size() == 1) {  // straight from the secondary shard into the full buffer
    comm->all_gather(first.secondary.view().data(), first.full.view().data(),
                     static_cast<size_t>(cols), dt, gs);
    t1.record(gs);
  } else {
    TensorBuffer send(m_.device, dt, Shape{cols}, MemTag::CommBuffer, gs, "hpz block gather");
    TensorBuffer recv(m_.device, dt, Shape{int64_t{m} * cols}, MemTag::CommBuffer, gs,
                      "hpz block gather");
    const size_t esize = dtype_size_bytes(dt);
    int64_t c = 0;
    for (int g : mine) {
      const Tensor& sec = group(g).secondary.view();
      m_.device.memcpy_async(send.view().view_elems(c, Shape{sec.numel()}).data(), sec.data(),
                             sec.size_bytes(), gs);
      c += sec.numel();
    }
    comm->all_gather(send.view().data(), recv.view().data(), static_cast<size_t>(cols), dt, gs);
    t1.record(gs);
    c = 0;
    for (int g : mine) {  // recv is (m, cols): member r's slice of group g at [r][c, c + w)
      const GroupState& st = group(g);
      const int64_t w = st.secondary_elems();
      for (int r = 0; r < m; ++r)
        m_.device.memcpy_async(st.full.view().view_elems(r * w, Shape{w}).data(),
                               recv.view().view_elems(r * cols + c, Shape{w}).data(),
                               static_cast<size_t>(w) * esize, gs);
      c += w;
    }
  }
  m_.counters.gathers += 1;  // one collective for the block
  m_.counters.hpz_gathers += 1;
  const uint64_t ticket = next_ticket_++;
  for (int g : mine) {
    const GroupState& st = group(g);
    m_.counters.hpz_gathered_bytes += st.full_bytes(dt);
    if (st.expert)  // the collective's time, shared by elements
      timed_gathers_.push_back(
          {g, &t0, &t1, static_cast<double>(st.secondary_elems()) / static_cast<double>(cols)});
    on_gathered(g, origin, ticket, st.full_bytes(dt));  // secondary shards: uncompressed
  }
  return rest;
}

void FetchCoordinator::keep_secondary(int g) {
  GroupState& st = group(g);
  if (!st.comms.secondary || st.secondary) return;  // no partition, or kept already
  Stream& gs = *m_.streams.gather;
  const int64_t w = st.secondary_elems();
  st.secondary = TensorBuffer(m_.device, m_.options.compute_dtype, Shape{w}, MemTag::Secondary, gs,
                              st.layout.spec().name.c_str());
  // After the gather and its decode (FIFO on the gather stream; the group's gather may still be
  // in flight); the full buffer is freed stream-safely, so it outlives this copy.
  const Tensor mine = st.full.view().view_elems(st.comms.secondary->rank() * w, Shape{w});
  m_.device.memcpy_async(st.secondary.view().data(), mine.data(), mine.size_bytes(), gs);
  secondary_bytes_ += mine.size_bytes();
  if (m_.tracing()) {
    trace_cache("secondary_keep", g);
    m_.trace->counter("secondary_shard_bytes", secondary_bytes_);
  }
}

void FetchCoordinator::drop_secondaries() {
  for (auto& p : m_.groups) p->secondary.reset();  // stream-safe: last used on the gather stream
  if (secondary_bytes_ > 0 && m_.tracing()) m_.trace->counter("secondary_shard_bytes", 0);
  secondary_bytes_ = 0;
}

}  // namespace moezero
