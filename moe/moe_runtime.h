// moe/moe_runtime.h — what a MoE layer needs from the run it is part of: its place in the
// expert-parallel layout, the communicators it uses, and where it reports routing statistics.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "core/communicator.h"
#include "core/config.h"
#include "prefetch/frequency_model.h"
#include "prefetch/prefetch_planner.h"

namespace moezero {
class TraceRecorder;
}

namespace moezero::moe {

class RoutingReplay;
class RoutingSource;

// Routing statistics of the MoE layers of one rank, accumulated over the micro-batches of a
// step (the trainer reads and clears them after each step).
struct MoeStats {
  // Per MoE layer (in layer order): tokens routed to each expert in this step, summed over
  // micro-batches, globally agreed (all ranks), after capacity drops. (layers, E)
  std::vector<std::vector<int64_t>> tokens_per_expert;
  // Per MoE layer: the agreed top-k selections of each expert BEFORE capacity drops, summed
  // over the step's micro-batches (dropped = selected - tokens_per_expert). (layers, E)
  std::vector<std::vector<int64_t>> selected_per_expert;
  // Per MoE layer: the selection bias the step routed with (moe.expert_bias_update_rate > 0;
  // identical on every rank); empty when off. (layers, E or 0)
  std::vector<std::vector<float>> expert_bias;
  // profile.routing_trace: when record_local_counts, every MoE forward appends this rank's kept
  // assignments per expert (E), in forward order (micro-batch, then MoE layer); cleared with
  // the step's counters.
  bool record_local_counts = false;
  std::vector<std::vector<int32_t>> local_counts;
  // Per MoE layer: experts that were active (gathered and computed) in the last micro-batch.
  std::vector<int> active_experts;
  uint64_t a2a_bytes = 0;  // this rank's all-to-all send bytes (tokens, both passes)
  // Summed over the step's micro-batches and MoE layers: experts active (agreed, all of the
  // layer's experts, not only this rank's) and experts that could have been (E per layer and
  // micro-batch). Their ratio is the step's active_fraction.
  uint64_t active_layer_experts = 0, layer_expert_slots = 0;
  // Per MoE layer, per expert (layers, E), this rank, forward dispatch only, summed over the
  // step's micro-batches: token assignments this rank sent to another EP rank for expert e
  // (out), and, on e's owner, assignments for e received from other EP ranks (in). Summed over
  // all ranks, out[l][e] == in[l][e]. Zero when ep_size == 1.
  std::vector<std::vector<int64_t>> a2a_tokens_in, a2a_tokens_out;
  // Prediction quality per MoE layer, over the step's micro-batches whose experts a plan made
  // before routing (agreed outcomes, identical on every rank): for each expert e of such a
  // micro-batch, p = the probability the plan used, y = 1 if e was active: sum of (p - y)^2
  // and the number of (expert, micro-batch) pairs; per probability bucket
  // (kCalibrationBuckets equal-width buckets of [0, 1]): pairs and active pairs.
  static constexpr size_t kCalibrationBuckets = 10;
  std::vector<double> brier_sum;
  std::vector<int64_t> brier_count;
  std::vector<std::vector<int64_t>> calibration_count, calibration_active;  // (layers, buckets)
  // Makes room for MoE layer `moe_index` with `experts` experts and zeroes its per-expert
  // counters; each MoE layer calls it once, when it is constructed.
  void add_layer(int moe_index, int64_t experts) {
    const size_t m = static_cast<size_t>(moe_index), E = static_cast<size_t>(experts);
    if (tokens_per_expert.size() <= m) {
      tokens_per_expert.resize(m + 1);
      selected_per_expert.resize(m + 1);
      expert_bias.resize(m + 1);
      active_experts.resize(m + 1);
      a2a_tokens_in.resize(m + 1);
      a2a_tokens_out.resize(m + 1);
      brier_sum.resize(m + 1);
      brier_count.resize(m + 1);
      calibration_count.resize(m + 1, std::vector<int64_t>(kCalibrationBuckets, 0));
      calibration_active.resize(m + 1, std::vector<int64_t>(kCalibrationBuckets, 0));
    }
    tokens_per_expert[m].assign(E, 0);
    selected_per_expert[m].assign(E, 0);
    a2a_tokens_in[m].assign(E, 0);
    a2a_tokens_out[m].assign(E, 0);
  }
  void clear() {
    for (auto& v : tokens_per_expert) std::fill(v.begin(), v.end(), 0);
    for (auto& v : selected_per_expert) std::fill(v.begin(), v.end(), 0);
    local_counts.clear();
    for (auto& v : a2a_tokens_in) std::fill(v.begin(), v.end(), 0);
    for (auto& v : a2a_tokens_out) std::fill(v.begin(), v.end(), 0);
    a2a_bytes = 0;
    active_layer_experts = 0;
    layer_expert_slots = 0;
    std::fill(brier_sum.begin(), brier_sum.end(), 0.0);
    std::fill(brier_count.begin(), brier_count.end(), 0);
    for (auto& v : calibration_count) std::fill(v.begin(), v.end(), 0);
    for (auto& v : calibration_active) std::fill(v.begin(), v.end(), 0);
  }
};

struct MoeRuntime {
  MoeConfig moe;                // router options (aux/z coefficients, jitter, capacity, top-k norm)
  int ep_size = 1;              // expert-parallel width: E / ep_size experts per rank
  int ep_rank = 0;              // this rank's position in its EP group (owns experts
                                // [ep_rank * E/ep, (ep_rank + 1) * E/ep))
  Communicator* a2a = nullptr;  // EP group, its own channel; may be null when ep_size == 1
  Stream* a2a_stream = nullptr;    // the token all-to-all's own stream (null: the compute
                                   // stream); the a2a communicator is used on it only
  Communicator* router = nullptr;  // world, its own channel: the agreement / aux-statistics
                                   // all-reduce; may be null for a single rank
  float loss_weight = 1.0f;        // weight of each micro-batch's aux and z losses
                                   // (1 / grad_accum_steps)
  uint64_t seed = 0;               // router jitter noise
  MoeStats* stats = nullptr;       // where layers report (may be null)
  // Expert spans and timed a2a waits (may be null: none). Not owned.
  TraceRecorder* trace = nullptr;
  // Routing-aware prefetch (may be null: experts are gathered on demand). The model is updated
  // from the agreed counts, so it is identical on every rank; the plans made from it are too.
  prefetch::FrequencyModel* frequency = nullptr;
  // Where the prefetch decisions come from (prefetch/prefetch_planner.h): the expert plan
  // before routing (made from `frequency`, prefetch.policy and the link costs) and backward's
  // exact order. Null: nothing planned ahead, backward exact. Not owned.
  const prefetch::PrefetchPlanner* planner = nullptr;
  // How the local experts are gathered (zero.moe_gather). Leaf and Fsdp gather the block as
  // one coalesced collective and ignore `planner`'s expert plans.
  MoeGather gather = MoeGather::Experts;
  // zero.reshard_after_forward (gather == Experts only): false keeps an active expert acquired
  // in forward until its backward (ParamProvider::may_hold decides within the live limit).
  bool reshard_after_forward = true;
  // moe.routing_replay (may be null: off): the recorded counts each training micro-batch's
  // routing is forced to. Not owned; the evaluation runtime has none.
  const RoutingReplay* replay = nullptr;
  // The simulated backend (issue 18): no kernel computes there, so the numbers the layer's host
  // reads at its one sync (this rank's counts, its EP peers' counts for its experts, the agreed
  // totals) come from this source instead (moe/routing_source.h). Null on real devices.
  const RoutingSource* routing_source = nullptr;
};

// Where one micro-batch sits in the global batch (for world-size independent router noise and
// global normalisation of the aux loss).
struct MicroBatchInfo {
  int64_t index = 0;          // global micro-batch index
  int64_t token_offset = 0;   // global index of this rank's first token
  int64_t global_tokens = 0;  // tokens of this micro-batch over all ranks (0: this rank's)
};

}  // namespace moezero::moe
