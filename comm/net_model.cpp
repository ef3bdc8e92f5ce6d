// comm/net_model.cpp — bytes per port of each collective, and processor-shared ports.
#include "comm/net_model.h"

#include <algorithm>
#include <array>

#include "core/error.h"

namespace moezero::comm {

namespace {

// Flows with fewer bytes left than this count as done (floating-point residue of sharing).
constexpr double kResidueBytes = 1e-6;

double tier_latency_s(const CommEmulation& spec, Tier t) {
  return (t == Tier::IntraNode ? spec.intra_node_latency_us : spec.latency_us) * 1e-6;
}

// Sums flows per (rank, tier, direction) so that one collective holds one flow per port.
class FlowSum {
 public:
  void add(int rank, Tier t, Direction d, double bytes) {
    sums_[{rank, static_cast<int>(t) * 2 + static_cast<int>(d)}] += bytes;
    used_[static_cast<size_t>(t)] = true;
  }
  void mark_used(Tier t) { used_[static_cast<size_t>(t)] = true; }
  Traffic traffic(const CommEmulation& spec, int steps) const {
    Traffic out;
    for (const auto& [key, bytes] : sums_)
      out.flows.push_back(Flow{key.first, static_cast<Tier>(key.second / 2),
                               static_cast<Direction>(key.second % 2), bytes});
    double step_s = 0.0;
    for (Tier t : {Tier::IntraNode, Tier::InterNode})
      if (used_[static_cast<size_t>(t)]) step_s = std::max(step_s, tier_latency_s(spec, t));
    out.latency_s = step_s * steps;
    return out;
  }

