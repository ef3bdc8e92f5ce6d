// comm/mpi/mpi_communicator.h — Communicator for ranks that are MPI processes (one rank per
// process, CPU backend): `mpirun -np N moezero train ...`.
//
// Same semantics as LocalCommunicator (core/communicator.h), so a run under mpirun gives the
// same numbers as ranks-as-threads, bit for bit:
// - reductions never use MPI_Op: the contributions are exchanged (MPI_Ialltoall(v)) and reduced
//   with comm/local/reduce.h in group-rank order with fp32 accumulation, exactly as the local
//   backend does; all_reduce is that reduce_scatter of slices followed by an all-gather.
// - every call is checked across ranks first (comm/mpi/mpi_channel.h, agree()): divergent
//   calls and all_to_all_v counts that do not pair up fail on every rank with the same Error.
// - collectives run on the stream as host work (the stream's worker thread calls MPI), on the
//   channel's own MPI communicator, polled with a deadline: TimeoutError names the op, group,
//   channel, seq and the ranks that did not arrive.
// Created by MpiWorld::make_communicator (comm/mpi/mpi_world.h) or RankContext under
// World::run_mpi. Host-side argument checks throw at the call.
#pragma once

#include <memory>

#include "comm/host_communicator.h"
#include "comm/mpi/mpi_collectives.h"

namespace moezero::comm {

class MpiCommunicator final : public HostCommunicator {
 public:
  MpiCommunicator(std::shared_ptr<MpiChannel> channel, int global_rank);

 private:
  // Takes the next sequence number and enqueues the collective on `stream`.
  void submit(MpiCall call, Stream& stream) override;

  std::shared_ptr<MpiChannel> channel_;
};

}  // namespace moezero::comm
