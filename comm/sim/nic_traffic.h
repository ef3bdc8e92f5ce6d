// comm/sim/nic_traffic.h — how a node's NICs carry a collective between nodes, as NCCL moves it
// (issue 28). net_model.h gives every rank its own NIC and puts a ring's hop between nodes on
// the NICs of the two ranks at that hop, so a ring over a world group (contiguous: it crosses
// nodes once per node) runs on one NIC per node whatever the node has. NCCL instead runs a ring
// or tree as several channels, each entering and leaving a node through a different NIC, and
// sends an all-to-all's messages from each rank through the NIC nearest to it. The simulated
// network (comm/sim/) models that:
//
// - A node has K NICs (SimNetworkSpec::nics_per_node), each a full-duplex port at the tier's
//   link rate (the link's speed is per NIC). Rank l of a node of G ranks is attached to NIC
//   floor(l K / G), or, when K > G, to its K / G NICs [floor(l K / G), floor((l + 1) K / G)).
//   K = G is one NIC per GPU (HGX nodes); K = 1 one NIC per node.
// - Ring and chain collectives (all-gather, reduce-scatter, ring all-reduce, broadcast,
//   barrier) of a group that spans nodes: net_model's bytes, regrouped per node: what the
//   group's members of a node send (and receive) between nodes is spread evenly over the NICs
//   those members are attached to, and what they send inside the node evenly over the members
//   (the channels rotate which member crosses). A world group crossing nodes so gets K NICs'
//   bandwidth per node boundary; a strided group with one member per node the NIC(s) of that
//   member. A group inside one node keeps net_model's flows.
// - Double binary tree all-reduce of a group that spans nodes: per node, 2 S sent and 2 S
//   received between nodes (the node is inner in one tree and a leaf in the other), spread over
//   the members' NICs; inside the node a chain, each member sending and receiving
//   2 S (m - 1) / m (m members on the node). Latency steps as net_model's.
// - All-to-all-v: per rank, as net_model routes it; a rank's bytes between nodes go through its
//   own NIC(s) (split evenly when it has several), shared with the other ranks attached to it.
// Ports: a Flow's `rank` of an InterNode flow holds the NIC's port id, node * K + j, when
// nics_per_node > 0 (a rank id otherwise); IntraNode flows keep rank ids.
// nics_per_node = 0 keeps net_model's flows unchanged (every rank its own NIC, hops on the
// NICs of the ranks at them): the network `moezero bench` emulates (SimWorldOptions::network).
#pragma once

#include <vector>

#include "comm/net_model.h"

namespace moezero::comm {

struct SimNetworkSpec {
  CommEmulation tiers;    // rates and latencies of the tier inside a node and between nodes
  int nics_per_node = 0;  // K above; 0: net_model's per-rank NICs
};

// The NIC port ids of global rank `rank` (nics_per_node > 0), in order.
std::vector<int> rank_nics(const SimNetworkSpec& spec, int rank);

// net_model's collective_traffic with the node's NICs shared as above.
Traffic nic_collective_traffic(const SimNetworkSpec& spec, const CollectiveShape& shape);

// The double binary tree all-reduce's traffic (each rank sends and receives 2 S; per node as
// above when nics_per_node > 0 and the group spans nodes), over 2 ceil(log2 n) latency steps.
Traffic nic_tree_all_reduce_traffic(const SimNetworkSpec& spec, const CollectiveShape& shape);

}  // namespace moezero::comm
