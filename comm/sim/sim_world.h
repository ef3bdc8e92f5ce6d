// comm/sim/sim_world.h — the simulated communicator: collectives in virtual time over the
// network of a simulated cluster (comm/sim/sim_network.h), for ranks that are threads with
// simulated devices (kernels/sim/, whose streams are VirtualStreams: core/virtual_time.h).
//
// Representative ranks. A world of 1,024 ranks cannot run 1,024 threads: a SimWorld knows
// the virtual world size and which ranks are present (run as threads); the others are
// modelled. A collective completes when every PRESENT member of its group has arrived:
//   arrival  = the member's stream time when the stream reaches the call;
//   start    = the latest arrival; absent members are assumed to arrive with the present ones
//              (symmetry: they run the same program on their own data);
//   end      = start + the modelled time of the FULL group (all its sizes and tiers), on the
//              per-port timelines shared by the whole world; every present member's stream
//              clock becomes `end`.
// Data. No bytes move for unbacked (big) buffers. When every present member's send and recv
// buffers are backed (small: counters, host_exchange words), the values DO move, computed
// over the full group with each absent member's send taken as a copy of a present member's:
// the i-th absent member of the group (in group order) copies present member i mod P (the
// group's P present members in group order). So each present member's value counts n / P
// times when P divides n: all_reduce Sum of v over a group of n with one present member
// gives n * v; with all present, the exact sum. When the present ranks are the first P of a
// group of replicas (one EP group of the world), an absent rank copies the present rank at
// its own position in its replica. all_to_all_v counts are
// checked between present members only (an absent peer's counts are not known).
// A present member that never arrives fails the collective on every waiting stream with a
// TimeoutError naming the op, group, channel, seq and the missing ranks (CommOptions::timeout,
// wall time).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/local/rendezvous_core.h"
#include "comm/sim/sim_network.h"
#include "core/communicator.h"

namespace moezero::comm {

class SimChannel;

class SimWorld {
 public:
  // [in] present: the global ranks run as threads (empty: all); [in] network: the cluster's
  // tiers and NICs (topology_network of comm/sim/sim_links.h); [in] options: the timeout
  // (emulation is ignored: the network is `network`).
  SimWorld(int world_size, std::vector<int> present, SimNetworkSpec network,
           CommOptions options = {});
  ~SimWorld();

  int world_size() const { return world_size_; }
  const std::vector<int>& present() const { return present_; }
  bool is_present(int rank) const;
  const SimNetworkSpec& network() const { return timelines_->spec(); }

  // The communicator of present rank `global_rank` on (group, channel): as LocalWorld's
  // (same rules), over the group's present members. Its stream must be a VirtualStream.
  std::unique_ptr<Communicator> make_communicator(const ProcessGroup& group, int global_rank,
                                                  const std::string& channel);
  void abort(const std::string& reason);

 private:
  const int world_size_;
  std::vector<int> present_;
  std::vector<char> is_present_;
  const CommOptions options_;
  std::shared_ptr<PortTimelines> timelines_;
  std::shared_ptr<AbortState> abort_ = std::make_shared<AbortState>();
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<SimChannel>> channels_;
};

}  // namespace moezero::comm
