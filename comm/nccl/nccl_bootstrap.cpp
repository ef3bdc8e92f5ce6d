// comm/nccl/nccl_bootstrap.cpp — in-process unique-id exchange.
#include "comm/nccl/nccl_bootstrap.h"

#include "core/error.h"
#if MOEZERO_HAVE_MPI
#include <memory>

#include "comm/mpi/mpi_world.h"
#endif

namespace moezero::comm {

NcclIdExchange InProcessNcclBootstrap::exchange() {
  return [this](const std::string& key, std::optional<ncclUniqueId> root_id) {
    return publish_or_wait(key, root_id);
  };
}

ncclUniqueId InProcessNcclBootstrap::publish_or_wait(const std::string& key,
                                                     std::optional<ncclUniqueId> root_id) {
  std::unique_lock<std::mutex> lock(mu_);
  if (root_id) {
    ids_[key] = *root_id;
    cv_.notify_all();
    return *root_id;
  }
  if (!cv_.wait_for(lock, timeout_, [&] { return ids_.count(key) > 0; }))
    MOEZERO_THROW_AS(TimeoutError, "NCCL bootstrap: no unique id for '", key, "' after ",
                     timeout_.count(), " ms (group rank 0 never created the communicator)");
  return ids_.at(key);
}

#if MOEZERO_HAVE_MPI
NcclIdExchange mpi_nccl_exchange(const ProcessGroup& group, std::chrono::milliseconds timeout) {
  return [group, timeout](const std::string& key, std::optional<ncclUniqueId> root_id) {
    CommOptions options;
    options.timeout = timeout;
    auto ch = MpiWorld::instance().channel(group, "nccl-id:" + key, options);
    auto id = std::make_shared<ncclUniqueId>();  // kept alive if the broadcast times out
    if (root_id) *id = *root_id;
    MPI_Request req = MPI_REQUEST_NULL;
    MOEZERO_MPI_CHECK(MPI_Ibcast(id.get(), static_cast<int>(sizeof(ncclUniqueId)), MPI_BYTE, 0,
                                 ch->comm(), &req));
    ch->wait({&req, 1}, "NCCL bootstrap: broadcast of the unique id for '" + key + "'",
             ch->deadline_from_now(), id);
    return *id;
  };
}
#endif

}  // namespace moezero::comm
