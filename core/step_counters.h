// core/step_counters.h — the one field list of a rank's summed counters of one training step:
// the scalar entries of a metrics line's "ranks[r]" (README, metrics file). train/ computes them
// (RankStepStats) and writes them; report/ reads them back (RankStepCounters) and sums them
// over steps. Both visit this list, so a counter is named in one place.
//
// MOEZERO_RANK_STEP_COUNTERS(X) calls X(name, unit, source) once per counter:
//   unit   Count: an integer (bytes or events); Ms: milliseconds, a double.
//   source Engine: the step's delta of the ZeroEngine counter of the same name
//          (EngineCounters, zero/zero_engine.h); Moe: the MoeStats field of the same name
//          (moe/moe_runtime.h), already per step; Timing: the StepTiming field of the same
//          name (core/trace.h: comm_ms is the union of the rank's collective intervals,
//          exposed_comm_ms the part of it the compute stream waits through; exposed <= comm).
// The allocator's peaks (peak_bytes by tag, peak_total_bytes) are not counters (they are
// maxima, not sums) and are handled beside this list; so is the ratio active_fraction
// (active_layer_experts / layer_expert_slots), written beside them.
// Expert prefetch counters (README "Prefetch"): prefetch_hits, gathers a plan made before
// routing that the layer needed; prefetch_misses and miss_bytes, needed gathers started after
// routing; exact_prefetches, backward's gathers from the known routing; wasted_bytes, expert
// gathers freed without ever being acquired (kept by the cache and used later: not waste);
// needed_expert_bytes, full bytes of every expert acquire.
#pragma once

#include <cstddef>

#define MOEZERO_RANK_STEP_COUNTERS(X)      \
  X(gathered_bytes, Count, Engine)         \
  X(reduce_scattered_bytes, Count, Engine) \
  X(all_reduced_bytes, Count, Engine)      \
  X(a2a_bytes, Count, Moe)                 \
  X(gathered_dense_bytes, Count, Engine)   \
  X(gathered_expert_bytes, Count, Engine)  \
  X(prefetch_hits, Count, Engine)          \
  X(prefetch_misses, Count, Engine)        \
  X(miss_bytes, Count, Engine)             \
  X(exact_prefetches, Count, Engine)       \
  X(wasted_bytes, Count, Engine)           \
  X(needed_expert_bytes, Count, Engine)    \
  X(active_layer_experts, Count, Moe)      \
  X(layer_expert_slots, Count, Moe)        \
  X(cache_hits, Count, Engine)             \
  X(cache_misses, Count, Engine)           \
  X(cache_evictions, Count, Engine)        \
  X(stall_ms, Ms, Engine)                  \
  X(comm_ms, Ms, Timing)                   \
  X(exposed_comm_ms, Ms, Timing)

namespace moezero {

#define MOEZERO_STEP_COUNTER_ONE(name, unit, source) +1
// The number of counters in MOEZERO_RANK_STEP_COUNTERS.
inline constexpr size_t kRankStepCounterCount =
    0 MOEZERO_RANK_STEP_COUNTERS(MOEZERO_STEP_COUNTER_ONE);
#undef MOEZERO_STEP_COUNTER_ONE

}  // namespace moezero
