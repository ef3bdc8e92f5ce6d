// comm/mpi/mpi_world.h — the MPI side of one process: initialisation, identity, and the
// registry of MPI communicators, one per (group, channel).
//
// MPI is process-global, so MpiWorld is the one documented registry of the comm layer:
// instance() initialises MPI on first use with MPI_THREAD_MULTIPLE (stream workers call MPI
// concurrently) and fails clearly when the MPI library cannot provide it; MPI_Finalize runs
// at process exit (static destruction, on the main thread), after the registry's
// communicators are freed. Never instantiate it otherwise.
//
// Channels: every (group, channel name) gets its own MPI communicator, created collectively by
// the group's members only (MPI_Comm_create_group over MPI_Group_incl of the group's ranks, in
// group-rank order, with a tag derived from the key), so collectives on different streams
// ("gather", "reduce", "a2a", "router", "misc") can never match each other. Creation waits at
// most the communicator's timeout for the other members, then throws TimeoutError.
// Creating the communicator of a key again returns the same channel (the sequence continues).
#pragma once

#include <mpi.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "comm/mpi/mpi_channel.h"
#include "core/communicator.h"

namespace moezero::comm {

class MpiWorld {
 public:
  // The process's MPI world; initialises MPI on the first call. Throws moezero::Error when
  // MPI_Init_thread fails or provides less than MPI_THREAD_MULTIPLE.
  static MpiWorld& instance();
  // True once MPI has been initialised (by instance() or by the program) and not finalised.
  static bool initialised();
  // MPI_Abort(MPI_COMM_WORLD, code): ends every process of the job. Does not return.
  [[noreturn]] static void abort_job(int code);

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // This process's communicator on (group, channel) (see the header comment). Every member of
  // `group` must call it with the same group and channel. Throws when this process is not a
  // member, the group has ranks outside the world, or the members do not all arrive in time.
  std::unique_ptr<Communicator> make_communicator(const ProcessGroup& group,
                                                  const std::string& channel,
                                                  const CommOptions& options = {});
  // The shared channel behind make_communicator (also used for the NCCL id bootstrap).
  std::shared_ptr<MpiChannel> channel(const ProcessGroup& group, const std::string& name,
                                      const CommOptions& options);

  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

 private:
  MpiWorld();
  MPI_Comm create_comm(const ProcessGroup& group, const std::string& key,
                       std::chrono::milliseconds timeout);

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  bool we_initialised_ = false;  // MPI_Finalize only what we initialised
  std::mutex mu_;                // serialises communicator creation
  std::map<std::string, std::shared_ptr<MpiChannel>> channels_;  // key: channel@group.str()
};

}  // namespace moezero::comm
