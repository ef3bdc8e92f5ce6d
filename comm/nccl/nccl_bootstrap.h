// comm/nccl/nccl_bootstrap.h — how the ranks of one NCCL communicator agree on its unique id.
//
// NCCL needs the same ncclUniqueId on every rank of a communicator: group rank 0 creates it
// (ncclGetUniqueId) and every other rank must receive it. How it travels depends on how ranks
// run, so it is injected: an NcclIdExchange is called on every rank with the communicator's
// key ("<channel>@<group>"); on group rank 0 with the fresh id to publish, elsewhere with
// nullopt, and returns the id (waiting, bounded, on non-roots). InProcessNcclBootstrap serves
// ranks that are threads of one process; mpi_nccl_exchange serves ranks that are MPI processes.
#pragma once

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "core/process_groups.h"

namespace moezero::comm {

using NcclIdExchange =
    std::function<ncclUniqueId(const std::string& key, std::optional<ncclUniqueId> root_id)>;

// Ids published in a map guarded by a mutex. Non-roots wait up to `timeout` for their root
// and then throw TimeoutError naming the key. A key stays published: when a communicator is
// created again for the same (group, channel), use a fresh bootstrap object, or a non-root
// may pick up the previous id (its init then fails or times out, it never hangs).
// One object per process (or per test); not a global registry.
class InProcessNcclBootstrap {
 public:
  explicit InProcessNcclBootstrap(std::chrono::milliseconds timeout = std::chrono::minutes(3))
      : timeout_(timeout) {}
  // The exchange function; it refers to this object, which must outlive its use.
  NcclIdExchange exchange();

 private:
  ncclUniqueId publish_or_wait(const std::string& key, std::optional<ncclUniqueId> root_id);
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, ncclUniqueId> ids_;
};

#if MOEZERO_HAVE_MPI
// For ranks that are MPI processes (World::run_mpi): group rank 0's id is broadcast over an
// MPI communicator of `group` (MPI_Ibcast on the channel "nccl-id:<key>", polled, at most
// `timeout`; TimeoutError names the key when a member does not join). Every member of the
// group must create its communicators in the same order, as NCCL requires anyway.
NcclIdExchange mpi_nccl_exchange(const ProcessGroup& group, std::chrono::milliseconds timeout);
#endif

}  // namespace moezero::comm
