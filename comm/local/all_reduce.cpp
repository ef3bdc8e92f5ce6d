// comm/local/all_reduce.cpp — recv (elems) = op over ranks of send (elems).
//
// Two phases, as a reduce_scatter + all_gather ring would: rank r reduces elements
// [r*elems/n, (r+1)*elems/n) of every send into the shared staging buffer; after a barrier
// every rank copies the whole staging buffer into its recv. Work per rank is O(elems), and
// in place (send == recv) is safe because no send is read after the barrier.
#include <cstring>
#include <vector>

#include "comm/local/collectives.h"
#include "comm/local/reduce.h"

namespace moezero::comm {

void move_all_reduce(Channel& channel, Slot& slot, int rank, uint64_t seq) {
  const Arrival& me = slot.arrivals[static_cast<size_t>(rank)];
  const size_t elems = me.sig.elems;
  const size_t elem_bytes = dtype_size_bytes(me.sig.dtype);
  const size_t n = slot.arrivals.size();
  const size_t begin = elems * static_cast<size_t>(rank) / n;
  const size_t end = elems * static_cast<size_t>(rank + 1) / n;
  if (end > begin) {
    std::vector<const void*> inputs;
    inputs.reserve(n);
    for (const Arrival& a : slot.arrivals)
      inputs.push_back(static_cast<const std::byte*>(a.send) + begin * elem_bytes);
    reduce_elems(slot.staging.data() + begin * elem_bytes, inputs, end - begin, me.sig.dtype,
                 me.sig.reduce);
  }
  channel.phase_barrier(slot, rank, seq);
  if (elems > 0) std::memcpy(me.recv, slot.staging.data(), elems * elem_bytes);
}

}  // namespace moezero::comm
