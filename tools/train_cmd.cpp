// tools/train_cmd.cpp — `moezero train --config FILE [--set section.key=value ...]
// [--metrics FILE] [--trace FILE] [--resume DIR] [--stop-at STEP] [--export-hf DIR] [--quiet]
// [--gemm-profile]`: checks the config before anything runs, prints what will run, then a
// progress line per train.log_every steps and a summary (and, with --gemm-profile, the CPU
// GEMMs' in-run rate: kernels/backend.h cpu_gemm_profile_report).
#include <chrono>
#include <cstdio>
#include <iostream>

#include "comm/mpi_launch.h"
#include "core/allocator.h"
#include "core/config.h"
#include "core/error.h"
#include "hf/hf_export.h"
#include "hf/hf_tokenizer_export.h"
#include "kernels/backend.h"
#include "model/transformer.h"
#include "tools/cli.h"
#include "train/memory_estimate.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace moezero::cli {

namespace {
int64_t parse_step(const std::string& v, const char* flag) {
  size_t used = 0;
  int64_t step = 0;
  try {
    step = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || step <= 0)
    MOEZERO_USER_ERROR("train: ", flag, " needs a step number > 0, got '", v, "'");
  return step;
}
// The command line of `moezero train`.
struct TrainArgs {
  std::string config_path, metrics_path, trace_path, resume;
  int64_t stop_at = 0;
  std::vector<std::string> overrides;
  bool quiet = false;
  bool gemm_profile = false;
  std::string export_dir;
  hf::HfExportOptions export_opt;
};

TrainArgs parse_train_args(const std::vector<std::string>& args) {
  TrainArgs a;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      MOEZERO_USAGE_REQUIRE(i + 1 < args.size(), "train: ", flag, " needs a value");
      return args[++i];
    };
    if (args[i] == "--config")
      a.config_path = value("--config");
    else if (args[i] == "--set")
      a.overrides.push_back(value("--set"));
    else if (args[i] == "--metrics")
      a.metrics_path = value("--metrics");
    else if (args[i] == "--resume")
      a.resume = value("--resume");
    else if (args[i] == "--stop-at")
      a.stop_at = parse_step(value("--stop-at"), "--stop-at");
    else if (args[i] == "--trace")
      a.trace_path = value("--trace");
    else if (args[i] == "--quiet")
      a.quiet = true;
    else if (args[i] == "--gemm-profile")
      a.gemm_profile = true;
    else if (args[i] == "--export-hf")
      a.export_dir = value("--export-hf");
    else if (args[i] == "--export-dtype") {
      const std::string d = value("--export-dtype");
      MOEZERO_REQUIRE(d == "f32" || d == "bf16", "train: --export-dtype must be f32 or bf16, got '",
                      d, "'");
      a.export_opt.dtype = d == "f32" ? hf::SafetensorsDType::F32 : hf::SafetensorsDType::BF16;
    } else
      MOEZERO_USAGE_ERROR("train: unknown option '", args[i], "'");
  }
  MOEZERO_USAGE_REQUIRE(!a.config_path.empty(), "train: --config FILE is required");
  return a;
}

