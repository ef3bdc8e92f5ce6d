// prefetch/prefetch_policy.h — which experts of a layer to gather ahead (forward), and in which
// order the needed experts are gathered in backward (DESIGN.md "Why it exists", point 2).
//
// Both are pure functions of (config, frequency model, agreed active sets, byte sizes): every
// rank of an expert's sharding group computes the same list and so issues the same all-gathers
// in the same order (the rule that keeps collectives matched). No randomness, no clocks, and
// every tie is broken by expert id.
//
// Policies (prefetch.policy) are objects, one file each, registered by name in
// prefetch/policy_registry.cpp (which also gives the config its choices and doc lines):
//   none       (policy_none.cpp) nothing ahead, and no exact prefetch in backward either.
//   all        (policy_all.cpp) every candidate, in ascending id order.
//   frequency  (policy_frequency.cpp) the likeliest candidates within the floor and the budget
//              (prefetch/ranked_walk.h: stops at the first that does not fit; monotone).
//   cost       (policy_cost.cpp; the default) frequency's walk, each candidate gathered ahead only
//              when it pays for itself on the link (speculation_pays, prefetch.speculate).

// Layers ahead (prefetch.lookahead_layers): plan_prefetch plans one layer against
// budget_bytes, which is a per-layer budget (config doc). Beyond the next layer the previous
// layer's routing is unknown: pass prev_layer_active = nullptr (marginals).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "prefetch/frequency_model.h"

namespace moezero::prefetch {

// The link model of the cost policy. Identical on every rank of the gather group: derived from
// config and the group's size (link_costs), or from values agreed at a step boundary.
struct PrefetchCosts {
  double link_ns_per_byte = 0.0;   // ns of the rank's link per byte of a gathered group
  double gather_latency_ns = 0.0;  // fixed link time of one all-gather (latency steps)
  double free_link_ns = 0.0;       // link time per plan prefetches may take for free (0: bound)
  bool known() const { return link_ns_per_byte > 0.0 || gather_latency_ns > 0.0; }
};

// The link model of a ring all-gather over `group_size` ranks sharing one NIC each: every rank
// receives (n-1)/n of the group's bytes and pays n-1 latency steps.
// [in] link_gbps: Gbit/s (10^9 bit/s), 0: unknown. [in] latency_us: per step, microseconds.
PrefetchCosts link_costs(double link_gbps, double latency_us, int group_size);
// The cost policy's link from the config: prefetch.link_gbps, else comm_emulation.link_gbps
// (both 0: unknown), at comm_emulation.latency_us per step.
PrefetchCosts link_costs(const PrefetchConfig& prefetch, const CommEmulationConfig& emulation,
                         int group_size);

// What a plan reports besides its experts (the step's counters).
struct PlanNotes {
  uint64_t gated = 0;  // candidates frequency would take (floor, budget) that the cost gate refused
};

// The link time of one speculative gather of `bytes` (latency steps + bytes on the link).
double speculative_gather_ns(uint64_t bytes, const PrefetchCosts& costs);

// The cost policy's gate for one candidate: whether a gather of link time `gather_ns`, needed
// with probability `p`, pays for itself when `free_left_ns` of the link's idle time is left
// (prefetch.speculate: what a hit saves; see "cost" above). Pure.
bool speculation_pays(double p, double gather_ns, double free_left_ns, Speculate speculate);

// One candidate of a plan: an expert id and the bytes of its gathered group.
struct Candidate {
  int id = 0;
  uint64_t bytes = 0;
};

// What a policy plans from (plan_prefetch checks it first).
struct PlanInput {
  const PrefetchConfig& cfg;
  const FrequencyModel& model;
  int layer = 0;                            // MoE layer index in [0, model.layers())
  std::span<const Candidate> candidates;    // distinct, in range, ascending id
  const std::vector<char>* prev = nullptr;  // agreed active flags of layer - 1, or none
  const PrefetchCosts& costs;
  // Empty, or one probability per expert (model.experts()) that replaces the frequency model's
  // guess: prefetch.pregate's calibrated P(active | lookahead count) (prefetch/pregate.h). The
  // ranking orders by it and the cost policy prices it as it is (it is already calibrated).
  std::span<const double> given_p = {};
};

// A prefetch policy (prefetch.policy): its class in its own file, one line in the registry
// (prefetch/policy_registry.cpp). A plan is a pure function of its PlanInput (the rule that keeps
// collectives matched): no randomness, no clocks, every tie broken by expert id.
class PrefetchPolicy {
 public:
  virtual ~PrefetchPolicy() = default;
  virtual std::string_view name() const = 0;  // its config string
  // False: nothing is planned before routing (experts are gathered on demand).
  virtual bool plans_ahead() const { return true; }
  // Whether backward gathers the experts of the forward's active set ahead, in exact order.
  virtual bool exact_backward() const { return true; }
  // Whether its plans read PrefetchCosts::free_link_ns (the session then measures the link's
  // idle time before routing).
  virtual bool reads_free_link(const PrefetchConfig&, const PrefetchCosts&) const { return false; }
  // The experts to gather ahead, in issue order (a subset of in.candidates).
  // [out] notes: optional; reset by the caller, then added to.
  virtual std::vector<int> plan(const PlanInput& in, PlanNotes* notes) const = 0;
};

// The registered policy named `name` (prefetch/policy_registry.cpp). Throws a user error naming
// prefetch.policy and the registered names when there is none.
const PrefetchPolicy& prefetch_policy(std::string_view name);
// The registered names, in registry order.
std::vector<std::string> prefetch_policy_names();

// The experts of `layer` to gather ahead, in the order to issue the gathers.
// [in] cfg: policy (a registered name), min_probability, budget_bytes (ema_decay/lookahead are
//      not read here).
// [in] model: the frequency model (layer indexes its MoE layers).
// [in] layer: MoE layer index in [0, model.layers()).
// [in] candidate_experts: the experts this caller could gather (e.g. the EP rank's local experts),
//      distinct ids in [0, model.experts()), any order.
// [in] expert_bytes: parallel to candidate_experts: bytes of each candidate's gathered group.
// [in] prev_layer_active: optional (nullptr: none). The agreed active flags (model.experts()) of
//      MoE layer `layer - 1` in the current micro-batch; only valid for layer >= 1.
// [in] costs: the link model (policy cost only; default: unknown, the cost policy is frequency).
// [out] notes: optional (nullptr: none); reset, then filled (PlanNotes).
// [in] given_p: empty, or model.experts() probabilities in [0, 1] (PlanInput::given_p).
// [out] the chosen expert ids (a subset of candidate_experts).
// Throws moezero::Error on bad arguments (sizes, ranges, duplicates, prev flags for layer 0).
std::vector<int> plan_prefetch(const PrefetchConfig& cfg, const FrequencyModel& model, int layer,
                               std::span<const int> candidate_experts,
                               std::span<const uint64_t> expert_bytes,
                               const std::vector<char>* prev_layer_active,
                               const PrefetchCosts& costs = {}, PlanNotes* notes = nullptr,
                               std::span<const double> given_p = {});

// Backward is exact: the experts a layer needs are its forward's agreed active set. This is the
// single definition of the order they are gathered and run in backward: ascending expert id,
// the order MoeFeedForward runs them in forward and backward.
// [in] candidate_experts: the experts this caller owns (any order, distinct).
// [in] forward_active: the agreed active flags of the layer's forward (flags indexed by expert
//      id; every candidate id must be < its size).
// [out] the active candidates in ascending id.
std::vector<int> backward_order(std::span<const int> candidate_experts,
                                std::span<const char> forward_active);

}  // namespace moezero::prefetch
