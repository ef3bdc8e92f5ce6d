// comm/local/link_emulation.cpp — bus bytes per collective for the emulated link.
#include "comm/local/link_emulation.h"

#include <algorithm>

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

double emulated_bus_bytes(const std::vector<Arrival>& arrivals) {
  const int n = static_cast<int>(arrivals.size());
  const Arrival& a0 = arrivals[0];
  if (a0.sig.op != CollectiveOp::AllToAllV)
    return static_cast<double>(call_size_bytes(a0, n)) * bus_factor(a0.sig.op, n);
  const double elem_bytes = static_cast<double>(dtype_size_bytes(a0.sig.dtype));
  double busiest = 0.0;
  for (int r = 0; r < n; ++r) {
    double out = 0.0, in = 0.0;
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      out += static_cast<double>(arrivals[r].send_elems[p]);
      in += static_cast<double>(arrivals[r].recv_elems[p]);
    }
    busiest = std::max({busiest, out, in});
  }
  return busiest * elem_bytes;
}

}  // namespace moezero::comm
