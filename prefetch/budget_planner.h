// prefetch/budget_planner.h — the budget planner of the shard cache's `value` policy
// (shard_cache.eviction=value; issue 27 part 2 item 5): which gathered expert groups to keep
// resident within shard_cache.capacity_bytes, which to free after use (re-gather), ranked by
// the link time of the re-gathers each one saves per byte of budget it occupies.
//
// Each stretch between two consecutive uses of a group is one keep decision: kept resident
// across it, the group saves the one gather its next use would issue; it occupies its bytes for
// the stretch's length. So, as in Belady's rule (keep what is needed soonest), the worth of
// keeping g is the gather it saves per byte, discounted by how far away its next use is:
//
//   keep_density(g) = sum over g's possible next uses u of
//                       P(u is g's next use) / (1 + phases from now until u)
//                     x link time of one gather of g (latency + wire bytes at the link rate)
//                     / bytes g occupies (its gathered, compute-dtype buffer)
//
// on the step's clock of phases (StepClock): each micro-batch is 2L phases, the forward of
// layers 0..L-1 then the backward of L-1..0. With p = FrequencyModel::probability (g active in
// one micro-batch):
//   backward pending (g was used in this micro-batch's forward, its backward is to come): one
//     use, certain, at its layer's backward;
//   otherwise its layer's forward in each micro-batch left (this one's too while that forward
//     has not passed), the k-th of them the next use with probability (1 - p)^k p.
// No use left before the optimizer update (the step's last micro-batch, past the group's
// backward or past its layer's forward without it): 0, and the entry is freed.
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
// the codec, the config's link, the step clock and the group's own acquire / gradient history
// in this micro-batch, the cache's logical clock); no timings, no addresses; powers are
// products (no libm), every tie is broken by recency then group id.
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

// Where the step is, in phases: micro-batch m's forward of layer l is phase m * 2L + l, its
// backward of layer l phase m * 2L + 2L - 1 - l.
struct StepClock {
  int layers = 1;             // L (>= 1): the model's layers
  int64_t micro_batches = 1;  // per optimizer step (>= 1)
  int64_t micro_batch = 0;    // the current one, in [0, micro_batches)
  int phase = 0;              // within the micro-batch, in [0, 2L)
  int64_t now() const { return micro_batch * 2 * layers + phase; }
  int64_t forward_at(int64_t mb, int layer) const { return mb * 2 * layers + layer; }
  int64_t backward_at(int64_t mb, int layer) const {
    return mb * 2 * layers + 2 * layers - 1 - layer;
  }
};

struct KeepInputs {
  double p = 1.0;  // probability of activation in one micro-batch, [0, 1]
  NextUse next = NextUse::Forward;
  bool forward_done = false;  // this micro-batch's forward of its layer has passed (or routed)
  int layer = 0;              // in [0, clock.layers)
  uint64_t bytes = 0;         // resident bytes (> 0)
  uint64_t wire_bytes = 0;    // bytes one gather of it moves (the codec's)
};

// P(used again before the step's optimizer update): 1 for a pending backward, else
// 1 - (1 - p)^(forwards of its layer left).
double reuse_probability(const KeepInputs& in, const StepClock& clock);
// Sum over next uses u of P(u is the next use) / (1 + phases until u): in [0, 1].
double soon_weight(const KeepInputs& in, const StepClock& clock);
// Link time (ns) of one gather moving `wire_bytes`: costs.gather_latency_ns + wire_bytes x
// costs.link_ns_per_byte; with no link model (!costs.known()) the wire bytes themselves.
double regather_ns(uint64_t wire_bytes, const PrefetchCosts& costs);
// The density above: soon_weight x regather_ns / bytes (>= 0, finite).
double keep_density(const KeepInputs& in, const StepClock& clock, const PrefetchCosts& costs);

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
