// comm/local/link_emulation.h — what a collective of the LocalCommunicator puts on the emulated
// network: its nccl-tests size and its shape for the network model (comm/net_model.h).
#pragma once

#include <vector>

#include "comm/local/rendezvous.h"
#include "comm/net_model.h"

namespace moezero::comm {

// [in] arrivals: every rank's call of one collective (all arrived), by group rank;
// [in] group: their ranks. all_to_all_v keeps each rank's send counts, in bytes.
CollectiveShape collective_shape(const std::vector<Arrival>& arrivals, const ProcessGroup& group);

// nccl-tests size of one rank's call, in bytes (CommRecord::bytes).
uint64_t call_size_bytes(const Arrival& a, int group_size);

}  // namespace moezero::comm
