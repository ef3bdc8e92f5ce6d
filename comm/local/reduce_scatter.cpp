// comm/local/reduce_scatter.cpp — recv (elems) = op over ranks p of send_p[rank*elems, ...).
#include <vector>

#include "comm/local/collectives.h"
#include "comm/local/reduce.h"

namespace moezero::comm {

void move_reduce_scatter(const Slot& slot, int rank) {
  const Arrival& me = slot.arrivals[static_cast<size_t>(rank)];
  const size_t chunk_bytes = me.sig.elems * dtype_size_bytes(me.sig.dtype);
  if (chunk_bytes == 0) return;
  std::vector<const void*> inputs;
  inputs.reserve(slot.arrivals.size());
  for (const Arrival& a : slot.arrivals)
    inputs.push_back(static_cast<const std::byte*>(a.send) +
                     static_cast<size_t>(rank) * chunk_bytes);
  // In place (recv == own send chunk) is safe: only this rank reads that chunk, and
  // reduce_elems reads a whole block before writing it.
  reduce_elems(me.recv, inputs, me.sig.elems, me.sig.dtype, me.sig.reduce);
}

}  // namespace moezero::comm
