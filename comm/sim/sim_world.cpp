// comm/sim/sim_world.cpp — present ranks, channels, abort.
#include "comm/sim/sim_world.h"

#include <algorithm>

#include "comm/sim/sim_communicator.h"
#include "core/error.h"

namespace moezero::comm {

SimWorld::SimWorld(int world_size, std::vector<int> present, SimNetworkSpec network,
                   CommOptions options)
    : world_size_(world_size),
      present_(std::move(present)),
      options_(options),
      timelines_(std::make_shared<PortTimelines>(network)) {
  MOEZERO_REQUIRE(world_size >= 1, "simulated world: world size must be >= 1, got ", world_size);
  MOEZERO_REQUIRE(options.timeout.count() > 0, "simulated world: timeout must be > 0 ms, got ",
                  options.timeout.count());
  if (present_.empty())
    for (int r = 0; r < world_size; ++r) present_.push_back(r);
  is_present_.assign(static_cast<size_t>(world_size), 0);
  for (int r : present_) {
    MOEZERO_REQUIRE(r >= 0 && r < world_size, "simulated world: present rank ", r,
                    " is outside the world of ", world_size);
    MOEZERO_REQUIRE(!is_present_[static_cast<size_t>(r)], "simulated world: present rank ", r,
                    " listed twice");
    is_present_[static_cast<size_t>(r)] = 1;
  }
  // The ports of nodes with a present rank (the rest are symmetric copies: sim_network.h).
  const int per_node = std::max(1, network.tiers.ranks_per_node);
  std::vector<char> nodes(static_cast<size_t>((world_size + per_node - 1) / per_node), 0);
  for (int r : present_) nodes[static_cast<size_t>(r / per_node)] = 1;
  timelines_->model_only_nodes(std::move(nodes));
}

SimWorld::~SimWorld() = default;

bool SimWorld::is_present(int rank) const {
  return rank >= 0 && rank < world_size_ && is_present_[static_cast<size_t>(rank)];
}

std::unique_ptr<Communicator> SimWorld::make_communicator(const ProcessGroup& group,
                                                          int global_rank,
                                                          const std::string& channel) {
  check_group(group, world_size_, global_rank);
  std::vector<char> present_in_group;
  for (int r : group.ranks) present_in_group.push_back(is_present_[static_cast<size_t>(r)]);
  MOEZERO_CHECK(is_present(global_rank), "make_communicator: rank ", global_rank,
                " is not present in the simulated world");
  std::shared_ptr<SimChannel> ch;
  {
    std::lock_guard lock(mu_);
    auto& entry = channels_[channel + "@" + group.str()];
    if (!entry)
      entry = std::make_shared<SimChannel>(group, std::move(present_in_group), channel, options_,
                                           abort_, timelines_);
    ch = entry;
  }
  return std::make_unique<SimCommunicator>(std::move(ch), global_rank);
}

void SimWorld::abort(const std::string& reason) {
  if (!abort_->raise(reason)) return;
  std::lock_guard lock(mu_);
  for (auto& [key, ch] : channels_) ch->notify_abort();
}

}  // namespace moezero::comm
