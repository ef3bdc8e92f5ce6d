// comm/sim/sim_links.h — named link profiles (comm/sim/links.json, compiled in) and the
// topology of a simulated cluster: nodes x GPUs per node, one tier inside a node and one
// between nodes with a node's NICs (comm/sim/nic_traffic.h), as the network model sees it.
#pragma once

#include <string>
#include <vector>

#include "comm/sim/nic_traffic.h"
#include "core/communicator.h"

namespace moezero::comm {

struct LinkProfile {
  std::string name;         // "ib_ndr"
  std::string description;  // "InfiniBand NDR, one 400 Gb/s NIC per GPU"
  bool intra_node = false;  // tier: inside a node (NVLink, PCIe) or between nodes (IB, Ethernet)
  double gbps = 0.0;        // datasheet rate per direction
  double efficiency = 1.0;  // fraction collectives reach
  double latency_us = 0.0;  // per algorithm step
  double effective_gbps() const { return gbps * efficiency; }
};

// Throws UserError listing the known names when `name` is unknown.
LinkProfile link_profile(const std::string& name);
std::vector<std::string> link_profile_names();

struct SimTopology {
  int nodes = 1;
  int gpus_per_node = 8;
  std::string intra_link = "nvlink4";
  std::string inter_link = "ib_ndr";
  int nics_per_node = 0;  // NICs of inter_link per node, each at its rate; 0: gpus_per_node
};

// The simulated network of `topology`: ranks_per_node = gpus_per_node, each tier at its link's
// effective rate and latency (the inter-node rate per NIC), nics_per_node NICs per node (one
// per GPU when 0). Throws UserError naming a bad field (unknown link, a link of the wrong tier,
// nodes or gpus_per_node < 1, nics_per_node < 0).
SimNetworkSpec topology_network(const SimTopology& topology);

}  // namespace moezero::comm
