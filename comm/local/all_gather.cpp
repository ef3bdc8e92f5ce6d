// comm/local/all_gather.cpp — recv (n, elems) = [send of rank 0, ..., send of rank n-1].
#include <cstring>

#include "comm/local/collectives.h"

namespace moezero::comm {

void move_all_gather(const Slot& slot, int rank) {
  const Arrival& me = slot.arrivals[static_cast<size_t>(rank)];
  const size_t chunk_bytes = me.sig.elems * dtype_size_bytes(me.sig.dtype);
  if (chunk_bytes == 0) return;
  auto* recv = static_cast<std::byte*>(me.recv);
  for (size_t p = 0; p < slot.arrivals.size(); ++p) {
    std::byte* dst = recv + p * chunk_bytes;
    const void* src = slot.arrivals[p].send;
    if (dst != src) std::memcpy(dst, src, chunk_bytes);  // equal: in place, own chunk
  }
}

}  // namespace moezero::comm
