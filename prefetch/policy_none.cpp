// prefetch/policy_none.cpp — prefetch.policy=none: nothing ahead. Experts are gathered on demand
// after the router has run, and backward gathers them on demand too (no exact prefetch), so that
// `none` stays the on-demand baseline whose counters `moezero bench` compares (an exact prefetch
// is counted apart from a miss).
#include "prefetch/prefetch_policy.h"

namespace moezero::prefetch {

namespace {

class NonePolicy final : public PrefetchPolicy {
 public:
  std::string_view name() const override { return "none"; }
  bool plans_ahead() const override { return false; }
  bool exact_backward() const override { return false; }
  std::vector<int> plan(const PlanInput&, PlanNotes*) const override { return {}; }
};

}  // namespace

std::unique_ptr<PrefetchPolicy> make_none_policy() { return std::make_unique<NonePolicy>(); }

}  // namespace moezero::prefetch
