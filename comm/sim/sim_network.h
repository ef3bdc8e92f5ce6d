// comm/sim/sim_network.h — the network of a simulated cluster in virtual time: which algorithm
// a collective uses (NCCL's choice by size), what it puts on which port (comm/net_model.h), and
// when it completes while other collectives hold the same ports.
//
// Ports: a rank's port inside its node, and the node's NICs between nodes (nic_traffic.h).
// Contention model (an addition to net_model.h's assumptions, for virtual time). Ranks and
// streams run as threads, so collectives reach the network in wall order, not in virtual
// order; net_model's NetworkModel (processor sharing on a clock that only moves forward)
// cannot take them in that order. Instead every port (rank, tier, direction) keeps a
// reservation timeline: each flow of a collective occupies its port for bytes / rate, in the
// earliest gap of that port at or after the collective's start (all present members arrived);
// the collective ends when its last flow ends, plus its latency steps. So concurrent
// collectives on one port are served one after the other at full rate (FIFO per port) rather
// than side by side at shared rates: a port's busy time, and so a link-bound step's time, is
// the same as under sharing; which of two overlapping collectives finishes first is not.
// Determinism: the result is a function of the order in which collectives reach the network.
// Collectives of one (group, channel) always arrive in their sequence order, and collectives
// ordered by the program (same stream, event waits, host syncs) arrive in that order; two
// collectives of different channels that overlap in virtual time on one port may be taken in
// either order from run to run (their total, and every collective's duration alone, is fixed).
// Old reservations are forgotten past 1024 per port: the oldest half is dropped and the port
// counts as busy until the last dropped one ended (never early, possibly late).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "comm/net_model.h"
#include "comm/sim/nic_traffic.h"

namespace moezero::comm {

enum class Algorithm : uint8_t { Ring, Tree, Direct };
const char* algorithm_name(Algorithm a);  // "ring", "tree", "direct"

// Seconds `traffic` takes on idle ports: its slowest flow plus its latency.
double uncontended_seconds(const CommEmulation& spec, const Traffic& traffic);

// The algorithm NCCL would pick and its traffic on the cluster's NICs (comm/sim/nic_traffic.h):
// all_reduce takes the faster of ring and double binary tree on idle ports (NCCL's tuner also
// picks the algorithm by its predicted time); every other op uses net_model's algorithms
// (ring; all_to_all_v: direct).
Traffic choose_traffic(const SimNetworkSpec& spec, const CollectiveShape& shape, Algorithm* algo);

class PortTimelines {
 public:
  explicit PortTimelines(SimNetworkSpec spec) : spec_(spec) {}
  const SimNetworkSpec& spec() const { return spec_; }
  // Only the ports of these nodes are modelled (by node index; empty: every node). A world of
  // representative ranks (sim_world.h) passes the nodes of its present ranks: under its
  // symmetry assumption every other node's ports see the same reservations as a present
  // node's, so a collective's end over the modelled ports is its end over all of them, at a
  // fraction of the cost (a 1,024-rank world ring reserves thousands of ports).
  void model_only_nodes(std::vector<char> node_modelled) { modelled_ = std::move(node_modelled); }
  // Reserves every flow of `traffic` from `start_s` (see above). Returns the end: the last
  // flow's end plus the latency. Thread-safe.
  double reserve(const Traffic& traffic, double start_s);
  // The flows of `traffic` that reserve() places (on a modelled node, at a rate, with bytes),
  // in order, and its latency: reserve() of the result ends where reserve() of `traffic` does.
  // Callers that reserve one traffic many times keep this instead (a world ring's flows are
  // mostly on nodes that are not modelled).
  Traffic modelled_part(const Traffic& traffic) const;

 private:
  struct Port {
    std::map<double, double> busy;  // start -> end, disjoint
    double floor_s = 0.0;           // nothing before this (forgotten reservations)
  };
  double port_bytes_per_s(const Flow& f) const;
  bool modelled(const Flow& f) const;
  static double place(Port& port, double start_s, double duration_s);

  SimNetworkSpec spec_;
  std::vector<char> modelled_;  // by node; empty: all
  std::mutex mu_;
  // By (rank or NIC) * 4 + tier * 2 + direction; hashed: a world collective of 1,024 ranks
  // reserves thousands of ports.
  std::unordered_map<int64_t, Port> ports_;
};

}  // namespace moezero::comm
