// comm/local/local_world.h — the shared state of N ranks that are threads of one process:
// one Channel per (group, channel name), and the abort flag that a failing rank raises.
//
// Usually driven by World::run (comm/world.h); usable directly when the caller runs its own
// rank threads.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "comm/local/rendezvous.h"
#include "core/communicator.h"

namespace moezero::comm {

class LocalWorld {
 public:
  // [in] world_size >= 1; [in] options: timeout, link emulation (shared by every channel).
  explicit LocalWorld(int world_size, CommOptions options = {});

  int world_size() const { return world_size_; }
  const CommOptions& options() const { return options_; }

  // The communicator of `global_rank` on (group, channel). Every member of `group` must create
  // one with the same group (name and ranks) and channel name; one channel per stream
  // purpose ("gather", "a2a", "reduce"). Creating it again on the same rank continues the
  // same sequence. Throws when the group has ranks outside the world or lacks global_rank.
  std::unique_ptr<Communicator> make_communicator(const ProcessGroup& group, int global_rank,
                                                  const std::string& channel);

  // Fails every pending and future collective of this world with `reason` (the first reason
  // wins). Called by World::run when a rank throws.
  void abort(const std::string& reason);
  bool aborted() const { return abort_->aborted.load(); }
  // The emulated network shared by every channel; null when emulation is off.
  const EmulatedNetwork* network() const { return network_.get(); }
  // The bytes `global_rank` has sent so far by tier (LinkBytes, comm/net_model.h), over every
  // group and channel of this world, as the network model routes each collective under
  // options().emulation (counted also when emulation is off). Throws for a rank outside.
  LinkBytes link_bytes(int global_rank) const;

 private:
  const int world_size_;
  const CommOptions options_;
  std::shared_ptr<AbortState> abort_ = std::make_shared<AbortState>();
  std::shared_ptr<EmulatedNetwork> network_;  // one NIC (and node link) per rank, all channels
  std::shared_ptr<LinkTally> tally_;          // sent bytes by rank and tier, all channels
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Channel>> channels_;  // key: channel + "@" + group.str()
};

}  // namespace moezero::comm
