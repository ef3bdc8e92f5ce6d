// comm/sim/nic_traffic.cpp — a collective's flows with a node's NICs shared (nic_traffic.h).
#include "comm/sim/nic_traffic.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/error.h"

namespace moezero::comm {

namespace {

int ranks_per_node(const SimNetworkSpec& spec) {
  return spec.tiers.ranks_per_node > 0 ? spec.tiers.ranks_per_node : 1;
}

// A group's members on one node, and the NIC ports they are attached to.
struct NodeMembers {
  std::vector<int> ranks;
  std::vector<int> nics;  // sorted, unique
};

// [first, last) of the NIC port ids of `rank` (rank_nics without the vector).
std::pair<int64_t, int64_t> nic_range(const SimNetworkSpec& spec, int rank) {
  const int64_t g = ranks_per_node(spec), k = spec.nics_per_node;
  const int64_t node = rank / g, l = rank % g;
  const int64_t first = l * k / g;
  const int64_t last = std::max(first + 1, (l + 1) * k / g);
  return {node * k + first, node * k + last};
}

std::map<int, NodeMembers> members_by_node(const SimNetworkSpec& spec,
                                           const std::vector<int>& ranks) {
  std::map<int, NodeMembers> out;
  for (int r : ranks) {
    NodeMembers& m = out[r / ranks_per_node(spec)];
    m.ranks.push_back(r);
    const auto [first, last] = nic_range(spec, r);
    for (int64_t nic = first; nic < last; ++nic) m.nics.push_back(static_cast<int>(nic));
  }
  for (auto& [node, m] : out) {
    std::sort(m.nics.begin(), m.nics.end());
    m.nics.erase(std::unique(m.nics.begin(), m.nics.end()), m.nics.end());
  }
  return out;
}

// One flow per port: sums what several ranks put on a shared NIC.
class PortSum {
 public:
  void add(int port, Tier t, Direction d, double bytes) {
    sums_[{port, static_cast<int>(t), static_cast<int>(d)}] += bytes;
  }
  Traffic traffic(double latency_s) const {
    Traffic out;
    for (const auto& [key, bytes] : sums_)
      out.flows.push_back(Flow{std::get<0>(key), static_cast<Tier>(std::get<1>(key)),
                               static_cast<Direction>(std::get<2>(key)), bytes});
    out.latency_s = latency_s;
    return out;
  }

 private:
  std::map<std::tuple<int, int, int>, double> sums_;
};

// Adds `inter` bytes of one direction between nodes for `m`, spread over its NICs, and
// `intra` bytes of that direction inside the node, spread over its members. Every port of a
// node belongs to that node alone, so each gets one flow per direction.
void add_node(Traffic& out, const NodeMembers& m, Direction d, double inter, double intra) {
  for (int nic : m.nics)
    out.flows.push_back(Flow{nic, Tier::InterNode, d, inter / static_cast<double>(m.nics.size())});
  if (m.ranks.size() > 1)
    for (int r : m.ranks)
      out.flows.push_back(Flow{r, Tier::IntraNode, d, intra / static_cast<double>(m.ranks.size())});
}

bool spans_nodes(const SimNetworkSpec& spec, const std::vector<int>& ranks) {
  for (int r : ranks)
    if (tier_between(spec.tiers, ranks[0], r) == Tier::InterNode) return true;
  return false;
}

// Ring and chain collectives spanning nodes: net_model's flows, regrouped per node.
Traffic spread_per_node(const SimNetworkSpec& spec, const CollectiveShape& shape,
                        const Traffic& per_rank) {
  struct Sums {
    double inter[2] = {0.0, 0.0}, intra[2] = {0.0, 0.0};  // by Direction
  };
  std::map<int, Sums> node_sums;
  for (const Flow& f : per_rank.flows) {
    Sums& s = node_sums[f.rank / ranks_per_node(spec)];
    (f.tier == Tier::InterNode ? s.inter : s.intra)[static_cast<int>(f.dir)] += f.bytes;
  }
  Traffic out;
  out.latency_s = per_rank.latency_s;
  for (const auto& [node, m] : members_by_node(spec, shape.ranks)) {
    const Sums& s = node_sums[node];
    for (Direction d : {Direction::Send, Direction::Recv})
      add_node(out, m, d, s.inter[static_cast<int>(d)], s.intra[static_cast<int>(d)]);
  }
  return out;
}

// All-to-all-v: a rank's bytes between nodes through its own NIC(s).
Traffic onto_rank_nics(const SimNetworkSpec& spec, const Traffic& per_rank) {
  PortSum sum;
  for (const Flow& f : per_rank.flows) {
    if (f.tier == Tier::IntraNode) {
      sum.add(f.rank, f.tier, f.dir, f.bytes);
      continue;
    }
    const auto [first, last] = nic_range(spec, f.rank);
    for (int64_t nic = first; nic < last; ++nic)
      sum.add(static_cast<int>(nic), f.tier, f.dir, f.bytes / static_cast<double>(last - first));
  }
  return sum.traffic(per_rank.latency_s);
}

}  // namespace

std::vector<int> rank_nics(const SimNetworkSpec& spec, int rank) {
  MOEZERO_CHECK(spec.nics_per_node > 0, "rank_nics: the network has per-rank NICs");
  const auto [first, last] = nic_range(spec, rank);
  std::vector<int> out;
  for (int64_t nic = first; nic < last; ++nic) out.push_back(static_cast<int>(nic));
  return out;
}

Traffic nic_collective_traffic(const SimNetworkSpec& spec, const CollectiveShape& shape) {
  const Traffic per_rank = collective_traffic(spec.tiers, shape);
  if (spec.nics_per_node <= 0) return per_rank;
  if (shape.op == CollectiveOp::AllToAllV) return onto_rank_nics(spec, per_rank);
  if (!spans_nodes(spec, shape.ranks)) return per_rank;
  return spread_per_node(spec, shape, per_rank);
}

Traffic nic_tree_all_reduce_traffic(const SimNetworkSpec& spec, const CollectiveShape& shape) {
  const int n = static_cast<int>(shape.ranks.size());
  if (n <= 1) return Traffic{};
  const bool spans = spans_nodes(spec, shape.ranks);
  const CommEmulation& t = spec.tiers;
  const double step_s = (spans ? t.latency_us : t.intra_node_latency_us) * 1e-6;
  const double latency_s = step_s * 2.0 * std::ceil(std::log2(static_cast<double>(n)));
  const double s2 = 2.0 * shape.size_bytes;
  Traffic out;
  out.latency_s = latency_s;
  if (spans && spec.nics_per_node > 0) {
    for (const auto& [node, m] : members_by_node(spec, shape.ranks)) {
      const double chain = s2 * static_cast<double>(m.ranks.size() - 1);  // node's intra bytes
      for (Direction d : {Direction::Send, Direction::Recv}) add_node(out, m, d, s2, chain);
    }
    return out;
  }
  // net_model's per-rank NICs (or one node): every rank 2 S each way on the group's tier.
  const Tier tier = spans ? Tier::InterNode : Tier::IntraNode;
  for (int r : shape.ranks)
    for (Direction d : {Direction::Send, Direction::Recv})
      out.flows.push_back(Flow{r, tier, d, s2});
  return out;
}

}  // namespace moezero::comm
