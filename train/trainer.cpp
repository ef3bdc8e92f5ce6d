// train/trainer.cpp — train() (trainer.h): checks the run, opens what the ranks share (data,
// metrics file, init_from values, trace), runs every rank's session (rank_session.h) and
// assembles the result; also the LR schedule and the metrics line of a step.
#include "train/trainer.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "comm/mpi_launch.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/output_file.h"
#include "core/trace.h"
#include "hf/hf_export.h"
#include "kernels/backend.h"
#include "model/transformer.h"
#include "train/checkpoint_io.h"
#include "train/data.h"
#include "train/memory_estimate.h"
#include "train/rank_session.h"

namespace moezero::train {

double lr_at(const TrainConfig& t, int64_t step) {
  if (step < t.warmup_steps)
    return t.lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  const int64_t decay = std::max<int64_t>(1, t.steps - t.warmup_steps - 1);
  const double p =
      std::min(1.0, static_cast<double>(step - t.warmup_steps) / static_cast<double>(decay));
  return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * p));
}

std::string step_json(const StepLog& s) {
  nlohmann::json j;
  j["step"] = s.step;
  j["loss"] = s.loss;
  j["lr"] = s.lr;
  j["grad_norm"] = s.grad_norm;
  j["aux_loss"] = s.aux_loss;
  j["tokens_per_expert"] = s.tokens_per_expert;
  j["applied"] = s.applied;
  j["tokens"] = s.tokens;
  j["tokens_per_s"] = s.tokens_per_s;
  if (s.val_loss) {
    j["val_loss"] = *s.val_loss;
    j["val_ppl"] = std::exp(*s.val_loss);
  }
  j["elapsed_s"] = s.elapsed_s;
  auto ranks = nlohmann::json::array();
  for (const RankStepStats& r : s.ranks) ranks.push_back(rank_step_json(r));
  j["ranks"] = ranks;
  add_health_json(s.grad_norms, s.nonfinite, j);
  add_step_stats_json(j, s.moe_layers, s.comm);
  return j.dump();
}

namespace {

// Refuses a run that cannot start, before any rank does (one clear message, no collective).
void check_run(const Config& cfg, const TrainOptions& options,
               const std::optional<comm::MpiProcess>& mpi) {
  const auto& tc = cfg.train;
  const int world = static_cast<int>(cfg.parallel.world_size);
  // Under mpirun: one rank per process (World::run_mpi); the world is MPI's, and the config
  // must say the same (a silent override would change the batch split and the math).
  if (mpi)
    MOEZERO_REQUIRE(world == mpi->world_size, "parallel.world_size (", world,
                    ") differs from the MPI world size (", mpi->world_size,
                    " processes from mpirun -np): pass --set parallel.world_size=", mpi->world_size,
                    " or launch as many processes as ranks");
  MOEZERO_REQUIRE(!mpi || !options.collect_params,
                  "TrainOptions::collect_params gathers every rank's parameters in one process "
                  "and is not available under mpirun: save a checkpoint (train.save_dir) and "
                  "read it with checkpoint::load_full_params");
  if (cfg.parallel.backend == BackendKind::Cuda && !mpi) {
    std::string why;
    if (!cuda_available(&why))
      MOEZERO_USER_ERROR("parallel.backend is \"cuda\" but CUDA is unavailable: ", why);
    MOEZERO_REQUIRE(world <= cuda_device_count(), "parallel.world_size (", world, ") exceeds the ",
                    cuda_device_count(),
                    " GPU(s) of this machine: parallel.backend \"cuda\" runs one rank per GPU");
  }
  if (options.run_world) {
    MOEZERO_REQUIRE(!mpi, "a simulated run (moezero plan) runs in one process, not under mpirun");
    MOEZERO_REQUIRE(options.routing_source != nullptr,
                    "TrainOptions::run_world (simulated backend) needs a routing_source");
    MOEZERO_REQUIRE(options.data != nullptr,
                    "TrainOptions::run_world (simulated backend) needs a data source (its tokens "
                    "are not read)");
  }
  MOEZERO_REQUIRE(tc.micro_batch_size % world == 0, "train.micro_batch_size (", tc.micro_batch_size,
                  ") must be divisible by parallel.world_size (", world,
                  "): it is the global number of sequences per micro-batch");
  MOEZERO_REQUIRE(tc.eval_every == 0 || !options.data,
                  "train.eval_every needs the held-out part of data.path / data.val_path; a "
                  "custom TrainOptions::data source has none: set train.eval_every to 0");
  if (!options.resume_from.empty() && !tc.init_from.empty())
    MOEZERO_USER_ERROR("train.init_from (", tc.init_from, ") and a resume from ",
                       options.resume_from,
                       " were both given: a resumed run takes its parameters from the checkpoint; "
                       "drop one of them");
}

// train.save_dir is created and checked writable before the first step: a bad one found only
// at the first save (with save_every 0: the end of the run) would waste the run.
void check_save_dir(const std::string& dir) {
  if (dir.empty()) return;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) MOEZERO_USER_ERROR("train.save_dir: cannot create '", dir, "': ", ec.message());
  if (!fs::is_directory(dir, ec))
    MOEZERO_USER_ERROR("train.save_dir: '", dir, "' is not a directory");
  const fs::path probe = fs::path(dir) / (".write_test_" + std::to_string(::getpid()));
  write_output_file(probe.string(), "checkpoint directory write test\n", "train.save_dir");
  fs::remove(probe, ec);
}

