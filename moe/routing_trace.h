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

}  // namespace moezero::moe
