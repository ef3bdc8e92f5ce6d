// moe/moe_stats.h — the routing statistics of the MoE layers of one rank, accumulated over the
// micro-batches of a step (the trainer reads and clears them after each step). One field list,
// MOEZERO_MOE_STATS_FIELDS, declares the fields and drives add_layer() and clear(), so a field is
// named, sized and reset in one place (the house pattern of core/step_counters.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moezero::moe {

// MOEZERO_MOE_STATS_FIELDS(X) calls X(name, type, shape) once per field:
//   shape  Step:    one `type` per step, zeroed by clear().
//          Layer:   one `type` per MoE layer (add_layer makes room), zeroed by clear().
//          Last:    one `type` per MoE layer, the last value written; clear() keeps it.
//          Expert:  E values of `type` per MoE layer (add_layer sizes and zeroes them), zeroed
//                   by clear(): (layers, E).
//          Bucket:  MoeStats::kCalibrationBuckets values of `type` per MoE layer, zeroed by
//                   clear(): (layers, buckets).
//          Forward: one `type` per MoE forward, appended in forward order; emptied by clear().
// Agreed: the value is identical on every rank (from the agreed counts); else this rank's own.
//   tokens_per_expert     agreed tokens routed to each expert, after capacity drops, summed
//                         over the step's micro-batches
//   selected_per_expert   agreed top-k selections of each expert BEFORE capacity drops, summed
//                         over the step's micro-batches (dropped = selected - tokens)
//   expert_bias           the selection bias the step routed with (moe.expert_bias_update_rate
//                         > 0; agreed); empty when off: (E or 0) per layer
//   active_experts        agreed experts that were active (gathered and computed) in the last
//                         micro-batch
//   local_counts          profile.routing_trace, when record_local_counts: this rank's kept
//                         assignments per expert (E) of every MoE forward (micro-batch, then
//                         MoE layer)
//   a2a_bytes             this rank's all-to-all send bytes (tokens, both passes)
//   active_layer_experts  agreed experts active, over the step's micro-batches and MoE layers
//                         (all of a layer's experts, not only this rank's)
//   layer_expert_slots    experts that could have been (E per layer and micro-batch); the
//                         ratio of the two is the step's active_fraction
//   a2a_tokens_in, _out   forward dispatch only, summed over the step's micro-batches: token
//                         assignments for expert e this rank received from other EP ranks (in,
//                         on e's owner) and sent to another EP rank (out). Summed over all
//                         ranks, out[l][e] == in[l][e]. Zero when ep_size == 1.
//   brier_sum, _count     prediction quality, over the step's micro-batches whose experts a
//                         plan made before routing (agreed outcomes): for each expert e of such
//                         a micro-batch, p = the probability the plan used, y = 1 if e was
//                         active: sum of (p - y)^2 and the number of (expert, micro-batch) pairs
//   speculation_gated     expert candidates the cost policy's gate refused although
//                         `frequency` would have gathered them before routing (floor and
//                         budget met; prefetch/prefetch_policy.h), over the step's plans
//   pregate_predicted,    prefetch.pregate (agreed): over the step's micro-batches and MoE
//   pregate_hits,         layers that had lookahead counts, the experts predicted (count > 0),
//   pregate_active        those of them that were active, and the experts active
//   calibration_count,    per probability bucket (kCalibrationBuckets equal-width buckets of
//   calibration_active    [0, 1]): those pairs, and those of them that were active
#define MOEZERO_MOE_STATS_FIELDS(X)              \
  X(tokens_per_expert, int64_t, Expert)          \
  X(selected_per_expert, int64_t, Expert)        \
  X(expert_bias, std::vector<float>, Last)       \
  X(active_experts, int, Last)                   \
  X(local_counts, std::vector<int32_t>, Forward) \
  X(a2a_bytes, uint64_t, Step)                   \
  X(active_layer_experts, uint64_t, Step)        \
  X(layer_expert_slots, uint64_t, Step)          \
  X(speculation_gated, uint64_t, Step)           \
  X(pregate_predicted, uint64_t, Step)           \
  X(pregate_hits, uint64_t, Step)                \
  X(pregate_active, uint64_t, Step)              \
  X(a2a_tokens_in, int64_t, Expert)              \
  X(a2a_tokens_out, int64_t, Expert)             \
  X(brier_sum, double, Layer)                    \
  X(brier_count, int64_t, Layer)                 \
  X(calibration_count, int64_t, Bucket)          \
  X(calibration_active, int64_t, Bucket)

