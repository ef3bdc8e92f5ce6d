// comm/nccl/nccl_bootstrap.cpp — in-process unique-id exchange.
#include "comm/nccl/nccl_bootstrap.h"

#include "core/error.h"

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

}  // namespace moezero::comm
