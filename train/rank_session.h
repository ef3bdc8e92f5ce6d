// train/rank_session.h — one rank's part of a training run: what train() (trainer.h) sets up
// once for every rank (TrainRun), and run_rank, the body every rank runs (a thread of this
// process, or this process under mpirun).
//
// run_rank builds the rank's communicators, model and ZeRO engine (restoring a checkpoint or
// loading train.init_from), runs the steps (micro-batches, the optimizer step, one exchange of
// the step's counters, the checkpoint), and rank 0 writes each step's metrics line and
// progress. Every collective is issued in the same order on every rank.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/config.h"
#include "core/output_file.h"
#include "core/trace.h"
#include "train/data.h"
#include "train/trainer.h"

namespace moezero::train {

// What the ranks hand back to train(), under `mu`.
struct RankResults {
  std::mutex mu;
  TrainResult result;  // steps (rank 0), frequency_models, rank_params, rank_group_names
  std::map<std::string, std::vector<float>> collected;  // collect_params: every rank's groups
};

// What every rank of one run shares; set up by train() before the ranks start.
struct TrainRun {
  const Config& cfg;
  const TrainOptions& options;
  bool under_mpi = false;  // one rank per process (World::run_mpi)
  // shard_cache.capacity_bytes or zero.keep_dense_bytes was "auto": cfg holds this process's
  // resolution, and under MPI the ranks take the smallest (their gathers follow from it).
  bool auto_sizes = false;
  const TokenData* data = nullptr;  // the token stream; null when options.data is set
  // train.init_from: parameters by group name (empty: none).
  const std::map<std::string, std::vector<float>>& init_values;
  TraceSink* trace_sink = nullptr;  // null: no trace
  const StepList& trace_steps;
  OutputFile* metrics = nullptr;  // rank 0 writes a line per step here (null: none)
  RankResults& results;
};

// The body of rank ctx.rank for the whole run. Throws on failure (World wakes the others).
void run_rank(comm::RankContext& ctx, const TrainRun& run);

}  // namespace moezero::train
