// moe/routing_trace.h — the routing trace (profile.routing_trace, README "MoE layers of today"):
// per step, micro-batch, MoE layer and rank, the number of token assignments that rank routed
// to every expert (kept, after capacity), enough to rescale a run's communication pattern to
// another world size. JSON lines, written by rank 0:
//   line 1: {"format": "moezero routing trace", "version": 1, "world_size", "ep_size",
//            "num_experts", "top_k", "grad_accum_steps", "moe_layers": [model layer ids]}
//   then per step, micro-batch, MoE layer (forward order) and rank:
//            {"step": 1-based, "micro_batch": global index, "layer": model layer id,
//             "rank": r, "counts": [E token assignments of rank r per expert]}
// A resumed run appends (no second header).
#pragma once

#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "core/config.h"
#include "moe/moe_runtime.h"

namespace moezero {
class Communicator;
class Device;
class Stream;
}  // namespace moezero

namespace moezero::moe {

class RoutingTrace {
 public:
  // [in] moe_layers: the model layer id of each MoE layer; [in] writer: this rank writes the
  // file (rank 0); [in] append: a resumed run (no header).
  RoutingTrace(const Config& cfg, std::vector<int> moe_layers, bool writer, bool append);

  // Collective over `world` (every rank calls it after each step): gathers every rank's
  // MoeStats::local_counts of the step (grad_accum_steps x MoE layers entries of E counts) and
  // rank 0 writes the step's lines. [in] step: 1-based.
  void record_step(int64_t step, const MoeStats& stats, Device& device, Stream& stream,
                   Communicator& world);

 private:
  int64_t accum_, experts_;
  int world_;
  std::vector<int> layers_;
  std::string path_;
  std::ofstream out_;
};

// moe.routing_replay: a routing trace read back to force every training micro-batch's routing
// to the recorded per-expert counts (Router::forward_local's `forced`). The trace must match
// the run: world_size, ep_size, num_experts, top_k, grad_accum_steps and moe_layers of the
// header, every rank's counts summing to its token assignments (tokens per rank x top_k, so a
// trace with capacity drops does not replay) with no expert above the rank's tokens, and every
// step up to train.steps recorded (no wrap-around); anything else is refused naming the field.
// moe.capacity_factor must be 0 (the forced assignments are all kept). Lines of a step recorded
// twice (a resumed recording) count as their last occurrence.
class RoutingReplay {
 public:
  // [in] moe_layers: the model layer id of each MoE layer; [in] tokens_per_rank: the token
  // rows of every rank's micro-batch; [in] rank: this rank (whose counts are kept).
  RoutingReplay(const Config& cfg, const std::vector<int>& moe_layers, int64_t tokens_per_rank,
                int rank);

  // This rank's recorded counts (E) of global micro-batch `micro_batch` and MoE layer index
  // `moe_index` (throws beyond the recording).
  std::span<const int64_t> counts(int64_t micro_batch, int moe_index) const;
  int64_t steps() const { return steps_; }  // steps the trace records completely

 private:
  std::string path_;
  int64_t experts_ = 0, layers_ = 0, steps_ = 0, micro_batches_ = 0;
  std::vector<int64_t> counts_;  // (micro-batches, layers, E) of this rank
};

}  // namespace moezero::moe
