// prefetch/prefetch_policy.cpp — the checks of a plan's inputs and the dispatch to the configured
// policy (its own file: policy_*.cpp), the cost policy's link model, and the backward order.
#include "prefetch/prefetch_policy.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moezero::prefetch {

namespace {

// Sizes, ranges, distinctness of the candidates. Returns them in ascending id order.
std::vector<Candidate> checked_candidates(int experts, std::span<const int> ids,
                                          std::span<const uint64_t> bytes) {
  MOEZERO_CHECK(ids.size() == bytes.size(), "plan_prefetch: ", ids.size(), " candidates but ",
                bytes.size(), " byte sizes");
  std::vector<Candidate> out;
  out.reserve(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    MOEZERO_CHECK(ids[k] >= 0 && ids[k] < experts, "plan_prefetch: candidate expert ", ids[k],
                  " out of range [0, ", experts, ")");
    out.push_back({ids[k], bytes[k]});
  }
  std::sort(out.begin(), out.end(),
            [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  for (size_t k = 1; k < out.size(); ++k) {
    MOEZERO_CHECK(out[k].id != out[k - 1].id, "plan_prefetch: candidate expert ", out[k].id,
                  " listed twice");
  }
  return out;
}

}  // namespace

double speculative_gather_ns(uint64_t bytes, const PrefetchCosts& costs) {
  return costs.gather_latency_ns + double(bytes) * costs.link_ns_per_byte;
}

bool speculation_pays(double p, double gather_ns, double free_left_ns, Speculate speculate) {
  const double paid = std::max(0.0, gather_ns - free_left_ns);  // link time taken from others
  // Idle: a hit gains only the link time it moved into idle time (the rest of its bytes are on
  // a busy link either way). Priced: a hit saves its whole on-demand gather.
  const double saved =
      speculate == Speculate::Idle ? std::min(gather_ns, std::max(0.0, free_left_ns)) : gather_ns;
  return p * saved > (1.0 - p) * paid;
}

PrefetchCosts link_costs(double link_gbps, double latency_us, int group_size) {
  MOEZERO_CHECK(group_size >= 1 && link_gbps >= 0.0 && latency_us >= 0.0, "link_costs: group_size ",
                group_size, ", link_gbps ", link_gbps, ", latency_us ", latency_us);
  PrefetchCosts c;
  const double n = double(group_size);
  if (link_gbps > 0.0) c.link_ns_per_byte = 8.0 / link_gbps * (n - 1.0) / n;  // bits / (Gbit/s)
  c.gather_latency_ns = latency_us * 1e3 * (n - 1.0);
  return c;
}

PrefetchCosts link_costs(const PrefetchConfig& prefetch, const CommEmulationConfig& emulation,
                         int group_size) {
  const double gbps = prefetch.link_gbps > 0.0 ? prefetch.link_gbps : emulation.link_gbps;
  return link_costs(gbps, emulation.latency_us, group_size);
}

std::vector<int> plan_prefetch(const PrefetchConfig& cfg, const FrequencyModel& model, int layer,
                               std::span<const int> candidate_experts,
                               std::span<const uint64_t> expert_bytes,
                               const std::vector<char>* prev_layer_active,
                               const PrefetchCosts& costs, PlanNotes* notes,
                               std::span<const double> given_p) {
  MOEZERO_CHECK(layer >= 0 && layer < model.layers(), "plan_prefetch: layer ", layer,
                " out of range [0, ", model.layers(), ")");
  if (prev_layer_active != nullptr) {
    MOEZERO_CHECK(layer >= 1, "plan_prefetch: prev_layer_active given for layer 0");
    MOEZERO_CHECK(prev_layer_active->size() == size_t(model.experts()),
                  "plan_prefetch: "
                  "prev_layer_active has ",
                  prev_layer_active->size(), " flags, expected ", model.experts());
  }
  MOEZERO_CHECK(given_p.empty() || given_p.size() == size_t(model.experts()),
                "plan_prefetch: ", given_p.size(), " given probabilities for ", model.experts(),
                " experts");
  for (const double p : given_p)
    MOEZERO_CHECK(p >= 0.0 && p <= 1.0, "plan_prefetch: given probability ", p, " outside [0, 1]");
  const std::vector<Candidate> cands =
      checked_candidates(model.experts(), candidate_experts, expert_bytes);
  if (notes != nullptr) *notes = PlanNotes{};
  const PlanInput in{cfg, model, layer, cands, prev_layer_active, costs, given_p};
  return prefetch_policy(cfg.policy).plan(in, notes);
}

std::vector<int> backward_order(std::span<const int> candidate_experts,
                                std::span<const char> forward_active) {
  std::vector<int> sorted(candidate_experts.begin(), candidate_experts.end());
  std::sort(sorted.begin(), sorted.end());
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  MOEZERO_CHECK(dup == sorted.end(), "backward_order: candidate expert ",
                dup == sorted.end() ? -1 : *dup, " listed twice");
  std::vector<int> out;
  for (const int e : sorted) {
    MOEZERO_CHECK(e >= 0 && size_t(e) < forward_active.size(), "backward_order: expert ", e,
                  " out of range [0, ", forward_active.size(), ")");
    if (forward_active[size_t(e)]) out.push_back(e);
  }
  return out;
}

}  // namespace moezero::prefetch
