// comm/local/broadcast.cpp — recv (elems) = the root's send (elems) on every rank.
#include <cstring>

#include "comm/local/collectives.h"

namespace moezero::comm {

void move_broadcast(const Slot& slot, int rank) {
  const Arrival& me = slot.arrivals[static_cast<size_t>(rank)];
  const Arrival& root = slot.arrivals[static_cast<size_t>(me.sig.root)];
  const size_t bytes = me.sig.elems * dtype_size_bytes(me.sig.dtype);
  if (bytes > 0 && me.recv != root.send) std::memcpy(me.recv, root.send, bytes);
}

}  // namespace moezero::comm
