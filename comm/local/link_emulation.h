// comm/local/link_emulation.h — how many bytes a collective puts on the emulated link.
//
// nccl-tests bus bytes: size * bus_factor(op, n), with size as in CommRecord::bytes. For
// all_to_all_v with uneven counts the busiest rank sets the time: max over ranks of the
// bytes it sends to or receives from its peers (self excluded), which equals
// size * (n-1)/n when the counts are uniform.
#pragma once

#include <vector>

#include "comm/local/rendezvous.h"

namespace moezero::comm {

// [in] arrivals: every rank's call of one collective (all arrived).
double emulated_bus_bytes(const std::vector<Arrival>& arrivals);

// nccl-tests size of one rank's call, in bytes (CommRecord::bytes).
uint64_t call_size_bytes(const Arrival& a, int group_size);

}  // namespace moezero::comm
