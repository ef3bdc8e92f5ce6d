// prefetch/ranked_walk.h — the ranking walk that the frequency and cost policies share
// (prefetch/policy_frequency.cpp, prefetch/policy_cost.cpp).
//
// rank_candidates keeps the candidates whose predicted probability (FrequencyModel::predicted:
// the marginal, or with the previous layer's active set the max of the shrunk conditionals) is
// >= prefetch.min_probability, most likely first (ties: lower expert id). walk_ranked takes them
// in that order while the cumulative bytes stay <= prefetch.budget_bytes, and STOPS at the first
// candidate that does not fit (it does not skip it to try smaller ones): a plan is then a prefix
// of one ranking, so a larger budget or a lower threshold only ever extends it (monotone), and a
// likelier expert is never displaced by a less likely one.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "prefetch/prefetch_policy.h"

namespace moezero::prefetch {

struct Ranked {
  double p;  // FrequencyModel::predicted
  int id;
  uint64_t bytes;
};

// The candidates of `in` at or above the floor, in ranking order (a strict order: no ties left).
std::vector<Ranked> rank_candidates(const PlanInput& in);

// A policy's own test of one ranked candidate within the budget (true: it is taken).
using RankedGate = std::function<bool(const Ranked&)>;

// The walk over rank_candidates(in) within the budget. [in] gate: asked for each candidate in
// turn until it first refuses one; that one and the rest within the budget are then counted in
// notes->gated (frequency would have taken them) instead of planned. Empty: every one is taken.
// [out] notes: optional.
std::vector<int> walk_ranked(const PlanInput& in, const RankedGate& gate, PlanNotes* notes);

}  // namespace moezero::prefetch