// What will run: the model, parallelism, MoE, schedule and data lines.
void print_plan(const Config& cfg, const std::string& config_path, bool under_mpi) {
  int64_t params = 0;
  for (const auto& g : model::Transformer(cfg.model).param_groups())
    for (const auto& p : g.params) params += p.shape.numel();
  const auto& m = cfg.model;
  std::printf("moezero train: %s\n", config_path.c_str());
  std::printf(
      "  model    %lld parameters: %lld layers, d_model %lld, %lld/%lld heads, d_ff %lld, vocab "
      "%lld, seq %lld\n",
      (long long)params, (long long)m.n_layers, (long long)m.d_model, (long long)m.n_heads,
      (long long)m.n_kv_heads, (long long)m.d_ff, (long long)m.vocab_size, (long long)m.seq_len);
  std::printf("  parallel %lld ranks (%s), expert parallel %lld, ZeRO stage %lld, %s compute\n",
              (long long)cfg.parallel.world_size,
              under_mpi ? (cfg.parallel.backend == BackendKind::Cpu ? "MPI processes on the CPU"
                                                                    : "MPI processes, one GPU each")
                        : (cfg.parallel.backend == BackendKind::Cpu ? "threads on the CPU"
                                                                    : "one GPU each"),
              (long long)cfg.parallel.ep_size, (long long)cfg.zero.stage,
              cfg.train.dtype == DType::F32 ? "fp32" : "bf16");
  if (cfg.parallel.backend == BackendKind::Cpu)
    std::printf("  cpu      %s\n", cpu_gemm_description().c_str());
  if (m.num_experts > 0)
    std::printf(
        "  moe      %lld experts, top-%lld, every %lld layer(s), aux %g, capacity %s\n",
        (long long)m.num_experts, (long long)m.top_k, (long long)m.moe_every, cfg.moe.aux_loss_coef,
        cfg.moe.capacity_factor > 0 ? std::to_string(cfg.moe.capacity_factor).c_str() : "dropless");
  std::printf(
      "  train    %lld steps x %lld micro-batches x %lld sequences, lr %g -> %g, warmup %lld\n",
      (long long)cfg.train.steps, (long long)cfg.train.grad_accum_steps,
      (long long)cfg.train.micro_batch_size, cfg.train.lr, cfg.train.min_lr,
      (long long)cfg.train.warmup_steps);
  std::printf("  data     %s\n",
              cfg.data.path.empty() ? "<built-in corpus>" : cfg.data.path.c_str());
  const Config run_cfg = train::resolve_auto_sizes(cfg, {});
  const train::MemoryEstimate e = train::estimate_memory(run_cfg, under_mpi);
  if (cfg.shard_cache.capacity_bytes == kAutoBytes && e.experts > 0) {
    const uint64_t kept = run_cfg.shard_cache.capacity_bytes;
    std::printf("  cache    shard_cache.capacity_bytes auto: %s, %s\n", format_bytes(kept).c_str(),
                kept >= e.experts
                    ? "every local expert"
                    : ("what the memory leaves: " + std::to_string(kept / e.largest_expert) +
                       " of " + std::to_string(e.experts / e.largest_expert) + " local experts")
                          .c_str());
  }
  if (cfg.zero.keep_dense_bytes == kAutoBytes && e.dense > 0 && cfg.train.grad_accum_steps > 1) {
    const uint64_t kept = run_cfg.zero.keep_dense_bytes;
    std::printf("  keep     zero.keep_dense_bytes auto: %s, %s\n", format_bytes(kept).c_str(),
                kept >= e.dense ? "every sharded dense group"
                                : ("what the memory leaves of " + format_bytes(e.dense)).c_str());
  }
  std::printf("%s\n",
              train::memory_estimate_text(e, train::machine_memory_limit(), cfg.train.memory_limit)
                  .c_str());
}

// --export-hf after the run: from the final checkpoint under mpirun (each process holds only
// its shards), else from the parameters the run collected.
void export_trained(const Config& cfg, train::TrainResult& r, const TrainArgs& a, bool under_mpi) {
  if (under_mpi) {
    export_checkpoint(cfg.train.save_dir, a.export_dir, a.export_opt);
    return;
  }
  std::vector<hf::GroupValues> groups;
  for (size_t g = 0; g < r.params.size(); ++g)
    groups.push_back({r.group_names[g], std::move(r.params[g])});
  hf::export_hf(cfg, groups, a.export_dir, a.export_opt);
  if (!cfg.data.tokenizer.empty())
    hf::export_hf_tokenizer(cfg.data.tokenizer, a.export_dir, cfg.model.seq_len,
                            cfg.model.vocab_size);
  std::printf("exported %s to %s\n", hf::hf_architecture_name(hf::hf_architecture(cfg)),
              a.export_dir.c_str());
}

// A word for a POSIX shell: as is when plain, else in single quotes.
std::string shell_quote(const std::string& s) {
  const bool plain = !s.empty() && s.find_first_not_of(
                                       "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
                                       "OPQRSTUVWXYZ0123456789_-+=./,:@%") == std::string::npos;
  if (plain) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The command line that continues a stopped run: this one, --resume replaced by train.save_dir.
std::string resume_command(const std::vector<std::string>& args, const std::string& save_dir) {
  std::string cmd = "moezero train";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--resume") {
      ++i;
      continue;
    }
    cmd += " " + shell_quote(args[i]);
  }
  return cmd + " --resume " + shell_quote(save_dir);
}

