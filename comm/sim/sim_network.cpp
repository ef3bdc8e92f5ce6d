// comm/sim/sim_network.cpp — algorithm choice and per-port reservation timelines.
#include "comm/sim/sim_network.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"

namespace moezero::comm {

namespace {
constexpr size_t kMaxReservations = 1024;

double tier_rate(const CommEmulation& spec, Tier t) {
  return (t == Tier::IntraNode ? spec.intra_node_gbps : spec.link_gbps) * 1e9 / 8.0;
}
}  // namespace

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::Ring: return "ring";
    case Algorithm::Tree: return "tree";
    case Algorithm::Direct: return "direct";
  }
  return "?";
}

double uncontended_seconds(const CommEmulation& spec, const Traffic& traffic) {
  double slowest = 0.0;
  for (const Flow& f : traffic.flows) {
    const double rate = tier_rate(spec, f.tier);
    if (rate > 0.0) slowest = std::max(slowest, f.bytes / rate);
  }
  return slowest + traffic.latency_s;
}

Traffic choose_traffic(const SimNetworkSpec& spec, const CollectiveShape& shape, Algorithm* algo) {
  Traffic ring = nic_collective_traffic(spec, shape);
  Algorithm chosen = shape.op == CollectiveOp::AllToAllV ? Algorithm::Direct : Algorithm::Ring;
  if (shape.op == CollectiveOp::AllReduce && shape.ranks.size() > 2) {
    Traffic tree = nic_tree_all_reduce_traffic(spec, shape);
    if (uncontended_seconds(spec.tiers, tree) < uncontended_seconds(spec.tiers, ring)) {
      if (algo) *algo = Algorithm::Tree;
      return tree;
    }
  }
  if (algo) *algo = chosen;
  return ring;
}

double PortTimelines::port_bytes_per_s(const Flow& f) const {
  return tier_rate(spec_.tiers, f.tier);
}

bool PortTimelines::modelled(const Flow& f) const {
  if (modelled_.empty()) return true;
  const int per_node = f.tier == Tier::InterNode && spec_.nics_per_node > 0
                           ? spec_.nics_per_node
                           : std::max(1, spec_.tiers.ranks_per_node);
  const size_t node = static_cast<size_t>(f.rank / per_node);
  return node < modelled_.size() && modelled_[node];
}

double PortTimelines::place(Port& port, double start_s, double duration_s) {
  double t = std::max(start_s, port.floor_s);
  // The first reservation that could overlap [t, t + d): the one before t, then onwards.
  auto it = port.busy.upper_bound(t);
  if (it != port.busy.begin()) {
    auto prev = std::prev(it);
    if (prev->second > t) t = prev->second;
  }
  while (it != port.busy.end() && it->first < t + duration_s) {
    t = std::max(t, it->second);
    ++it;
  }
  const double end = t + duration_s;
  // Merge with touching neighbours so that back-to-back traffic keeps one entry.
  auto next = port.busy.lower_bound(t);
  double new_start = t, new_end = end;
  if (next != port.busy.begin()) {
    auto prev = std::prev(next);
    if (prev->second >= t) {
      new_start = prev->first;
      port.busy.erase(prev);
    }
  }
  next = port.busy.lower_bound(new_start);
  if (next != port.busy.end() && next->first <= end) {
    new_end = std::max(new_end, next->second);
    port.busy.erase(next);
  }
  port.busy[new_start] = new_end;
  if (port.busy.size() > kMaxReservations) {
    auto cut = port.busy.begin();
    std::advance(cut, kMaxReservations / 2);
    port.floor_s = std::max(port.floor_s, std::prev(cut)->second);
    port.busy.erase(port.busy.begin(), cut);
  }
  return end;
}

Traffic PortTimelines::modelled_part(const Traffic& traffic) const {
  Traffic out;
  out.latency_s = traffic.latency_s;
  for (const Flow& f : traffic.flows)
    if (port_bytes_per_s(f) > 0.0 && f.bytes > 0.0 && modelled(f)) out.flows.push_back(f);
  return out;
}

double PortTimelines::reserve(const Traffic& traffic, double start_s) {
  std::lock_guard lock(mu_);
  double last = start_s;
  for (const Flow& f : traffic.flows) {
    const double rate = port_bytes_per_s(f);
    if (rate <= 0.0 || f.bytes <= 0.0 || !modelled(f)) continue;
    Port& port =
        ports_[int64_t{f.rank} * 4 + static_cast<int>(f.tier) * 2 + static_cast<int>(f.dir)];
    last = std::max(last, place(port, start_s, f.bytes / rate));
  }
  return last + traffic.latency_s;
}

}  // namespace moezero::comm
