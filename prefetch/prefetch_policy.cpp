// prefetch/prefetch_policy.cpp — none / all / frequency plans and the backward order.
#include "prefetch/prefetch_policy.h"

#include <algorithm>

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

}  // namespace

std::vector<int> plan_prefetch(const PrefetchConfig& cfg, const FrequencyModel& model, int layer,
                               std::span<const int> candidate_experts,
                               std::span<const uint64_t> expert_bytes,
                               const std::vector<char>* prev_layer_active) {
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
  std::vector<int> plan;
  switch (cfg.policy) {
    case PrefetchPolicy::None: return plan;
    case PrefetchPolicy::All:
      for (const auto& c : cands) plan.push_back(c.first);
      return plan;
    case PrefetchPolicy::Frequency: break;
  }
  struct Ranked {
    double p;
    int id;
    uint64_t bytes;
  };
  std::vector<Ranked> ranked;
  for (const auto& c : cands) {
    const double p = model.predicted(layer, c.first, prev_layer_active);
    if (p >= cfg.min_probability) ranked.push_back({p, c.first, c.second});
  }
  // Strict weak order with no ties left: probability descending, then id ascending.
  std::sort(ranked.begin(), ranked.end(),
            [](const Ranked& a, const Ranked& b) { return a.p != b.p ? a.p > b.p : a.id < b.id; });
  uint64_t used_bytes = 0;
  for (const Ranked& r : ranked) {
    if (r.bytes > cfg.budget_bytes - used_bytes) break;  // stop, never skip (monotone)
    used_bytes += r.bytes;
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
