// comm/mpi/mpi_collectives.h — the data movement of each collective over one MPI channel,
// run by the stream worker after the ranks agreed on the call (MpiChannel::agree). One file
// per family: mpi_all_gather.cpp (all_gather, broadcast), mpi_reduce.cpp (reduce_scatter,
// all_reduce), mpi_all_to_all_v.cpp.
//
// Every MPI wait is bounded by `deadline` (MpiChannel::wait). Reductions are computed by
// reduce_elems (comm/local/reduce.h) over the contributions in group-rank order, never by
// MPI, so results equal LocalCommunicator's bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/call_signature.h"
#include "comm/host_communicator.h"
#include "comm/mpi/mpi_channel.h"

namespace moezero::comm {

using MpiCall = HostCall;  // one rank's checked call (comm/host_communicator.h)

// [in] what: MpiChannel::where() of the call, for errors.
void mpi_all_gather(MpiChannel& ch, const MpiCall& call, const std::string& what,
                    Deadline deadline);
void mpi_broadcast(MpiChannel& ch, const MpiCall& call, const std::string& what, Deadline deadline);
void mpi_reduce_scatter(MpiChannel& ch, const MpiCall& call, const std::string& what,
                        Deadline deadline);
void mpi_all_reduce(MpiChannel& ch, const MpiCall& call, const std::string& what,
                    Deadline deadline);
// [in] counts: every rank's send counts (size x size, row = sender), from agree().
void mpi_all_to_all_v(MpiChannel& ch, const MpiCall& call, const std::vector<int64_t>& counts,
                      const std::string& what, Deadline deadline);

}  // namespace moezero::comm
