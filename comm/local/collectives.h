// comm/local/collectives.h — the data movement of each collective, run by one rank's stream
// worker once every rank has arrived (comm/local/rendezvous.h). One file per collective.
//
// Rule shared by all: a rank reads the peers' send buffers and writes only its own recv
// buffer (all_reduce: its chunk of the shared staging buffer, then its own recv), so ranks
// move data in parallel without locks.
#pragma once

#include <cstdint>

#include "comm/local/rendezvous.h"

namespace moezero::comm {

void move_all_gather(const Slot& slot, int rank);
void move_reduce_scatter(const Slot& slot, int rank);
void move_all_reduce(Channel& channel, Slot& slot, int rank, uint64_t seq);
void move_all_to_all_v(const Slot& slot, int rank);
void move_broadcast(const Slot& slot, int rank);

}  // namespace moezero::comm
