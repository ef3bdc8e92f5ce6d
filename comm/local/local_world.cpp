// comm/local/local_world.cpp — channel registry and world abort.
#include "comm/local/local_world.h"

#include "comm/local/link_emulation.h"
#include "comm/local/local_communicator.h"
#include "core/error.h"

namespace moezero::comm {

LocalWorld::LocalWorld(int world_size, CommOptions options)
    : world_size_(world_size), options_(options) {
  MOEZERO_CHECK(world_size >= 1, "LocalWorld: world size must be >= 1, got ", world_size);
  MOEZERO_CHECK(options.timeout.count() > 0, "LocalWorld: timeout must be > 0 ms, got ",
                options.timeout.count());
  MOEZERO_CHECK(options.emulation.link_gbps >= 0 && options.emulation.latency_us >= 0,
                "LocalWorld: comm_emulation values must be >= 0, got link_gbps ",
                options.emulation.link_gbps, ", latency_us ", options.emulation.latency_us);
  MOEZERO_CHECK(options.emulation.ranks_per_node >= 0 && options.emulation.intra_node_gbps >= 0 &&
                    options.emulation.intra_node_latency_us >= 0,
                "LocalWorld: comm_emulation values must be >= 0, got ranks_per_node ",
                options.emulation.ranks_per_node, ", intra_node_gbps ",
                options.emulation.intra_node_gbps, ", intra_node_latency_us ",
                options.emulation.intra_node_latency_us);
  if (options.emulation.enabled()) network_ = std::make_shared<EmulatedNetwork>(options.emulation);
  tally_ = std::make_shared<LinkTally>(world_size);
}

LinkBytes LocalWorld::link_bytes(int global_rank) const { return tally_->of(global_rank); }

std::unique_ptr<Communicator> LocalWorld::make_communicator(const ProcessGroup& group,
                                                            int global_rank,
                                                            const std::string& channel) {
  check_group(group, world_size_, global_rank);
  std::shared_ptr<Channel> ch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& entry = channels_[channel + "@" + group.str()];
    if (!entry)
      entry = std::make_shared<Channel>(group, channel, options_, abort_, network_, tally_);
    ch = entry;
  }
  return std::make_unique<LocalCommunicator>(std::move(ch), global_rank);
}

void LocalWorld::abort(const std::string& reason) {
  if (!abort_->raise(reason)) return;
  if (network_) network_->notify_abort();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, ch] : channels_) ch->notify_abort();
}

}  // namespace moezero::comm
