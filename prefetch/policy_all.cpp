// prefetch/policy_all.cpp — prefetch.policy=all: every candidate, in ascending id order,
// regardless of prefetch.budget_bytes and prefetch.min_probability: the leaf-module baseline of
// other ZeRO-3 runtimes.
#include "prefetch/prefetch_policy.h"

namespace moezero::prefetch {

namespace {

class AllPolicy final : public PrefetchPolicy {
 public:
  std::string_view name() const override { return "all"; }
  std::vector<int> plan(const PlanInput& in, PlanNotes*) const override {
    std::vector<int> plan;
    for (const Candidate& c : in.candidates) plan.push_back(c.id);  // ascending id
    return plan;
  }
};

}  // namespace

std::unique_ptr<PrefetchPolicy> make_all_policy() { return std::make_unique<AllPolicy>(); }

}  // namespace moezero::prefetch
