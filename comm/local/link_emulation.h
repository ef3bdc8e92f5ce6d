// comm/local/link_emulation.h — what a collective of the LocalCommunicator puts on the emulated
// network: its nccl-tests size and its shape for the network model (comm/net_model.h).
#pragma once

#include <mutex>
#include <vector>

#include "comm/local/rendezvous.h"
#include "comm/net_model.h"

namespace moezero::comm {

// [in] arrivals: every rank's call of one collective (all arrived), by group rank;
// [in] group: their ranks. all_to_all_v keeps each rank's send counts, in bytes.
CollectiveShape collective_shape(const std::vector<Arrival>& arrivals, const ProcessGroup& group);

// nccl-tests size of one rank's call, in bytes (CommRecord::bytes).
uint64_t call_size_bytes(const Arrival& a, int group_size);

// Every rank's sent bytes by tier (LinkBytes) since the world began, over all its groups and
// channels; thread-safe. A LocalWorld's channels add each collective's traffic when its last
// rank arrives, whether or not the link is emulated.
class LinkTally {
 public:
  explicit LinkTally(int world_size) : sent_(static_cast<size_t>(world_size)) {}
  // Adds the Send flows of `traffic` to their ranks.
  void add(const Traffic& traffic);
  // [in] global_rank in [0, world_size). Throws otherwise.
  LinkBytes of(int global_rank) const;

 private:
  mutable std::mutex mu_;
  std::vector<LinkBytes> sent_;  // by global rank
};

}  // namespace moezero::comm
