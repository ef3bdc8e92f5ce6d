// moe/moe_runtime.h — what a MoE layer needs from the run it is part of: its place in the
// expert-parallel layout, the communicators it uses, and where it reports routing statistics.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "core/communicator.h"
#include "core/config.h"
#include "moe/gather_strategy.h"
#include "moe/moe_stats.h"
#include "prefetch/frequency_model.h"
#include "prefetch/prefetch_planner.h"

namespace moezero {
class TraceRecorder;
}

namespace moezero::moe {

class RoutingReplay;
class RoutingSource;

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
  // How the local experts are gathered (zero.moe_gather; moe/gather_strategy.h): chosen once.
  // Only a strategy whose prefetch is Routed uses `planner`'s expert plans and backward order.
  const GatherStrategy* gather = &gather_strategy(MoeGather::Experts);
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
