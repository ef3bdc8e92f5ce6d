// comm/local/link_emulation.cpp — nccl-tests sizes and network-model shapes of collectives.
#include "comm/local/link_emulation.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moezero::comm {

uint64_t call_size_bytes(const Arrival& a, int group_size) {
  const uint64_t elem_bytes = dtype_size_bytes(a.sig.dtype);
  const uint64_t n = static_cast<uint64_t>(group_size);
  switch (a.sig.op) {
    case CollectiveOp::AllGather:
    case CollectiveOp::ReduceScatter: return a.sig.elems * n * elem_bytes;
    case CollectiveOp::AllReduce:
    case CollectiveOp::Broadcast: return a.sig.elems * elem_bytes;
    case CollectiveOp::AllToAllV: {
      uint64_t total = 0;
      for (size_t c : a.send_elems) total += c;
      return total * elem_bytes;
    }
    case CollectiveOp::Barrier: return 0;
  }
  return 0;
}

CollectiveShape collective_shape(const std::vector<Arrival>& arrivals, const ProcessGroup& group) {
  const size_t n = arrivals.size();
  const Arrival& a0 = arrivals[0];
  CollectiveShape shape;
  shape.op = a0.sig.op;
  shape.ranks = group.ranks;
  shape.size_bytes = static_cast<double>(call_size_bytes(a0, static_cast<int>(n)));
  shape.root = std::max(0, a0.sig.root);
  if (shape.op != CollectiveOp::AllToAllV) return shape;
  const double elem_bytes = static_cast<double>(dtype_size_bytes(a0.sig.dtype));
  shape.a2a_bytes.assign(n, std::vector<double>(n, 0.0));
  for (size_t r = 0; r < n; ++r)
    for (size_t p = 0; p < n; ++p)
      shape.a2a_bytes[r][p] = static_cast<double>(arrivals[r].send_elems[p]) * elem_bytes;
  return shape;
}

void LinkTally::add(const Traffic& traffic) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Flow& f : traffic.flows) {
    if (f.dir != Direction::Send) continue;
    MOEZERO_CHECK(f.rank >= 0 && static_cast<size_t>(f.rank) < sent_.size(), "LinkTally: rank ",
                  f.rank, " outside the world of ", sent_.size());
    LinkBytes& b = sent_[static_cast<size_t>(f.rank)];
    // Flows hold whole bytes (element counts times element sizes) as doubles.
    const auto bytes = static_cast<uint64_t>(std::llround(f.bytes));
    (f.tier == Tier::IntraNode ? b.intra_node_bytes : b.inter_node_bytes) += bytes;
  }
}

LinkBytes LinkTally::of(int global_rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  MOEZERO_CHECK(global_rank >= 0 && static_cast<size_t>(global_rank) < sent_.size(),
                "LinkTally: rank ", global_rank, " outside the world of ", sent_.size());
  return sent_[static_cast<size_t>(global_rank)];
}

}  // namespace moezero::comm
