// prefetch/prefetch_policy.cpp — none / all / frequency / cost plans and the backward order.
#include "prefetch/prefetch_policy.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moezero::prefetch {

namespace {

// Sizes, ranges, distinctness of the candidates. Returns them in ascending id order with their
// bytes, as (id, bytes) pairs.
std::vector<std::pair<int, uint64_t>> checked_candidates(int experts, std::span<const int> ids,
                                                         std::span<const uint64_t> bytes) {
  MOEZERO_CHECK(ids.size() == bytes.size(), "plan_prefetch: ", ids.size(), " candidates but ",
                bytes.size(), " byte sizes");
  std::vector<std::pair<int, uint64_t>> out;
  out.reserve(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    MOEZERO_CHECK(ids[k] >= 0 && ids[k] < experts, "plan_prefetch: candidate expert ", ids[k],
                  " out of range [0, ", experts, ")");
    out.emplace_back(ids[k], bytes[k]);
  }
  std::sort(out.begin(), out.end());
  for (size_t k = 1; k < out.size(); ++k) {
    MOEZERO_CHECK(out[k].first != out[k - 1].first, "plan_prefetch: candidate expert ",
                  out[k].first, " listed twice");
  }
  return out;
}

struct Ranked {
  double p;
  int id;
  uint64_t bytes;
};

// Whether the cost policy takes `r` (p: its evidence-only probability), given the link's free
// time left (consumed when taken). See prefetch_policy.h ("cost", prefetch.speculate).
bool pays_for_itself(const Ranked& r, double p, Speculate speculate, const PrefetchCosts& costs,
                     double& free_left_ns) {
  const double t = speculative_gather_ns(r.bytes, costs);
  if (!speculation_pays(p, t, free_left_ns, speculate)) return false;
  free_left_ns = std::max(0.0, free_left_ns - t);
  return true;
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

std::vector<int> plan_prefetch(const PrefetchConfig& cfg, const FrequencyModel& model, int layer,
                               std::span<const int> candidate_experts,
                               std::span<const uint64_t> expert_bytes,
                               const std::vector<char>* prev_layer_active,
                               const PrefetchCosts& costs, PlanNotes* notes) {
  MOEZERO_CHECK(layer >= 0 && layer < model.layers(), "plan_prefetch: layer ", layer,
                " out of range [0, ", model.layers(), ")");
  if (prev_layer_active != nullptr) {
    MOEZERO_CHECK(layer >= 1, "plan_prefetch: prev_layer_active given for layer 0");
    MOEZERO_CHECK(prev_layer_active->size() == size_t(model.experts()),
                  "plan_prefetch: "
                  "prev_layer_active has ",
                  prev_layer_active->size(), " flags, expected ", model.experts());
  }
  const auto cands = checked_candidates(model.experts(), candidate_experts, expert_bytes);
  if (notes != nullptr) *notes = PlanNotes{};
  std::vector<int> plan;
  switch (cfg.policy) {
    case PrefetchPolicy::None: return plan;
    case PrefetchPolicy::All:
      for (const auto& c : cands) plan.push_back(c.first);
      return plan;
    case PrefetchPolicy::Frequency:
    case PrefetchPolicy::Cost: break;
  }
  std::vector<Ranked> ranked;
  for (const auto& c : cands) {
    const double p = model.predicted(layer, c.first, prev_layer_active);
    if (p >= cfg.min_probability) ranked.push_back({p, c.first, c.second});
  }
  // Strict weak order with no ties left: probability descending, then id ascending.
  std::sort(ranked.begin(), ranked.end(),
            [](const Ranked& a, const Ranked& b) { return a.p != b.p ? a.p > b.p : a.id < b.id; });
  const bool costed = cfg.policy == PrefetchPolicy::Cost && costs.known();
  const double calibration = costed ? model.plan_calibration(layer) : 1.0;
  double free_left_ns = costs.free_link_ns;
  uint64_t used_bytes = 0;
  bool gated = false;  // the cost gate stopped the walk: the rest only counts (notes->gated)
  for (const Ranked& r : ranked) {
    if (r.bytes > cfg.budget_bytes - used_bytes) break;  // stop, never skip (monotone)
    // FrequencyModel::priced (evidence only, at most the marginal), times the realised
    // precision of such confident guesses (plan_calibration; capped at 1).
    if (costed && !gated) {
      const double priced = model.evidence(layer, std::min(r.p, model.probability(layer, r.id)));
      const double p = std::min(1.0, priced * calibration);
      gated = !pays_for_itself(r, p, cfg.speculate, costs, free_left_ns);
    }
    used_bytes += r.bytes;
    if (gated) {
      if (notes != nullptr) ++notes->gated;  // frequency would have taken it
      continue;
    }
    plan.push_back(r.id);
  }
  return plan;
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
