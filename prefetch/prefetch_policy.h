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
//
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

// The experts of `layer` to gather ahead, in the order to issue the gathers.
// [in] cfg: policy, min_probability, budget_bytes (ema_decay/lookahead are not read here).
// [in] model: the frequency model (layer indexes its MoE layers).
// [in] layer: MoE layer index in [0, model.layers()).
// [in] candidate_experts: the experts this caller could gather (e.g. the EP rank's local experts),
//      distinct ids in [0, model.experts()), any order.
// [in] expert_bytes: parallel to candidate_experts: bytes of each candidate's gathered group.
// [in] prev_layer_active: optional (nullptr: none). The agreed active flags (model.experts()) of
//      MoE layer `layer - 1` in the current micro-batch; only valid for layer >= 1.
// [out] the chosen expert ids (a subset of candidate_experts).
// Throws moezero::Error on bad arguments (sizes, ranges, duplicates, prev flags for layer 0).
std::vector<int> plan_prefetch(const PrefetchConfig& cfg, const FrequencyModel& model, int layer,
                               std::span<const int> candidate_experts,
                               std::span<const uint64_t> expert_bytes,
                               const std::vector<char>* prev_layer_active);

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
