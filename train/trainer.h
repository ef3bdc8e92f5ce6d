// train/trainer.h — the training loop: ranks as threads (CPU), the model on a ZeroEngine, the
// data batches, the LR schedule, progress lines and the metrics file.
//
// One step on each rank: for each of grad_accum_steps micro-batches, forward + backward of the
// rank's rows (gradients reduced by the engine as groups finish), then the loss all-reduce,
// the engine's AdamW step (one host sync for the global gradient norm), and the per-rank
// counters gathered to rank 0, which prints and writes the metrics line.
//
// The loss of a step is the mean next-token cross-entropy over every target of every
// micro-batch of every rank (each token's loss is scaled by 1 / global target count, and
// gradients are Sum-reduced), so the math does not depend on the world size.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "kernels/sim/sim_device.h"
#include "train/checkpoint.h"
#include "train/grad_health.h"
#include "train/step_stats.h"

namespace moezero::comm {
struct RankContext;
}
namespace moezero::moe {
class RoutingSource;
}

namespace moezero::train {

struct StepLog {
  int64_t step = 0;  // 1-based
  double loss = 0.0;
  double lr = 0.0;
  double grad_norm = 0.0;
  double aux_loss = 0.0;  // sum over MoE layers of the (unscaled) load-balancing loss,
                          // averaged over the step's micro-batches
  // Per MoE layer, per expert: tokens routed in this step (all ranks, globally agreed counts,
  // after capacity drops).
  std::vector<std::vector<int64_t>> tokens_per_expert;
  // Validation (train.eval_every): mean next-token loss over the held-out batches, and its
  // exp (perplexity); absent on steps without an evaluation.
  std::optional<double> val_loss;
  bool applied = true;  // false: skipped (non-finite gradient, train.on_nonfinite = skip)
  int64_t tokens = 0;   // targets in this step, all ranks
  double tokens_per_s = 0.0;
  double elapsed_s = 0.0;
  std::vector<RankStepStats> ranks;
  // Shard health (docs/health.md): norms when profile.grad_norms; the agreed first non-finite
  // gradient value on a step whose gradient norm was non-finite (check_finite on).
  std::optional<GradNorms> grad_norms;
  std::optional<NonFiniteReport> nonfinite;
  // Per MoE layer, per expert counters summed over ranks, and the step's communication time
  // ("moe_layers", "comm_ms", "exposed_comm_ms", "overlap_ratio"; train/step_stats.h).
  std::vector<MoeLayerStats> moe_layers;
  CommStepStats comm;
};

// A batch a custom data source must fill: rows [row_begin, row_begin + rows) of global
// micro-batch `micro_batch`, each seq_len tokens, into tokens and targets (both resized by the
// source to rows * seq_len, i32 values in [0, vocab_size), targets -1 = ignored). Must be a
// pure function of its arguments (every world size sees the same global batch) and
// thread-safe (ranks call it concurrently).
struct BatchRequest {
  int64_t micro_batch = 0;
  int64_t row_begin = 0;
  int64_t rows = 0;
  int64_t seq_len = 0;
  int rank = 0;
};
using DataSource = std::function<void(const BatchRequest&, std::vector<int32_t>& tokens,
                                      std::vector<int32_t>& targets)>;

struct TrainOptions {
  std::ostream* progress = nullptr;  // progress lines (nullptr: silent)
  DataSource data;                   // custom data; empty: data.path / the built-in corpus
  std::string metrics_path;          // overrides train.metrics_file when not empty
  std::string trace_path;            // overrides profile.trace when not empty
  bool collect_params = false;       // fill TrainResult::params (tests)
  // Checkpoints (docs/checkpoints.md). resume_from: a save_dir or step directory to continue
  // from (`moezero train --resume DIR`); the run continues at the saved step up to train.steps.
  std::string resume_from;
  // Stop after this (1-based) step although train.steps is larger (the LR schedule still spans
  // train.steps), saving a checkpoint there when train.save_dir is set; 0: run to train.steps.
  int64_t stop_at_step = 0;
  checkpoint::SaveFault save_fault;  // test hook: a rank file write that fails midway
  // A clean stop (SIGTERM / SIGINT: train/stop_signal.h): when it holds a non-zero value (the
  // signal), every rank finishes the current optimizer step, the ranks agree on it through the
  // step's counters exchange (so all stop after the same step), a checkpoint is saved when
  // train.save_dir is set, and train() returns with TrainResult::stop_signal set. Null: none.
  const std::atomic<int>* stop_flag = nullptr;
  // Called on every rank when a group's full gradient of a micro-batch is complete, before
  // the non-finite check and the reduction (tests inject NaN/Inf through it; see
  // train/grad_health.h). Runs on the rank's thread; must be thread-safe. Empty: none.
  GradHook grad_hook;
  // The simulated backend (issue 18, `moezero plan`): runs the ranks in place of World::run
  // (e.g. comm::World::run_sim with a cluster's options). With it no memory estimate of this
  // machine applies, parameters are allocated but not materialised, step times come from the
  // devices' virtual clocks (Device::virtual_time_s), and routing from `routing_source`.
  std::function<void(const std::function<void(comm::RankContext&)>& rank_main)> run_world;
  const moe::RoutingSource* routing_source = nullptr;  // required with run_world; not owned
  // The memory of each rank's device for the "auto" sizes (shard_cache.capacity_bytes,
  // zero.keep_dense_bytes), with run_world: the simulated GPU's; 0: found out
  // (train/memory_estimate.h, rank_memory_budget).
  uint64_t device_memory_bytes = 0;
};

struct TrainResult {
  std::vector<StepLog> steps;
  // collect_params: every parameter group of the model (all experts, whatever the expert
  // parallelism) in execution order, fp32 masters after training.
  std::vector<std::string> group_names;
  std::vector<std::vector<float>> params;
  // collect_params: every rank's groups (names and fp32 masters), [rank][group of that rank].
  std::vector<std::vector<std::string>> rank_group_names;
  std::vector<std::vector<std::vector<float>>> rank_params;
  std::vector<std::string> frequency_models;  // per rank: the expert frequency model (JSON)
  // A stop through TrainOptions::stop_flag: the signal (0: the run was not stopped), the last
  // completed step, and whether a checkpoint of it was saved (train.save_dir).
  int stop_signal = 0;
  int64_t stopped_after_step = 0;
  bool stop_saved = false;
};

// Learning rate of 0-based step `step`: linear warmup to train.lr over warmup_steps, then
// cosine decay to min_lr at the last step.
double lr_at(const TrainConfig& t, int64_t step);

// What the trainer needs of the simulated devices it runs on (TrainOptions::run_world with
// comm::World::run_sim): no op computes (its host plans come from the routing source), and the
// buffers of the per-step host exchanges among `world_size` ranks are real memory.
sim::SimDeviceOptions simulated_device_options(int world_size);

// Runs the whole training described by `cfg`. Ranks are threads of this process, or, when the
// process was started by mpirun (comm/mpi_launch.h), one rank per process (World::run_mpi:
// parallel.world_size must equal the MPI world size); then rank 0's process writes the
// metrics file and progress and gets the TrainResult (steps, params), the others an empty
// one (frequency_models: only their own rank's). Throws moezero::Error on bad input or when a
// rank fails (the first failure; the others are woken, never left hanging).
// The config with its "auto" sizes resolved as train() resolves them for this process
// (shard_cache.capacity_bytes, zero.keep_dense_bytes: train/memory_estimate.h, auto_sizes);
// under MPI the ranks then take the smallest. For the run header; train() calls it itself.
Config resolve_auto_sizes(const Config& cfg, const TrainOptions& options);

TrainResult train(const Config& cfg, const TrainOptions& options);

// One step as a JSON object (one line of the metrics file).
std::string step_json(const StepLog& s);

}  // namespace moezero::train
