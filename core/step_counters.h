// core/step_counters.h — the one field list of a rank's summed counters of one training step:
// the scalar entries of a metrics line's "ranks[r]" (README, metrics file). train/ computes them
// (RankStepStats) and writes them; report/ reads them back (RankStepCounters) and sums them
// over steps. Both visit this list, so a counter is named in one place.
//
// MOEZERO_RANK_STEP_COUNTERS(X) calls X(name, unit, source) once per counter:
//   unit   Count: an integer (bytes or events); Ms: milliseconds, a double.
//   source Engine: the step's delta of the ZeroEngine counter of the same name
//          (EngineCounters, zero/zero_engine.h); Moe: the MoeStats field of the same name
//          (moe/moe_stats.h), already per step; Timing: the StepTiming field of the same
//          name (core/trace.h: comm_ms is the union of the rank's collective intervals,
//          exposed_comm_ms the part of it the compute stream waits through; exposed <= comm);
//          Link: the step's delta of the comm::LinkBytes field of the same name (comm/net_model.h:
//          the bytes this rank sent, by tier, over all its collectives, as the network model
//          routes their algorithms; comm::LocalWorld::link_bytes).
// Link counters (README "Metrics"): intra_node_bytes, bytes this rank sent to ranks of its own
// node (the fast tier); inter_node_bytes, bytes it sent to other nodes (the slow link). Nodes
// are comm_emulation.ranks_per_node ranks; with one tier (ranks_per_node = 0, every rank its own
// node) every byte is inter_node_bytes and intra_node_bytes is 0. Counted by the threads backend
// (World::run) whether or not the link is emulated; 0 on backends that do not count them (NCCL,
// MPI, simulated). A step's delta includes the previous step's statistics exchange.
// The allocator's peaks (peak_bytes by tag, peak_total_bytes) are not counters (they are
// maxima, not sums) and are handled beside this list; so is the ratio active_fraction
// (active_layer_experts / layer_expert_slots), written beside them.
// Expert prefetch counters (README "Prefetch"): prefetch_hits, gathers a plan made before
// routing that the layer needed; prefetch_misses and miss_bytes, needed gathers started after
// routing; exact_prefetches, backward's gathers from the known routing; wasted_bytes, expert
// gathers freed without ever being acquired (kept by the cache and used later: not waste);
// needed_expert_bytes, full bytes of every expert acquire.
// The gate of speculative gathers (docs/prefetch.md): speculation_gated, candidates the cost
// policy refused that `frequency` would have gathered before routing; idle_link_ms, time in
// the speculation windows (a MoE layer's plan to its router's output) with none of the rank's
// collectives in flight other than the speculative gathers themselves. The next step's free link
// time is agreed from every rank's idle_link_ms (prefetch/link_idle.h).
// hpZ counters (docs/zero.md, zero.hpz_partition_size): hpz_gathers, the all-gathers of groups'
// secondary shards inside their partition (re-gathers within the step that stay on the fast
// tier); hpz_gathered_bytes, the full bytes they filled (also in gathered_bytes).
// Pre-gating (prefetch.pregate, docs/prefetch.md; agreed): over the step's micro-batches and the
// MoE layers that had lookahead counts, pregate_predicted experts predicted, pregate_hits of
// them active, pregate_active experts active (recall = hits / active).
#pragma once

#include <cstddef>

#define MOEZERO_RANK_STEP_COUNTERS(X)      \
  X(gathered_bytes, Count, Engine)         \
  X(reduce_scattered_bytes, Count, Engine) \
  X(reduce_wire_bytes, Count, Engine)      \
  X(all_reduced_bytes, Count, Engine)      \
  X(a2a_bytes, Count, Moe)                 \
  X(intra_node_bytes, Count, Link)         \
  X(inter_node_bytes, Count, Link)         \
  X(gathered_dense_bytes, Count, Engine)   \
  X(gathered_expert_bytes, Count, Engine)  \
  X(gathered_wire_bytes, Count, Engine)    \
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
  X(speculation_gated, Count, Moe)         \
  X(hpz_gathers, Count, Engine)            \
  X(hpz_gathered_bytes, Count, Engine)     \
  X(pregate_predicted, Count, Moe)         \
  X(pregate_hits, Count, Moe)              \
  X(pregate_active, Count, Moe)            \
  X(stall_ms, Ms, Engine)                  \
  X(comm_ms, Ms, Timing)                   \
  X(exposed_comm_ms, Ms, Timing)           \
  X(idle_link_ms, Ms, Timing)

// MOEZERO_EXPERT_STEP_COUNTERS(X) calls X(name, type, combine, source) once per per-expert
// counter of an MoE layer: one step's vector of E values, an entry of a metrics line's
// "moe_layers[l]" (README, metrics file). train/ computes and writes them (MoeLayerStats,
// train/step_stats.h), report/ reads them back (LayerStepCounters) and sums them over steps
// (ExpertRow). Both visit this list, so a counter is named in one place.
//   type    the element type train/ keeps (report/ reads a double as double, others as int64_t).
//   combine Sum: each rank's own value, summed over ranks (and over steps by report/);
//           Agreed: a global value every rank knows alike, taken from rank 0 (report/ treats it
//           beside the sums: tokens comes from "tokens_per_expert", predicted is averaged).
//   source  Group: the step's delta of the GroupCounters field of the same name (the expert's
//           parameter group, zero/zero_engine.h); Moe: the MoeStats field of the same name,
//           already per step; Routing: MoeStats::tokens_per_expert; Plan: the frequency model's
//           P(active) used for the step's first plan (0 without a model).
// The prediction quality fields of a layer (brier_sum, brier_count, calibration_count,
// calibration_active) are not per-expert counters and are handled beside this list.
#define MOEZERO_EXPERT_STEP_COUNTERS(X)    \
  X(tokens, int64_t, Agreed, Routing)      \
  X(gathers, uint64_t, Sum, Group)         \
  X(gathered_bytes, uint64_t, Sum, Group)  \
  X(gather_ms, double, Sum, Group)         \
  X(cache_hits, uint64_t, Sum, Group)      \
  X(cache_misses, uint64_t, Sum, Group)    \
  X(prefetch_hits, uint64_t, Sum, Group)   \
  X(prefetch_misses, uint64_t, Sum, Group) \
  X(wasted_bytes, uint64_t, Sum, Group)    \
  X(a2a_tokens_in, int64_t, Sum, Moe)      \
  X(a2a_tokens_out, int64_t, Sum, Moe)     \
  X(predicted, double, Agreed, Plan)

namespace moezero {

#define MOEZERO_STEP_COUNTER_ONE(name, unit, source) +1
// The number of counters in MOEZERO_RANK_STEP_COUNTERS.
inline constexpr size_t kRankStepCounterCount =
    0 MOEZERO_RANK_STEP_COUNTERS(MOEZERO_STEP_COUNTER_ONE);
#undef MOEZERO_STEP_COUNTER_ONE

}  // namespace moezero
