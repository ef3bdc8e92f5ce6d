// comm/sim/sim_communicator.h — internal: the channel (rendezvous of the present members of
// one (group, channel) in virtual time) and the Communicator of the simulated backend.
// The model and its assumptions: comm/sim/sim_world.h.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "comm/host_communicator.h"
#include "comm/local/rendezvous_core.h"
#include "comm/sim/sim_network.h"

namespace moezero::comm {

// The rendezvous skeleton (sequence numbers, failure, abort, signature and count checks) is
// the local channel's (comm/local/rendezvous_core.h); this adds present members, virtual
// time and the modelled completion.
class SimChannel : public RendezvousCore {
 public:
  SimChannel(ProcessGroup group, std::vector<char> present_in_group, std::string name,
             CommOptions options, std::shared_ptr<AbortState> abort,
             std::shared_ptr<PortTimelines> timelines);

  // On the stream worker of group rank `rank`: arrives at virtual time `arrival_s`, waits
  // (wall, bounded) for the other present members, returns the collective's virtual end.
  double run(int rank, uint64_t seq, const HostCall& call, double arrival_s);

 private:
  struct Slot {
    explicit Slot(size_t n_present) : calls(n_present), arrived(n_present, 0) {}
    // By present index (present_index_): a slot costs the present members, not the group (a
    // world collective of 1,024 ranks has 8 present).
    std::vector<HostCall> calls;
    std::vector<char> arrived;
    int n_arrived = 0;
    int n_departed = 0;
    int first_rank = -1;
    double start_s = 0.0;  // latest arrival
    double end_s = 0.0;
    bool done = false;
  };
  // Blocks (wall, bounded) until `slot` is done; throws the channel's failure, the world's
  // abort or a timeout naming the present members that did not arrive.
  void await_locked(std::unique_lock<std::mutex>& lock, const Slot& slot, const CallSignature& sig,
                    uint64_t seq);
  // all_to_all_v's counts between the present members ("" when consistent or another op).
  std::string validate_locked(const Slot& slot, uint64_t seq) const;
  // The full group's collective (absent members copy present ones): its modelled flows.
  // Ring, chain and tree collectives depend only on (op, bytes, root) for one group, an
  // all-to-all-v on its present members' send counts, so their flows on the modelled ports
  // are kept (up to kMaxTraffic and kMaxA2aTraffic): building a 1,024-rank world ring's flows
  // cost more than all the rest of a collective, an all-to-all-v's (n^2 pairs: qgZ's
  // gradient reduction over the world) much more. Caller holds mu_.
  Traffic traffic_locked(const Slot& slot);
  CollectiveShape full_shape(const Slot& slot) const;
  void move_data(Slot& slot) const;
  int source_of(int p) const;  // the present member whose send absent p copies
  // The call of group rank `r` (present) in `slot`.
  const HostCall& call_of(const Slot& slot, int r) const;

  std::vector<char> present_;       // by group rank
  std::vector<int> present_gr_;     // present group ranks, in order
  std::vector<int> present_index_;  // by group rank: its index in present_gr_ (-1: absent)
  std::vector<int> source_;         // by group rank: whose send it is (itself when present)
  std::shared_ptr<PortTimelines> timelines_;
  std::map<uint64_t, std::shared_ptr<Slot>> slots_;
  static constexpr size_t kMaxTraffic = 1024;
  std::map<std::tuple<int, uint64_t, int>, Traffic> traffic_;  // (op, bytes, root) -> flows
  static constexpr size_t kMaxA2aTraffic = 64;
  // (element bytes, each present member's send counts in order) -> flows
  std::map<std::vector<uint64_t>, Traffic> a2a_traffic_;
};

class SimCommunicator final : public HostCommunicator {
 public:
  SimCommunicator(std::shared_ptr<SimChannel> channel, int global_rank);

 private:
  void submit(HostCall call, Stream& stream) override;
  std::shared_ptr<SimChannel> channel_;
  const std::string group_str_;  // its CommRecords' group, formatted once (world: 1,024 ranks)
};

}  // namespace moezero::comm