// A resumed run continues the metrics of the run it resumes: lines after the checkpoint's step
// (steps the crashed or stopped run did past its last save, and a torn last line) are dropped,
// so that each step appears once. Returns how many lines were dropped.
size_t keep_metrics_through(const std::string& path, int64_t step) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return 0;  // no file yet: the resumed run starts it
  std::string kept, line;
  size_t dropped = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<int64_t>() <= step)
      kept += line + "\n";
    else if (!line.empty())
      ++dropped;
  }
  in.close();
  if (dropped > 0) write_output_file(path, kept, "the metrics file");
  return dropped;
}

// Opens the metrics file on the process that writes it (MPI: rank 0's); closed otherwise.
void open_metrics(const Config& cfg, const TrainOptions& options,
                  const std::optional<comm::MpiProcess>& mpi, OutputFile& metrics) {
  const std::string metrics_path =
      options.metrics_path.empty() ? cfg.train.metrics_file : options.metrics_path;
  if (metrics_path.empty() || (mpi && mpi->rank != 0)) return;
  if (!options.resume_from.empty()) {
    const int64_t step =
        checkpoint::io::read_manifest(checkpoint::io::resolve_step_dir(options.resume_from)).step;
    const size_t dropped = keep_metrics_through(metrics_path, step);
    if (dropped > 0 && options.progress)
      *options.progress << "metrics: dropped " << dropped << " line(s) after step " << step
                        << " from " << metrics_path << " (the resumed run writes them again)\n";
  }
  // A resumed run appends to the metrics of the run it continues.
  metrics = OutputFile(metrics_path, /*append=*/!options.resume_from.empty(), "the metrics file");
}

// train.init_from: an exported directory's parameters, by group name (checked once, here).
std::map<std::string, std::vector<float>> read_init_values(const Config& cfg) {
  std::map<std::string, std::vector<float>> init_values;
  if (cfg.train.init_from.empty()) return init_values;
  const hf::HfModel hf = hf::read_hf_dir(cfg.train.init_from);
  hf::check_same_shape(cfg.model, hf, "train.init_from");
  hf::check_same_routing(cfg.moe, hf, "train.init_from");
  for (hf::GroupValues& g : hf::hf_group_values(hf, &cfg.model))
    init_values.emplace(g.name, std::move(g.data));
  return init_values;
}

// The trace (profile.trace / --trace): every rank's traced steps go to one file, written at
// the end of the run, or when a rank fails, with what was recorded until then. Under MPI every
// process records its own rank; rank 0's process writes the file with every rank's events,
// sent to it at the end of the run. Null: no trace.
std::unique_ptr<TraceSink> make_trace_sink(const Config& cfg, const TrainOptions& options,
                                           const std::optional<comm::MpiProcess>& mpi) {
  const std::string trace_path =
      options.trace_path.empty() ? cfg.profile.trace : options.trace_path;
  if (trace_path.empty()) return nullptr;
  return std::make_unique<TraceSink>(!mpi || mpi->rank == 0 ? trace_path : std::string(),
                                     std::string(R"({"config": )") + config_to_json(cfg, -1) + "}");
}

// Runs run_rank on every rank (threads, GPUs or this MPI process); on a failure writes the
// trace with every step so far, then rethrows.
void run_ranks(const Config& cfg, const std::optional<comm::MpiProcess>& mpi, const TrainRun& run,
               TraceSink* trace_sink) {
  const int world = static_cast<int>(cfg.parallel.world_size);
  const bool on_cuda = cfg.parallel.backend == BackendKind::Cuda;
  const auto rank_main = [&run](comm::RankContext& ctx) { run_rank(ctx, run); };
  comm::WorldOptions wopt;
  wopt.comm = make_comm_options(cfg.comm_emulation, cfg.comm);
  try {
    if (run.options.run_world)
      run.options.run_world(rank_main);
    else if (mpi)
      comm::World::run_mpi(on_cuda ? DeviceKind::Cuda : DeviceKind::Cpu, rank_main, wopt);
    else if (on_cuda)
      comm::World::run_cuda(world, rank_main, wopt);
    else
      comm::World::run(world, rank_main, wopt);
  } catch (const std::exception& e) {
    if (trace_sink && !trace_sink->path().empty()) {  // valid JSON with every step so far
      try {
        trace_sink->write(e.what());
      } catch (const std::exception&) {
      }
    }
    throw;
  }
  if (trace_sink && !trace_sink->path().empty()) trace_sink->write();
}

}  // namespace

