// prefetch/policy_frequency.cpp — prefetch.policy=frequency: the candidates predicted at least
// prefetch.min_probability likely, most likely first, within prefetch.budget_bytes (the ranking
// walk of prefetch/ranked_walk.h: it stops at the first candidate that does not fit).
#include "prefetch/ranked_walk.h"

namespace moezero::prefetch {

namespace {

class FrequencyPolicy final : public PrefetchPolicy {
 public:
  std::string_view name() const override { return "frequency"; }
  std::vector<int> plan(const PlanInput& in, PlanNotes* notes) const override {
    return walk_ranked(in, RankedGate{}, notes);
  }
};

}  // namespace

std::unique_ptr<PrefetchPolicy> make_frequency_policy() {
  return std::make_unique<FrequencyPolicy>();
}

}  // namespace moezero::prefetch