// After a SIGTERM / SIGINT stop: what was kept and how to continue; the exit status.
int report_stop(const train::TrainResult& r, const Config& cfg,
                const std::vector<std::string>& args, bool lead, bool under_mpi) {
  if (lead) {
    std::printf("stopped by %s after step %lld of %lld\n", train::signal_name(r.stop_signal),
                (long long)r.stopped_after_step, (long long)cfg.train.steps);
    if (r.stop_saved)
      std::printf("checkpoint saved in %s; resume with%s:\n  %s\n", cfg.train.save_dir.c_str(),
                  under_mpi ? " (under the same mpirun command)" : "",
                  resume_command(args, cfg.train.save_dir).c_str());
    else
      std::printf(
          "no checkpoint saved (train.save_dir is not set): set it to keep the steps of "
          "a stopped run\n");
    std::fflush(stdout);
  }
  return train::kExitStopped;
}

}  // namespace

int train(const std::vector<std::string>& args) {
  TrainArgs a = parse_train_args(args);
  const Config cfg = load_config(a.config_path, a.overrides);
  if (!a.export_dir.empty()) hf::hf_architecture(cfg);  // refuse before training, not after
  // No step to run is a mistake unless the point is to export the initial parameters.
  MOEZERO_REQUIRE(cfg.train.steps > 0 || !a.export_dir.empty(),
                  "train.steps is 0: there is nothing to train (set train.steps > 0; with "
                  "--export-hf, steps 0 exports the initial parameters)");
  MOEZERO_REQUIRE(!a.gemm_profile || cfg.parallel.backend == BackendKind::Cpu,
                  "train: --gemm-profile times the CPU backend's GEMMs; this run's backend is not "
                  "the CPU (parallel.backend)");

  // Under mpirun every process runs this; rank 0's prints for the job.
  const auto mpi = comm::mpi_process();
  const bool lead = !mpi || mpi->rank == 0;
  if (!lead) a.quiet = true;
  // Under mpirun each process holds only its shards: the export consolidates the run's final
  // checkpoint (train.save_dir, which every process sees) once the run has ended.
  MOEZERO_REQUIRE(!mpi || a.export_dir.empty() || !cfg.train.save_dir.empty(),
                  "train: under mpirun, --export-hf exports the run's final checkpoint: set "
                  "train.save_dir (a directory every process sees)");
  if (lead) print_plan(cfg, a.config_path, mpi.has_value());
  std::fflush(stdout);

  train::TrainOptions opt;
  opt.progress = a.quiet ? nullptr : &std::cout;
  opt.metrics_path = a.metrics_path;
  opt.resume_from = a.resume;
  opt.stop_at_step = a.stop_at;
  if (!a.resume.empty()) std::printf("  resume   %s\n", a.resume.c_str());
  if (lead && cfg.train.steps == 0)
    std::printf("  train.steps is 0: no step runs; the initial parameters are exported\n");
  opt.collect_params = !a.export_dir.empty() && !mpi;
  opt.trace_path = a.trace_path;
  // SIGTERM / SIGINT: every rank finishes the step, a checkpoint is saved, exit kExitStopped.
  train::install_stop_handlers();
  opt.stop_flag = &train::stop_signal_flag();
  if (a.gemm_profile) cpu_gemm_profile_enable(true);
  const auto t0 = std::chrono::steady_clock::now();
  train::TrainResult r = train::train(cfg, opt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (lead && !r.steps.empty())
    std::printf("done: %zu steps in %.1f s, loss %.4f -> %.4f\n", r.steps.size(), secs,
                r.steps.front().loss, r.steps.back().loss);
  if (a.gemm_profile) {
    if (lead)
      std::printf(
          "%s  (the run took %.3f s of wall time, setup included; tile times are summed "
          "over threads)\n",
          cpu_gemm_profile_report().c_str(), secs);
    cpu_gemm_profile_enable(false);
  }
  if (r.stop_signal != 0) return report_stop(r, cfg, args, lead, mpi.has_value());
  if (lead && !a.export_dir.empty()) export_trained(cfg, r, a, mpi.has_value());
  const std::string trace_file = a.trace_path.empty() ? cfg.profile.trace : a.trace_path;
  if (lead && !trace_file.empty())
    std::printf("trace: %s (open in https://ui.perfetto.dev or chrome://tracing)\n",
                trace_file.c_str());
  return 0;
}

}  // namespace moezero::cli