sim::SimDeviceOptions simulated_device_options(int world_size) {
  sim::SimDeviceOptions o;
  o.compute_backed = false;
  // Only the host exchanges (core/host_exchange.h) need real memory past the small blocks
  // (counters, flags, scalars). The largest is the step statistics' all-gather: world x
  // (RankStepStats + 1) words; a host-read request is backed up to 4/5 of
  // host_read_backed_bytes (sim_device.h). Every other big buffer (shards, gradients,
  // optimizer states: 270-540 KiB per expert at 1,024 ranks) stays unbacked.
  const uint64_t gather = uint64_t(std::max(world_size, 1)) * (kRankStepStatsWords + 1) * 8;
  o.host_read_backed_bytes =
      std::max<uint64_t>(uint64_t(1) << 20, gather * 5 / 4 + (uint64_t(64) << 10));
  return o;
}

namespace {

Config with_auto_sizes(const Config& cfg, const TrainOptions& options,
                       const std::optional<comm::MpiProcess>& mpi) {
  Config c = cfg;
  if (cfg.shard_cache.capacity_bytes != kAutoBytes && cfg.zero.keep_dense_bytes != kAutoBytes)
    return c;
  uint64_t budget = 0;
  if (options.run_world) {  // simulated ranks: their devices' memory, not this machine's
    for (const uint64_t b : {cfg.train.memory_limit, options.device_memory_bytes})
      if (b > 0) budget = budget == 0 ? b : std::min(budget, b);
  } else {
    MemoryEstimate estimate = estimate_memory(cfg, mpi.has_value());
    estimate.first_gpu = mpi ? mpi->local_rank : 0;  // as train() below
    // On the CPU backend the ranks sharing this machine's memory: this process's threads, or
    // under MPI the job's processes on this host (on CUDA each process has its own GPU).
    if (mpi && cfg.parallel.backend == BackendKind::Cpu)
      estimate.ranks_in_process = std::max(1, mpi->local_size);
    budget = rank_memory_budget(cfg, estimate, machine_memory_limit(), options.device_memory_bytes);
  }
  const AutoSizes sizes = auto_sizes(cfg, mpi.has_value(), budget);
  c.shard_cache.capacity_bytes = sizes.cache_bytes;
  c.zero.keep_dense_bytes = sizes.keep_dense_bytes;
  return c;
}

}  // namespace

Config resolve_auto_sizes(const Config& cfg, const TrainOptions& options) {
  return with_auto_sizes(cfg, options, comm::mpi_process());
}

TrainResult train(const Config& user_cfg, const TrainOptions& options) {
  const std::optional<comm::MpiProcess> mpi = comm::mpi_process();
  check_run(user_cfg, options, mpi);
  // The "auto" sizes resolved for this machine (train/memory_estimate.h): what the run uses.
  const Config cfg = with_auto_sizes(user_cfg, options, mpi);
  // Refused before anything is allocated when it cannot fit (train/memory_estimate.h).
  // Simulated ranks: the simulated devices' capacity decides (an out-of-memory error names it).
  if (!options.run_world) {
    MemoryEstimate estimate = estimate_memory(cfg, mpi.has_value());
    estimate.first_gpu = mpi ? mpi->local_rank : 0;  // run_cuda: rank r on GPU r; MPI: local rank
    check_memory_fits(cfg, estimate, machine_memory_limit());
  }
  std::unique_ptr<TokenData> data;
  if (!options.data)
    data = std::make_unique<TokenData>(cfg.data, cfg.model.vocab_size, cfg.model.seq_len);
  if (data && cfg.train.eval_every > 0 && !data->has_validation())
    MOEZERO_THROW(
        "train.eval_every: the held-out data (", data->val_source(), ") holds ", data->val_tokens(),
        " tokens, fewer than one sequence of model.seq_len + 1 = ", cfg.model.seq_len + 1);
  check_save_dir(cfg.train.save_dir);
  if (!mpi || mpi->rank == 0) keep_tokenizer(cfg.data, cfg.train.save_dir);
  OutputFile metrics;
  open_metrics(cfg, options, mpi, metrics);
  const std::map<std::string, std::vector<float>> init_values = read_init_values(cfg);
  const StepList trace_steps = StepList::parse(cfg.profile.steps, "profile.steps");
  const std::unique_ptr<TraceSink> trace_sink = make_trace_sink(cfg, options, mpi);

  RankResults results;
  const TrainRun run{.cfg = cfg,
                     .options = options,
                     .under_mpi = mpi.has_value(),
                     .auto_sizes = user_cfg.shard_cache.capacity_bytes == kAutoBytes ||
                                   user_cfg.zero.keep_dense_bytes == kAutoBytes,
                     .data = data.get(),
                     .init_values = init_values,
                     .trace_sink = trace_sink.get(),
                     .trace_steps = trace_steps,
                     .metrics = metrics.is_open() ? &metrics : nullptr,
                     .results = results};
  run_ranks(cfg, mpi, run, trace_sink.get());
  metrics.close();  // checked: a metrics file that could not be written fails the run

  TrainResult& result = results.result;
  if (options.collect_params)  // every group of the model, in execution order
    for (const GroupSpec& g : hf::full_param_groups(cfg.model)) {
      result.group_names.push_back(g.name);
      result.params.push_back(std::move(results.collected.at(g.name)));
    }
  return std::move(result);
}

}  // namespace moezero::train
