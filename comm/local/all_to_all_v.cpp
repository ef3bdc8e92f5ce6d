// comm/local/all_to_all_v.cpp — recv block p (recv_elems[p]) = block `rank` of p's send.
//
// Layouts are packed: block p of a buffer starts at the sum of the counts before p.
#include <cstring>

#include "comm/local/collectives.h"

namespace moezero::comm {

void move_all_to_all_v(const Slot& slot, int rank) {
  const Arrival& me = slot.arrivals[static_cast<size_t>(rank)];
  const size_t elem_bytes = dtype_size_bytes(me.sig.dtype);
  const size_t r = static_cast<size_t>(rank);
  auto* dst = static_cast<std::byte*>(me.recv);
  for (size_t p = 0; p < slot.arrivals.size(); ++p) {
    const Arrival& peer = slot.arrivals[p];
    size_t src_offset_elems = 0;  // where block `rank` starts in p's send
    for (size_t q = 0; q < r; ++q) src_offset_elems += peer.send_elems[q];
    const size_t bytes = me.recv_elems[p] * elem_bytes;
    if (bytes > 0)
      std::memcpy(dst, static_cast<const std::byte*>(peer.send) + src_offset_elems * elem_bytes,
                  bytes);
    dst += bytes;
  }
}

}  // namespace moezero::comm
