// prefetch/budget_planner.h — the budget planner of the shard cache's `value` policy
// (shard_cache.eviction=value; issue 27 part 2 item 5): which gathered expert groups to keep
// resident within shard_cache.capacity_bytes, which to free after use (re-gather), ranked by
// the link time of the re-gathers each one saves per byte of budget it occupies.
//
// keep_density(g) = P(g used again before the step's optimizer update)
//                   x gathers its next use would otherwise issue
//                   x link time of one gather of g (latency + wire bytes at the link rate)
//                   / bytes g occupies (its gathered, compute-dtype buffer)
// where, with p = FrequencyModel::probability (the probability that g is active in one
// micro-batch) and k = the forward passes of g's layer left in the step (this micro-batch's, if
// its routing is not yet known, and each later micro-batch's):
//   backward pending (used in this micro-batch's forward, its backward still to come):
//     P = 1, 1 gather (the backward's);
//   otherwise: P = 1 - (1 - p)^k, and its next use is a forward: 2 gathers when the
//     backward would gather again too (zero.reshard_after_forward=true: the entry, once evicted,
//     is gathered in forward and again in backward), 1 when the forward keeps it acquired to its
//     backward (reshard_after_forward=false: held within zero.max_live_parameters).
// With quantised weights (zero.quantized_weights) the wire bytes are fewer than the resident
// bytes, so keeping saves less per byte; the per-gather latency makes small groups relatively
// more valuable. With no link model (no bandwidth, no latency) a gather costs its wire bytes:
// only ratios matter.
//
// Admission is knapsack-greedy: a newcomer of density 0 is refused (nothing would use it: it is
// freed, re-gathered if ever needed); one that fits in the free bytes is admitted; otherwise
// victims are taken from the evictable (unpinned) entries lowest density first (then least
// recently used, then lower group id: the same order as lfu's with the density as score) until
// it fits, and it is admitted only when the victims' total value (density x bytes: link time
// saved) is at most its own. A refused admission evicts nothing.
//
// Why identical on every rank: every input is agreed state (the frequency model, group sizes,
// the codec, the config's link, the step's micro-batch index and the group's own acquire /
// gradient history in it, the cache's logical clock); no timings, no addresses; (1 - p)^k is a
// product of k factors (no libm), every tie is broken by recency then group id.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "prefetch/prefetch_policy.h"

namespace moezero::prefetch {

// Where a resident group's next use can come from.
enum class NextUse : uint8_t {
  Backward,  // used in this micro-batch's forward, its backward still to come: certain
  Forward,   // a forward of a later micro-batch (or of this one, if its layer has not run yet)
};

// What a later forward use of an evicted group costs (gathers issued then).
enum class RegatherCost : uint8_t {
  ForwardOnly,         // the forward's gather (the backward reuses it: held)
  ForwardAndBackward,  // the forward's and the backward's (zero.reshard_after_forward=true)
};

struct KeepInputs {
  double p = 1.0;  // probability of activation in one micro-batch, [0, 1]
  NextUse next = NextUse::Forward;
  int64_t forwards_left = 0;  // forward passes of its layer left in the step (>= 0)
  RegatherCost forward_use = RegatherCost::ForwardAndBackward;  // NextUse::Forward's gathers
  uint64_t bytes = 0;                                           // resident bytes (> 0)
  uint64_t wire_bytes = 0;  // bytes one gather of it moves (the codec's)
};

// P(used again before the step's optimizer update): 1 for a pending backward, else
// 1 - (1 - p)^forwards_left (0 when none is left).
double reuse_probability(const KeepInputs& in);
// Link time (ns) of one gather moving `wire_bytes`: costs.gather_latency_ns + wire_bytes x
// costs.link_ns_per_byte; with no link model (!costs.known()) the wire bytes themselves.
double regather_ns(uint64_t wire_bytes, const PrefetchCosts& costs);
// The density above: ns of link time saved per resident byte (>= 0, finite).
double keep_density(const KeepInputs& in, const PrefetchCosts& costs);

// A resident (or offered) entry as admission sees it.
struct KeepEntry {
  int group = 0;
  uint64_t bytes = 0;
  double density = 0.0;   // keep_density
  uint64_t last_use = 0;  // the cache's logical clock at its latest admit or hit
};
// True when `a` is evicted before `b`: lower density, then older last_use, then lower group.
bool evicted_before(const KeepEntry& a, const KeepEntry& b);

struct KeepDecision {
  bool admit = false;
  std::vector<int> victims;  // evicted to make room, in eviction order (empty when refused)
};
// [in] newcomer: the offered group (its bytes at most the capacity). [in] evictable: the
// unpinned resident entries, any order. [in] free_bytes: capacity minus resident bytes.
// Pure: the same inputs give the same decision.
KeepDecision plan_admission(const KeepEntry& newcomer, std::span<const KeepEntry> evictable,
                            uint64_t free_bytes);

}  // namespace moezero::prefetch
