// prefetch/prefetch_policy.h — which experts of a layer to gather ahead (forward), and in which
// order the needed experts are gathered in backward (DESIGN.md "Why it exists", point 2).
//
// Both are pure functions of (config, frequency model, agreed active sets, byte sizes): every
// rank of an expert's sharding group computes the same list and so issues the same all-gathers
// in the same order (the rule that keeps collectives matched). No randomness, no clocks, and
// every tie is broken by expert id.
//
// Policies (prefetch.policy):
//   none       nothing ahead; experts are gathered on demand after the router has run.
//   all        every candidate, in ascending id order, regardless of budget_bytes and
//              min_probability: the leaf-module baseline of other ZeRO-3 runtimes.
//   frequency  candidates whose predicted probability (FrequencyModel::predicted: the marginal,
//              or with the previous layer's active set the max of the shrunk conditionals) is
//              >= min_probability, most likely first (ties: lower expert id), taken while the
//              cumulative bytes stay <= budget_bytes. It STOPS at the first candidate that does
//              not fit (it does not skip it to try smaller ones): the plan is then a prefix of
//              one ranking, so a larger budget or a lower threshold only ever extends it
//              (monotone), and a likelier expert is never displaced by a less likely one.
//   cost       (the default) the frequency ranking and budget, but each candidate must also pay
//              for itself: with t(e) = gather_latency_ns + bytes(e) * link_ns_per_byte the link
//              time of e's all-gather (PrefetchCosts) and p = FrequencyModel::priced (the
//              prediction without the cold prior's weight, at most the marginal) times
//              plan_calibration (the realised precision of such confident guesses, so an
//              overconfident model speculates less), prefetching e saves, with probability p,
//              the stall of an on-demand gather after routing (t(e): nothing of the layer's
//              compute is left to hide it) and costs, with probability 1 - p, the link time of
//              bytes nobody uses, except the part that fits in the link's free time
//              (free_link_ns, consumed in ranking order):
//                prefetch e  iff  p * t(e) > (1 - p) * max(0, t(e) - free_left)
//              min_probability stays a floor. The walk stops at the first candidate rejected
//              (monotone, as frequency). With no link model (PrefetchCosts::known() false: no
//              bandwidth configured) it is frequency.
//              What a hit saves depends on prefetch.speculate (speculation_pays):
//                idle (default)  only the part of t(e) that fits in the free time left: the rest
//                                of a hit's bytes cross a busy link either way, so moving them
//                                before routing saves nothing. Hence
//                                  p * min(t, free_left) > (1 - p) * max(0, t - free_left)
//                                and with no free time nothing is speculated (the prediction is
//                                off where the link has no idle time to hide it in: issue 27).
//                priced          the whole on-demand gather (t(e)): with no free link time the
//                                rule is p > 1/2 (a link-bound step, every byte priced alike).
//              free_link_ns is the link's idle time per plan, measured in the previous step and
//              agreed at its boundary (agreed_free_link_ns, prefetch/link_idle.h), 0 before.
//              Every input is identical on all ranks of the group (the rule): the frequency
//              model, the byte sizes and PrefetchCosts (config, the group size and the agreed
//              free time; never one rank's own clock).

// Layers ahead (prefetch.lookahead_layers): plan_prefetch plans one layer against
// budget_bytes, which is a per-layer budget (config doc). Beyond the next layer the previous
// layer's routing is unknown: pass prev_layer_active = nullptr (marginals).
#pragma once

#include <cstdint>
#include <span>
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

// The experts of `layer` to gather ahead, in the order to issue the gathers.
// [in] cfg: policy, min_probability, budget_bytes (ema_decay/lookahead are not read here).
// [in] model: the frequency model (layer indexes its MoE layers).
// [in] layer: MoE layer index in [0, model.layers()).
// [in] candidate_experts: the experts this caller could gather (e.g. the EP rank's local experts),
//      distinct ids in [0, model.experts()), any order.
// [in] expert_bytes: parallel to candidate_experts: bytes of each candidate's gathered group.
// [in] prev_layer_active: optional (nullptr: none). The agreed active flags (model.experts()) of
//      MoE layer `layer - 1` in the current micro-batch; only valid for layer >= 1.
// [in] costs: the link model (policy cost only; default: unknown, the cost policy is frequency).
// [out] notes: optional (nullptr: none); reset, then filled (PlanNotes).
// [out] the chosen expert ids (a subset of candidate_experts).
// Throws moezero::Error on bad arguments (sizes, ranges, duplicates, prev flags for layer 0).
std::vector<int> plan_prefetch(const PrefetchConfig& cfg, const FrequencyModel& model, int layer,
                               std::span<const int> candidate_experts,
                               std::span<const uint64_t> expert_bytes,
                               const std::vector<char>* prev_layer_active,
                               const PrefetchCosts& costs = {}, PlanNotes* notes = nullptr);

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
