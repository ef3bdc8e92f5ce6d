// moe/moe_runtime.h — what a MoE layer needs from the run it is part of, by concern: the
// options it reads (the same every step), its place in the expert-parallel layout and the
// communicators of its collectives, where its expert gathers are planned ahead, where its
// routing comes from other than its router, and where it reports. Nothing here is owned.
#pragma once

#include <cstdint>
#include <vector>

#include "core/communicator.h"
#include "core/config.h"
#include "moe/gather_strategy.h"
#include "moe/moe_stats.h"
#include "prefetch/frequency_model.h"
#include "prefetch/prefetch_planner.h"
#include "prefetch/pregate.h"

namespace moezero {
class TraceRecorder;
}

namespace moezero::moe {

class RoutingReplay;
class RoutingSource;

// What the layer reads from the run's configuration: the same for every step.
struct MoeOptions {
  MoeConfig moe;             // router options (aux/z coefficients, jitter, capacity, top-k norm)
  float loss_weight = 1.0f;  // weight of each micro-batch's aux and z losses (1 / grad_accum_steps)
  uint64_t seed = 0;         // router jitter noise
  // How the local experts are gathered (zero.moe_gather; moe/gather_strategy.h): chosen once.
  // Only a strategy whose prefetch is Routed uses MoePlanning's expert plans and backward order.
  const GatherStrategy* gather = &gather_strategy(MoeGather::Experts);
  // zero.reshard_after_forward (gather == Experts only): false keeps an active expert acquired
  // in forward until its backward, without a byte limit (ParamProvider::hold).
  bool reshard_after_forward = true;
  // zero.expert_grads=all: backward also marks every inactive local expert's (zero) gradient
  // ready, so it is reduced like an active one's; false: only the active experts' are.
  bool reduce_every_expert = false;
};

// The layer's place in the expert-parallel layout and the communicators of its collectives.
struct MoeComms {
  int ep_size = 1;                 // expert-parallel width: E / ep_size experts per rank
  int ep_rank = 0;                 // this rank's position in its EP group (owns experts
                                   // [ep_rank * E/ep, (ep_rank + 1) * E/ep))
  Communicator* a2a = nullptr;     // EP group, its own channel; may be null when ep_size == 1
  Stream* a2a_stream = nullptr;    // the token all-to-all's own stream (null: the compute
                                   // stream); the a2a communicator is used on it only
  Communicator* router = nullptr;  // world, its own channel: the agreement / aux-statistics
                                   // all-reduce; may be null for a single rank
};

// Routing-aware prefetch (both may be null: experts are gathered on demand).
struct MoePlanning {
  // Updated from the agreed counts, so identical on every rank; the plans made from it are too.
  prefetch::FrequencyModel* frequency = nullptr;
  // Where the prefetch decisions come from (prefetch/prefetch_planner.h): the expert plan
  // before routing (made from `frequency`, prefetch.policy and the link costs) and backward's
  // exact order. Null: nothing planned ahead, backward exact.
  const prefetch::PrefetchPlanner* planner = nullptr;
  // prefetch.pregate: the agreed lookahead counts and their calibration (null: off). Each MoE
  // layer registers its gate group, writes the next layer's counts and learns from its own.
  prefetch::PregateModel* pregate = nullptr;
};

// Where the layer's routing comes from other than its router (both null: the router decides).
struct MoeRoutingInputs {
  // moe.routing_replay: the recorded counts each training micro-batch's routing is forced to;
  // the evaluation runtime has none.
  const RoutingReplay* replay = nullptr;
  // The simulated backend (issue 18): no kernel computes there, so the numbers the layer's host
  // reads at its one sync (this rank's counts, its EP peers' counts for its experts, the agreed
  // totals) come from this source instead (moe/routing_source.h). Null on real devices.
  const RoutingSource* source = nullptr;
};

// Where the layer reports (both may be null: nowhere).
struct MoeReporting {
  MoeStats* stats = nullptr;       // routing statistics of the step
  TraceRecorder* trace = nullptr;  // expert spans and timed a2a waits
};

struct MoeRuntime {
  MoeOptions options;
  MoeComms comms;
  MoePlanning planning;
  MoeRoutingInputs routing;
  MoeReporting report;
};

// Where one micro-batch sits in the global batch (for world-size independent router noise and
// global normalisation of the aux loss).
struct MicroBatchInfo {
  int64_t index = 0;          // global micro-batch index
  int64_t token_offset = 0;   // global index of this rank's first token
  int64_t global_tokens = 0;  // tokens of this micro-batch over all ranks (0: this rank's)
};

}  // namespace moezero::moe
