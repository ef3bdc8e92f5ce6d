// train/grad_health.h — shard health of a training step (docs/health.md): per-shard, per-group
// and global gradient norms for the metrics (profile.grad_norms), the report of the first
// non-finite gradient value that every rank agrees on (profile.check_finite,
// train.on_nonfinite), and the hook through which tests see each full gradient before it is
// reduced.
//
// The numbers come from the engine's step (zero/zero_engine.h StepResult: every rank's shard
// squares, all-gathered once per step, and this rank's first non-finite value found before
// the reduction). This file adds names: the group names of every rank (EP ranks hold
// different experts), exchanged once at start-up.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/param_group.h"

namespace moezero {
class Communicator;
class Device;
class Stream;
class ZeroEngine;
struct StepResult;
}  // namespace moezero

namespace moezero::train {

// What TrainOptions::grad_hook sees, on each rank, when a group's full gradient of one
// micro-batch is complete (all of its writes enqueued on `stream`) and before it is checked
// and reduced. The hook may enqueue reads or writes of `grad` on `stream` (tests write a NaN:
// `stream.device().ops().fill(stream, grad.view_elems(i, Shape{1}), NAN)`).
struct GradHookInfo {
  int rank = 0;
  int64_t step = 0;         // 1-based, as in the metrics
  int64_t micro_batch = 0;  // 0-based within the step
  const GroupSpec* group = nullptr;
  const GroupLayout* layout = nullptr;  // parameter offsets inside `grad` (layout->offset(i))
  Tensor grad;  // f32 (padded numel of the group): this rank's full gradient
  Stream* stream = nullptr;
};
using GradHook = std::function<void(const GradHookInfo&)>;

// The first non-finite gradient value of a step, agreed by every rank: the earliest in
// backward order (micro-batch, then the order in which gradients became ready), ties to the
// lowest rank. Found in the rank's own full gradient before the reduction, so `rank` is the
// rank that computed it.
struct NonFiniteReport {
  int rank = 0;
  std::string group;   // "layers.1.experts.3"
  int layer = -1;      // -1: not in a layer (embedding, head)
  int expert = -1;     // -1: not an expert
  std::string tensor;  // short parameter name inside the group: "w1", "q_proj", "gate"
  std::string param;   // full (Hugging Face) name
  int64_t index = 0;   // element index inside the parameter (row-major)
  std::string value;   // "nan", "inf", "-inf"
  int64_t step = 0;    // 1-based
  int64_t micro_batch = 0;
  int64_t count = 0;       // non-finite values in that gradient
  std::vector<int> ranks;  // every rank that found a non-finite gradient in this step
};

// Gradient L2 norms of one step (profile.grad_norms), names as GroupSpec::name.
struct GradNorms {
  double global = 0.0;  // sqrt of the sum of the group norms' squares
  std::vector<std::pair<std::string, double>> groups;               // every group of the model
  std::vector<std::vector<std::pair<std::string, double>>> shards;  // [rank]: its shards
};

class GradHealth {
 public:
  // Learns the names of every rank's parameter groups. A rank's groups depend only on its
  // position in its expert-parallel group (the dense groups are the same everywhere, the
  // experts are those of the EP rank, global rank % ep_size), so they are exchanged over `ep`
  // (this rank's EP group; null when ep_size == 1: every rank has this rank's groups): a
  // collective over `ep` that every rank calls once, after building the engine, whose size does
  // not grow with the world. Synchronises `stream`.
  GradHealth(Device& device, Stream& stream, Communicator& misc, Communicator* ep,
             const ZeroEngine& engine);

  // Shard, group and global norms from the step's all-gathered shard squares (host only).
  GradNorms norms(const StepResult& r) const;
  // A collective over `misc` (one small all-gather): call it on every rank when the step's
  // gradient norm is non-finite (a decision identical on every rank). Returns the agreed
  // first non-finite value, or nothing when no rank found one before the reduction (the
  // check is off, or the overflow happened in the reduction / the sum of squares).
  std::optional<NonFiniteReport> agree_nonfinite(const StepResult& r, int64_t step);

 private:
  struct GroupInfo {
    std::string name;
    int layer = -1, expert = -1;
    std::vector<std::string> params;  // full names
  };
  Device& device_;
  Stream& stream_;
  Communicator& misc_;
  // Rank r's groups are its EP position's (r mod the EP size): [position][engine group index].
  const std::vector<GroupInfo>& groups_of(int rank) const {
    return groups_.at(static_cast<size_t>(rank) % groups_.size());
  }
  std::vector<std::vector<GroupInfo>> groups_;
  int world_ = 1;
};

// "w1" for "model.layers.1.block_sparse_moe.experts.3.w1.weight": the last name component
// before a trailing ".weight" / ".bias".
std::string short_param_name(const std::string& full_name);

// What a step whose gradient norm is non-finite reports (the error under
// train.on_nonfinite = stop, a progress line under skip): everything `report` has, or why
// nothing was located.
std::string nonfinite_message(const std::optional<NonFiniteReport>& report, int64_t step,
                              double loss, bool check_finite, NonFinitePolicy policy);

// Adds "grad_norms" and ranks[r]."shard_grad_norms" (when `norms`) and "nonfinite" (when
// `nonfinite`) to a metrics line (docs/health.md).
void add_health_json(const std::optional<GradNorms>& norms,
                     const std::optional<NonFiniteReport>& nonfinite, nlohmann::json& j);

}  // namespace moezero::train
