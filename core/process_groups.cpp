// core/process_groups.cpp — construction and validation of world / EP / EDP groups.
#include "core/process_groups.h"

#include <algorithm>

#include "core/error.h"

namespace moezero {

bool ProcessGroup::contains(int global_rank) const {
  return std::find(ranks.begin(), ranks.end(), global_rank) != ranks.end();
}

int ProcessGroup::group_rank(int global_rank) const {
  auto it = std::find(ranks.begin(), ranks.end(), global_rank);
  if (it == ranks.end()) MOEZERO_THROW("rank ", global_rank, " is not a member of group ", str());
  return static_cast<int>(it - ranks.begin());
}

std::string ProcessGroup::str() const {
  std::string s = name + "{";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(ranks[i]);
  }
  return s + "}";
}

ProcessGroup make_world_group(int world_size) {
  MOEZERO_CHECK(world_size >= 1, "world size must be >= 1, got ", world_size);
  ProcessGroup g{"world", {}};
  for (int r = 0; r < world_size; ++r) g.ranks.push_back(r);
  return g;
}

namespace {
int node_of(int global_rank, int ranks_per_node) {
  return ranks_per_node > 0 ? global_rank / ranks_per_node : global_rank;
}
}  // namespace

std::string node_split_error(const ProcessGroup& group, int ranks_per_node) {
  // Runs of members on one node, in group order.
  std::vector<std::pair<int, int>> runs;  // (node, members)
  for (int g : group.ranks) {
    const int node = node_of(g, ranks_per_node);
    if (!runs.empty() && runs.back().first == node)
      ++runs.back().second;
    else
      runs.emplace_back(node, 1);
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (runs[j].first == runs[i].first)
        return "group " + group.str() + " has members of node " + std::to_string(runs[i].first) +
               " apart in group order";
    if (runs[i].second != runs[0].second)
      return "group " + group.str() + " has " + std::to_string(runs[0].second) +
             " rank(s) on node " + std::to_string(runs[0].first) + " but " +
             std::to_string(runs[i].second) + " on node " + std::to_string(runs[i].first) +
             " (nodes of " + std::to_string(ranks_per_node) + " ranks)";
  }
  return {};
}

NodeSplit node_split(const ProcessGroup& group, int ranks_per_node, int global_rank) {
  const std::string why = node_split_error(group, ranks_per_node);
  if (!why.empty())
    MOEZERO_USER_ERROR(
        "the two-hop gradient reduction needs the same number of ranks of a group on every node: ",
        why);
  const int r = group.group_rank(global_rank);
  const int first_node = node_of(group.ranks[0], ranks_per_node);
  NodeSplit s;
  s.per_node = 0;
  for (int g : group.ranks) s.per_node += node_of(g, ranks_per_node) == first_node;
  s.nodes = group.size() / s.per_node;
  const int m = r / s.per_node, l = r % s.per_node;
  s.intra.name = group.name + ".node" + std::to_string(m);
  for (int i = 0; i < s.per_node; ++i)
    s.intra.ranks.push_back(group.ranks[static_cast<size_t>(m * s.per_node + i)]);
  s.cross.name = group.name + ".x" + std::to_string(l);
  for (int i = 0; i < s.nodes; ++i)
    s.cross.ranks.push_back(group.ranks[static_cast<size_t>(i * s.per_node + l)]);
  return s;
}

ProcessGroup secondary_partition_of(const ProcessGroup& group, int global_rank,
                                    int partition_size) {
  MOEZERO_CHECK(partition_size >= 1, "hpZ partition size must be >= 1, got ", partition_size);
  MOEZERO_CHECK(group.contains(global_rank), "rank ", global_rank, " is not a member of group ",
                group.str());
  const int part = global_rank / partition_size;
  ProcessGroup g{group.name + ".hpz" + std::to_string(part), {}};
  for (int r : group.ranks)
    if (r / partition_size == part) g.ranks.push_back(r);
  return g;
}

int secondary_partition_members(const ProcessGroup& group, int partition_size) {
  MOEZERO_CHECK(partition_size >= 1, "hpZ partition size must be >= 1, got ", partition_size);
  // A secondary partition is a node of partition_size ranks: the split node_split checks.
  if (group.ranks.empty() || !node_split_error(group, partition_size).empty()) return 0;
  return static_cast<int>(secondary_partition_of(group, group.ranks[0], partition_size).size());
}

ProcessGroups::ProcessGroups(int world_size, int ep_size, int num_experts)
    : world_size_(world_size), ep_size_(ep_size), num_experts_(num_experts) {
  if (world_size < 1) MOEZERO_THROW("process groups: world size must be >= 1, got ", world_size);
  if (ep_size < 1) MOEZERO_THROW("process groups: ep_size must be >= 1, got ", ep_size);
  if (world_size % ep_size != 0)
    MOEZERO_THROW("process groups: ep_size ", ep_size, " does not divide the world size ",
                  world_size, " (EP groups are consecutive ranks of ep_size each)");
  if (num_experts < 1) MOEZERO_THROW("process groups: num_experts must be >= 1, got ", num_experts);
  if (num_experts % ep_size != 0)
    MOEZERO_THROW("process groups: num_experts ", num_experts, " is not divisible by ep_size ",
                  ep_size, " (each rank of an EP group must own the same number of experts)");
  world_ = make_world_group(world_size);
  const int n_ep_groups = world_size / ep_size;
  for (int g = 0; g < n_ep_groups; ++g) {
    ProcessGroup pg{"ep" + std::to_string(g), {}};
    for (int i = 0; i < ep_size; ++i) pg.ranks.push_back(g * ep_size + i);
    ep_groups_.push_back(std::move(pg));
  }
  for (int i = 0; i < ep_size; ++i) {
    ProcessGroup pg{"edp" + std::to_string(i), {}};
    for (int g = 0; g < n_ep_groups; ++g) pg.ranks.push_back(g * ep_size + i);
    edp_groups_.push_back(std::move(pg));
  }
}

void ProcessGroups::check_rank(int global_rank) const {
  if (global_rank < 0 || global_rank >= world_size_)
    MOEZERO_THROW("process groups: rank ", global_rank, " out of range [0, ", world_size_, ")");
}

const ProcessGroup& ProcessGroups::ep_group_of(int global_rank) const {
  check_rank(global_rank);
  return ep_groups_[global_rank / ep_size_];
}

const ProcessGroup& ProcessGroups::edp_group_of(int global_rank) const {
  check_rank(global_rank);
  return edp_groups_[global_rank % ep_size_];
}

int ProcessGroups::ep_rank(int global_rank) const {
  check_rank(global_rank);
  return global_rank % ep_size_;
}

int ProcessGroups::edp_rank(int global_rank) const {
  check_rank(global_rank);
  return global_rank / ep_size_;
}

int ProcessGroups::first_local_expert(int global_rank) const {
  return ep_rank(global_rank) * experts_per_rank();
}

int ProcessGroups::ep_owner_of_expert(int expert) const {
  if (expert < 0 || expert >= num_experts_)
    MOEZERO_THROW("process groups: expert ", expert, " out of range [0, ", num_experts_, ")");
  return expert / experts_per_rank();
}

}  // namespace moezero
