// prefetch/policy_cost.cpp — prefetch.policy=cost (the default): frequency's ranking and budget
// (prefetch/ranked_walk.h), but each candidate must also pay for itself. With t(e) =
// gather_latency_ns + bytes(e) * link_ns_per_byte the link time of e's all-gather
// (PrefetchCosts) and p = FrequencyModel::priced (the prediction without the cold prior's
// weight, at most the marginal) times plan_calibration (the realised precision of such confident
// guesses, so an overconfident model speculates less), prefetching e saves, with probability p,
// the stall of an on-demand gather after routing and costs, with probability 1 - p, the link
// time of bytes nobody uses, except the part that fits in the link's free time (free_link_ns,
// consumed in ranking order):
//   prefetch e  iff  p * saved(e) > (1 - p) * max(0, t(e) - free_left)
// with saved(e) as prefetch.speculate says (speculation_pays, prefetch/prefetch_policy.h):
//   idle (default)  only the part of t(e) that fits in the free time left: the rest of a hit's
//                   bytes cross a busy link either way, so moving them before routing saves
//                   nothing; with no free time nothing is speculated (issue 27).
//   priced          the whole on-demand gather t(e): with no free link time the rule is p > 1/2.
// min_probability stays a floor. The walk stops at the first candidate refused (monotone, as
// frequency); the ones frequency would have taken are counted (PlanNotes::gated). With no link
// model (PrefetchCosts::known() false: no bandwidth configured) it is frequency.
// free_link_ns is the link's idle time per plan, measured in the previous step and agreed at its
// boundary (agreed_free_link_ns, prefetch/link_idle.h), 0 before. Every input is identical on all
// ranks of the group: the frequency model, the byte sizes and PrefetchCosts (config, the group
// size and the agreed free time; never one rank's own clock).
#include <algorithm>

#include "prefetch/ranked_walk.h"

namespace moezero::prefetch {

namespace {

class CostPolicy final : public PrefetchPolicy {
 public:
  std::string_view name() const override { return "cost"; }
  bool reads_free_link(const PrefetchConfig& cfg, const PrefetchCosts& costs) const override {
    return costs.known() && cfg.speculate == Speculate::Idle;
  }
  std::vector<int> plan(const PlanInput& in, PlanNotes* notes) const override {
    if (!in.costs.known()) return walk_ranked(in, RankedGate{}, notes);  // no link model
    const double calibration = in.model.plan_calibration(in.layer);
    double free_left_ns = in.costs.free_link_ns;
    return walk_ranked(
        in,
        [&](const Ranked& r) {
          // FrequencyModel::priced (evidence only, at most the marginal), times the realised
          // precision of such confident guesses (plan_calibration; capped at 1).
          // A given probability (prefetch.pregate) is calibrated already: priced as it is.
          const double priced =
              in.model.evidence(in.layer, std::min(r.p, in.model.probability(in.layer, r.id)));
          const double p = in.given_p.empty() ? std::min(1.0, priced * calibration) : r.p;
          const double t = speculative_gather_ns(r.bytes, in.costs);
          if (!speculation_pays(p, t, free_left_ns, in.cfg.speculate)) return false;
          free_left_ns = std::max(0.0, free_left_ns - t);
          return true;
        },
        notes);
  }
};

}  // namespace

std::unique_ptr<PrefetchPolicy> make_cost_policy() { return std::make_unique<CostPolicy>(); }

}  // namespace moezero::prefetch
