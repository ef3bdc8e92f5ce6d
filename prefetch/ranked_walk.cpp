// prefetch/ranked_walk.cpp — the frequency ranking and its budget walk (prefetch/ranked_walk.h).
#include "prefetch/ranked_walk.h"

#include <algorithm>

namespace moezero::prefetch {

std::vector<Ranked> rank_candidates(const PlanInput& in) {
  std::vector<Ranked> ranked;
  for (const Candidate& c : in.candidates) {
    const double p = in.given_p.empty() ? in.model.predicted(in.layer, c.id, in.prev)
                                        : in.given_p[static_cast<size_t>(c.id)];
    if (p >= in.cfg.min_probability) ranked.push_back({p, c.id, c.bytes});
  }
  // Strict weak order with no ties left: probability descending, then id ascending.
  std::sort(ranked.begin(), ranked.end(),
            [](const Ranked& a, const Ranked& b) { return a.p != b.p ? a.p > b.p : a.id < b.id; });
  return ranked;
}

std::vector<int> walk_ranked(const PlanInput& in, const RankedGate& gate, PlanNotes* notes) {
  std::vector<int> plan;
  uint64_t used_bytes = 0;
  bool gated = false;  // the gate stopped the walk: the rest only counts (notes->gated)
  for (const Ranked& r : rank_candidates(in)) {
    if (r.bytes > in.cfg.budget_bytes - used_bytes) break;  // stop, never skip (monotone)
    if (gate && !gated) gated = !gate(r);
    used_bytes += r.bytes;
    if (gated) {
      if (notes != nullptr) ++notes->gated;
      continue;
    }
    plan.push_back(r.id);
  }
  return plan;
}

}  // namespace moezero::prefetch
