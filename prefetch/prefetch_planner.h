// prefetch/prefetch_planner.h — the one place prefetch decisions are made (DESIGN.md
// "prefetch/"). A PrefetchPlanner answers three questions:
//   the dense recorded order: which groups of a gather channel come next (FetchOrder per
//       channel; the fetch coordinator reports every acquire and asks after each one);
//   the expert plan before routing: which local experts of a MoE layer to gather ahead
//       (plan_prefetch with prefetch.policy, the frequency model and the link costs);
//   backward's exact order: which experts a layer's backward needs, and in which order
//       (backward_order of its forward's agreed active set).
// The fetch coordinator (zero/fetch_coordinator.h) consults it for the first; the MoE layer
// passes it agreed routing and hands the answers to its ParamProvider as hints.
//
// Every answer is a pure function of state that is identical on every rank of the group that
// issues the resulting collectives (config, the frequency model, agreed active sets, group ids
// and byte sizes, the acquire sequence), so the gathers stay matched.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "prefetch/fetch_order.h"
#include "prefetch/frequency_model.h"
#include "prefetch/prefetch_policy.h"

namespace moezero::prefetch {

// What the expert plan of one MoE layer is made from.
struct ExpertPlanQuery {
  int layer = 0;                            // MoE layer index (the frequency model's)
  std::span<const int> candidates;          // expert ids this rank could gather
  std::span<const uint64_t> bytes;          // gathered bytes of each candidate
  const std::vector<char>* prev = nullptr;  // agreed active flags of layer - 1 (or none)
  std::span<const double> given_p;          // empty, or per expert (PlanInput::given_p)
};

class PrefetchPlanner {
 public:
  // [in] cfg: the prefetch section (an unregistered prefetch.policy throws, naming the key).
  // [in] model: the frequency model (null: a dense model, or
  // no routing-aware prefetch). [in] costs: the cost policy's link model. Not owned.
  PrefetchPlanner(PrefetchConfig cfg, const FrequencyModel* model, PrefetchCosts costs);
  PrefetchPlanner() : PrefetchPlanner(PrefetchConfig{}, nullptr, PrefetchCosts{}) {}

  // ---- the dense recorded order, per gather channel (a key identical on every rank of it)
  void dense_acquired(const std::string& channel, int group);
  // Calls `next` with the groups of each channel's recorded order after its last acquire, in
  // channel-key order (the same on every rank); channels not replaying are left out.
  void each_dense_ahead(const std::function<void(std::span<const int> next)>& next) const;
  void end_step();  // each channel's acquires of this step become its recorded order
  std::vector<std::pair<std::string, std::vector<int>>> dense_orders() const;
  void set_dense_orders(const std::vector<std::pair<std::string, std::vector<int>>>& orders);

  // ---- experts before routing
  // True when experts are planned ahead at all (a frequency model, prefetch.policy not none,
  // prefetch.lookahead_layers > 0).
  bool plans_experts() const;
  // The experts of q.layer to gather ahead, in issue order (empty unless plans_experts()).
  // [out] notes: optional; what the plan reports besides its experts (PlanNotes).
  std::vector<int> expert_plan(const ExpertPlanQuery& q, PlanNotes* notes = nullptr) const;
  // The link's idle time per plan that speculative gathers may take (PrefetchCosts::
  // free_link_ns), agreed at a step boundary (agreed_free_link_ns): the same on every rank.
  void set_free_link_ns(double ns);
  double free_link_ns() const { return costs_.free_link_ns; }
  // The link model (the cost policy's; also what the shard cache's value policy prices a
  // re-gather with, prefetch/budget_planner.h).
  const PrefetchCosts& costs() const { return costs_; }
  // True when the expert plans depend on free_link_ns (the cost policy with a link model and
  // prefetch.speculate=idle): the session then measures the link's idle time before routing.
  bool measures_idle_link() const;

  // ---- backward
  // True when backward gathers its experts ahead in exact order (PrefetchPolicy::
  // exact_backward): none turns it off too, so that `none` stays the on-demand baseline whose
  // counters `moezero bench` compares (an exact prefetch is counted apart from a miss).
  bool exact_backward() const;
  // The experts of `local` active in forward (`forward_active`), in backward's order.
  std::vector<int> backward_order(std::span<const int> local,
                                  std::span<const char> forward_active) const;

  const PrefetchConfig& config() const { return cfg_; }

 private:
  PrefetchConfig cfg_;
  const PrefetchPolicy* policy_;  // prefetch_policy(cfg_.policy): the registry's, immutable
  const FrequencyModel* model_;
  PrefetchCosts costs_;
  std::map<std::string, FetchOrder> orders_;  // keyed by channel: never by address
};

}  // namespace moezero::prefetch
