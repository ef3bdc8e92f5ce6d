// core/process_groups.h — the groups of ranks that collectives run over.
//
// A ProcessGroup is an ordered list of global ranks; a rank's position in the list is its
// group rank. ProcessGroups builds the three families moezero uses from (world size, ep_size):
//   world : all ranks                                   {0, 1, ..., W-1}
//   EP    : expert-parallel, consecutive ranks          ep g = {g*P, ..., g*P + P-1}   (P =
//   ep_size)
//           the all-to-all peers: experts are split across the P ranks of an EP group.
//   EDP   : expert-data-parallel, same EP index         edp i = {i, i+P, i+2P, ...}
//           the ranks holding the same experts; they share (ZeRO-shard) those experts.
// Example W = 4, P = 2: EP {0,1} {2,3}; EDP {0,2} {1,3}.
#pragma once

#include <string>
#include <vector>

namespace moezero {

struct ProcessGroup {
  std::string name;        // "world", "ep0", "edp1": names the group in errors and traces
  std::vector<int> ranks;  // global ranks, distinct; group rank i is ranks[i]

  int size() const { return static_cast<int>(ranks.size()); }
  bool contains(int global_rank) const;
  // Position of `global_rank` in `ranks`; throws moezero::Error when it is not a member.
  int group_rank(int global_rank) const;
  // "ep1{2,3}"
  std::string str() const;
  bool operator==(const ProcessGroup& o) const = default;
};

// The world group of `world_size` ranks (name "world").
ProcessGroup make_world_group(int world_size);

// How a group's ranks sit on nodes of `ranks_per_node` consecutive global ranks (global rank g
// on node g / ranks_per_node; 0: every rank its own node, CommEmulation's convention). The
// two-hop gradient reduction (zero.quantized_gradients, zero/quantized_reduce.h) needs a regular
// split: every node that holds members holds the same number L of them, consecutive in group
// order, so that group rank r = m * L + l (m: the node's position among the group's nodes, l:
// the rank's position inside its node).
struct NodeSplit {
  int nodes = 1;       // M: nodes holding members of the group
  int per_node = 1;    // L: members on each of them
  ProcessGroup intra;  // this rank's node's members, group order; name "<group>.node<m>"
  ProcessGroup cross;  // the members of local index l, one per node; name "<group>.x<l>"
};
// Empty when `group`'s split over nodes of `ranks_per_node` (>= 0) is regular, else one line
// saying why not (naming the group and the node counts).
std::string node_split_error(const ProcessGroup& group, int ranks_per_node);
// The split as seen from `global_rank` (a member). Throws moezero::UserError with
// node_split_error's reason when the split is not regular.
NodeSplit node_split(const ProcessGroup& group, int ranks_per_node, int global_rank);
// hpZ (ZeRO++ hierarchical partitions, zero.hpz_partition_size): secondary partitions are
// blocks of `partition_size` consecutive global ranks (normally a node). The members of
// `group` inside the partition of `global_rank` (a member), in group order, named
// "<group.name>.hpz<partition>": the group's node-local subgroup.
ProcessGroup secondary_partition_of(const ProcessGroup& group, int global_rank, int partition_size);
// How many members of `group` each partition that holds any of them holds: that number when
// the split is regular (node_split_error with nodes of partition_size ranks is empty), else 0
// (hpZ cannot split the group evenly).
int secondary_partition_members(const ProcessGroup& group, int partition_size);

class ProcessGroups {
 public:
  // [in] world_size >= 1; [in] ep_size >= 1, divides world_size; [in] num_experts >= 1,
  // divisible by ep_size. Throws moezero::Error naming the values otherwise.
  ProcessGroups(int world_size, int ep_size, int num_experts);

  int world_size() const { return world_size_; }
  int ep_size() const { return ep_size_; }
  int edp_size() const { return world_size_ / ep_size_; }
  int num_experts() const { return num_experts_; }
  int experts_per_rank() const { return num_experts_ / ep_size_; }

  const ProcessGroup& world() const { return world_; }
  const std::vector<ProcessGroup>& ep_groups() const { return ep_groups_; }    // edp_size of them
  const std::vector<ProcessGroup>& edp_groups() const { return edp_groups_; }  // ep_size of them
  const ProcessGroup& ep_group_of(int global_rank) const;
  const ProcessGroup& edp_group_of(int global_rank) const;
  int ep_rank(int global_rank) const;   // position in its EP group  (= global % ep_size)
  int edp_rank(int global_rank) const;  // position in its EDP group (= global / ep_size)
  // The global expert ids whose shards `global_rank` holds: [first, first + experts_per_rank).
  int first_local_expert(int global_rank) const;
  // The EP group rank that owns `expert` (where tokens routed to it are sent).
  int ep_owner_of_expert(int expert) const;

 private:
  void check_rank(int global_rank) const;
  int world_size_;
  int ep_size_;
  int num_experts_;
  ProcessGroup world_;
  std::vector<ProcessGroup> ep_groups_;
  std::vector<ProcessGroup> edp_groups_;
};

}  // namespace moezero
