// tools/plan_choice.cpp — the recommendation of `moezero plan`, with ties (plan_choice.h).
#include "tools/plan_choice.h"

#include <algorithm>

namespace moezero::cli {

double step_jitter(const std::vector<double>& step_ms) {
  if (step_ms.size() < 2) return 0.0;
  const auto [lo, hi] = std::minmax_element(step_ms.begin(), step_ms.end());
  return *lo > 0.0 ? *hi / *lo - 1.0 : 0.0;
}

PlanMemory plan_memory(uint64_t gpu_bytes, uint64_t memory_limit) {
  if (memory_limit > 0 && memory_limit < gpu_bytes) return {memory_limit, true};
  return {gpu_bytes, false};
}

std::optional<PlanChoice> choose_plan(const std::vector<PlanCandidate>& candidates) {
  const PlanCandidate* fastest = nullptr;
  for (const PlanCandidate& c : candidates)
    if (c.fits && (!fastest || c.step_ms < fastest->step_ms)) fastest = &c;
  if (!fastest) return std::nullopt;
  std::vector<const PlanCandidate*> tied;
  for (const PlanCandidate& c : candidates) {
    const double tolerance = std::max(fastest->jitter, c.jitter);
    if (c.fits && c.step_ms <= fastest->step_ms * (1.0 + tolerance)) tied.push_back(&c);
  }
  std::stable_sort(tied.begin(), tied.end(), [](const PlanCandidate* a, const PlanCandidate* b) {
    return a->step_ms < b->step_ms;
  });
  const PlanCandidate* best = tied.front();
  for (const PlanCandidate* c : tied)
    if (c->peak_bytes < best->peak_bytes) best = c;
  PlanChoice out{fastest->name, best->name, {}};
  for (const PlanCandidate* c : tied) out.tied.push_back(c->name);
  return out;
}

}  // namespace moezero::cli