// Equal-width probability buckets of [0, 1] of the calibration fields.
inline constexpr size_t kMoeCalibrationBuckets = 10;

namespace moe_stats {

// The shapes of the field list: the C++ type of a field, how add_layer() makes room for a
// layer and how clear() resets it.
template <typename T>
struct Step {
  using Field = T;
  static void add_layer(Field&, size_t, size_t) {}
  static void clear(Field& f) { f = T{}; }
};
template <typename T>
struct Layer {
  using Field = std::vector<T>;
  static void add_layer(Field& f, size_t m, size_t) {
    if (f.size() <= m) f.resize(m + 1);
  }
  static void clear(Field& f) { std::fill(f.begin(), f.end(), T{}); }
};
template <typename T>
struct Last : Layer<T> {
  static void clear(typename Layer<T>::Field&) {}
};
template <typename T>
struct Expert {
  using Field = std::vector<std::vector<T>>;
  static void add_layer(Field& f, size_t m, size_t experts) {
    if (f.size() <= m) f.resize(m + 1);
    f[m].assign(experts, T{});
  }
  static void clear(Field& f) {
    for (auto& v : f) std::fill(v.begin(), v.end(), T{});
  }
};
template <typename T>
struct Bucket : Expert<T> {
  static void add_layer(typename Expert<T>::Field& f, size_t m, size_t) {
    if (f.size() <= m) f.resize(m + 1, std::vector<T>(kMoeCalibrationBuckets, T{}));
  }
};
template <typename T>
struct Forward {
  using Field = std::vector<T>;
  static void add_layer(Field&, size_t, size_t) {}
  static void clear(Field& f) { f.clear(); }
};

}  // namespace moe_stats

struct MoeStats {
  static constexpr size_t kCalibrationBuckets = kMoeCalibrationBuckets;

#define MOEZERO_MOE_STATS_DECLARE(name, type, shape) moe_stats::shape<type>::Field name{};
  MOEZERO_MOE_STATS_FIELDS(MOEZERO_MOE_STATS_DECLARE)
#undef MOEZERO_MOE_STATS_DECLARE

  // profile.routing_trace: whether every MoE forward appends to local_counts (a setting of the
  // run, not a statistic: clear() keeps it).
  bool record_local_counts = false;

  // Makes room for MoE layer `moe_index` with `experts` experts and zeroes its per-expert
  // fields; each MoE layer calls it once, when it is constructed.
  void add_layer(int moe_index, int64_t experts) {
    const size_t m = static_cast<size_t>(moe_index), E = static_cast<size_t>(experts);
#define MOEZERO_MOE_STATS_ADD_LAYER(name, type, shape) \
  moe_stats::shape<type>::add_layer(name, m, E);
    MOEZERO_MOE_STATS_FIELDS(MOEZERO_MOE_STATS_ADD_LAYER)
#undef MOEZERO_MOE_STATS_ADD_LAYER
  }
  // The start of a step: every field as its shape says.
  void clear() {
#define MOEZERO_MOE_STATS_CLEAR(name, type, shape) moe_stats::shape<type>::clear(name);
    MOEZERO_MOE_STATS_FIELDS(MOEZERO_MOE_STATS_CLEAR)
#undef MOEZERO_MOE_STATS_CLEAR
  }
};

}  // namespace moezero::moe