 private:
  std::map<std::pair<int, int>, double> sums_;
  std::array<bool, 2> used_{false, false};
};

// Each hop of the chain ranks[order[0]] -> ranks[order[1]] -> ... carries `bytes`.
void add_hops(const CommEmulation& spec, const std::vector<int>& ranks,
              const std::vector<int>& order, double bytes, FlowSum& sum) {
  for (size_t k = 0; k + 1 < order.size(); ++k) {
    const int a = ranks[static_cast<size_t>(order[k])];
    const int b = ranks[static_cast<size_t>(order[k + 1])];
    const Tier t = tier_between(spec, a, b);
    sum.add(a, t, Direction::Send, bytes);
    sum.add(b, t, Direction::Recv, bytes);
  }
}

Traffic all_to_all_traffic(const CommEmulation& spec, const CollectiveShape& shape) {
  const size_t n = shape.ranks.size();
  MOEZERO_CHECK(shape.a2a_bytes.size() == n, "all_to_all_v shape: ", shape.a2a_bytes.size(),
                " rows for ", n, " ranks");
  FlowSum sum;
  for (size_t r = 0; r < n; ++r) {
    MOEZERO_CHECK(shape.a2a_bytes[r].size() == n, "all_to_all_v shape: row ", r, " has ",
                  shape.a2a_bytes[r].size(), " entries for ", n, " ranks");
    for (size_t p = 0; p < n; ++p) {
      if (p == r) continue;
      const Tier t = tier_between(spec, shape.ranks[r], shape.ranks[p]);
      sum.mark_used(t);
      const double bytes = shape.a2a_bytes[r][p];
      if (bytes <= 0.0) continue;
      sum.add(shape.ranks[r], t, Direction::Send, bytes);
      sum.add(shape.ranks[p], t, Direction::Recv, bytes);
    }
  }
  return sum.traffic(spec, 1);
}

}  // namespace

Tier tier_between(const CommEmulation& spec, int a, int b) {
  if (spec.ranks_per_node > 0 && a / spec.ranks_per_node == b / spec.ranks_per_node)
    return Tier::IntraNode;
  return Tier::InterNode;
}

Traffic collective_traffic(const CommEmulation& spec, const CollectiveShape& shape) {
  const int n = static_cast<int>(shape.ranks.size());
  MOEZERO_CHECK(n >= 1, "collective_traffic: empty group");
  if (n == 1) return Traffic{};
  if (shape.op == CollectiveOp::AllToAllV) return all_to_all_traffic(spec, shape);
  std::vector<int> ring(static_cast<size_t>(n) + 1);
  for (int k = 0; k <= n; ++k) ring[static_cast<size_t>(k)] = k % n;
  FlowSum sum;
  switch (shape.op) {
    case CollectiveOp::AllGather:
    case CollectiveOp::ReduceScatter:
      add_hops(spec, shape.ranks, ring, shape.size_bytes * bus_factor(shape.op, n), sum);
      return sum.traffic(spec, n - 1);
    case CollectiveOp::AllReduce:
      add_hops(spec, shape.ranks, ring, shape.size_bytes * bus_factor(shape.op, n), sum);
      return sum.traffic(spec, 2 * (n - 1));
    case CollectiveOp::Broadcast: {
      std::vector<int> chain(static_cast<size_t>(n));
      for (int k = 0; k < n; ++k) chain[static_cast<size_t>(k)] = (shape.root + k) % n;
      add_hops(spec, shape.ranks, chain, shape.size_bytes, sum);
      return sum.traffic(spec, n - 1);
    }
    case CollectiveOp::Barrier:
      add_hops(spec, shape.ranks, ring, 0.0, sum);
      return sum.traffic(spec, 1);
    case CollectiveOp::AllToAllV: break;
  }
  return Traffic{};
}

int NetworkModel::port_index(const Flow& f) const {
  return f.rank * 4 + static_cast<int>(f.tier) * 2 + static_cast<int>(f.dir);
}

double NetworkModel::port_bytes_per_s(int port) const {
  const Tier t = static_cast<Tier>((port % 4) / 2);
  const double gbps = t == Tier::IntraNode ? spec_.intra_node_gbps : spec_.link_gbps;
  return gbps * 1e9 / 8.0;
}

NetworkModel::Id NetworkModel::start(double now_s, const Traffic& traffic) {
  advance_to(now_s);
  const Id id = next_id_++;
  Collective& c = collectives_[id];
  c.start_s = now_s_;
  c.latency_s = traffic.latency_s;
  c.last_flow_end_s = now_s_;
  for (const Flow& f : traffic.flows) {
    const int port = port_index(f);
    if (f.bytes <= kResidueBytes || port_bytes_per_s(port) <= 0.0) continue;  // free: done now
    flows_.push_back(ActiveFlow{id, port, f.bytes});
    ++c.open_flows;
  }
  return id;
}

std::vector<double> NetworkModel::rates() const {
  std::map<int, int> sharers;
  for (const ActiveFlow& f : flows_) ++sharers[f.port];
  std::vector<double> out;
  out.reserve(flows_.size());
  for (const ActiveFlow& f : flows_) out.push_back(port_bytes_per_s(f.port) / sharers[f.port]);
  return out;
}

double NetworkModel::next_flow_completion() const {
  if (flows_.empty()) return kNever;
  const std::vector<double> rate = rates();
  double dt = kNever;
  for (size_t i = 0; i < flows_.size(); ++i) dt = std::min(dt, flows_[i].remaining_bytes / rate[i]);
  return now_s_ + dt;
}

bool NetworkModel::step(double until_s) {
  const std::vector<double> rate = rates();
  size_t first = 0;  // the flow that completes first
  double first_dt = kNever;
  for (size_t i = 0; i < flows_.size(); ++i) {
    const double dt = flows_[i].remaining_bytes / rate[i];
    if (dt < first_dt) first_dt = dt, first = i;
  }
  const bool completes = now_s_ + first_dt <= until_s;
  const double dt = completes ? first_dt : std::max(0.0, until_s - now_s_);
  for (size_t i = 0; i < flows_.size(); ++i) flows_[i].remaining_bytes -= rate[i] * dt;
  now_s_ += dt;
  if (!completes) return false;
  // The first flow is done; so is any other within the residue of it.
  flows_[first].remaining_bytes = 0.0;
  auto done = [&](const ActiveFlow& f) { return f.remaining_bytes <= kResidueBytes; };
  for (const ActiveFlow& f : flows_) {
    if (!done(f)) continue;
    Collective& c = collectives_.at(f.owner);
    --c.open_flows;
    c.last_flow_end_s = now_s_;
  }
  flows_.erase(std::remove_if(flows_.begin(), flows_.end(), done), flows_.end());
  return true;
}

void NetworkModel::advance_to(double now_s) {
  while (!flows_.empty() && step(now_s)) {
  }
  now_s_ = std::max(now_s_, now_s);
}

bool NetworkModel::finished(Id id) const { return collectives_.at(id).open_flows == 0; }

double NetworkModel::completion_s(Id id) const {
  const Collective& c = collectives_.at(id);
  MOEZERO_CHECK(c.open_flows == 0, "NetworkModel: collective ", id, " has not finished");
  return c.last_flow_end_s + c.latency_s;
}

double NetworkModel::projected_completion_s(Id id) const {
  if (finished(id)) return completion_s(id);
  NetworkModel ahead = *this;
  while (!ahead.finished(id)) ahead.step(kNever);
  return ahead.completion_s(id);
}

double NetworkModel::start_s(Id id) const { return collectives_.at(id).start_s; }

void NetworkModel::release(Id id) {
  auto it = collectives_.find(id);
  MOEZERO_CHECK(it != collectives_.end() && it->second.open_flows == 0,
                "NetworkModel: release of unknown or unfinished collective ", id);
  collectives_.erase(it);
}

}  // namespace moezero::comm
