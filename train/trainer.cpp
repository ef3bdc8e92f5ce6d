#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <ostream>
#include <type_traits>

#include "comm/mpi_launch.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/host_exchange.h"
#include "core/ops.h"
#include "core/process_groups.h"
#include "core/trace.h"
#include "zero/zero_engine.h"
#include "kernels/backend.h"
#include "train/data.h"
#include "hf/hf_export.h"
#include "model/transformer.h"
#include "prefetch/frequency_model.h"
#include "prefetch/shard_cache.h"

namespace moezero::moe {

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
  j["elapsed_s"] = s.elapsed_s;
  auto ranks = nlohmann::json::array();
  for (const auto& r : s.ranks) {
    nlohmann::json rj;
    rj["gathered_bytes"] = r.gathered_bytes;
    rj["reduce_scattered_bytes"] = r.reduce_scattered_bytes;
    rj["all_reduced_bytes"] = r.all_reduced_bytes;
    rj["a2a_bytes"] = r.a2a_bytes;
    rj["gathered_dense_bytes"] = r.gathered_dense_bytes;
    rj["gathered_expert_bytes"] = r.gathered_expert_bytes;
    rj["prefetch_hits"] = r.prefetch_hits;
    rj["prefetch_misses"] = r.prefetch_misses;
    rj["prefetch_wasted_bytes"] = r.prefetch_wasted_bytes;
    rj["cache_hits"] = r.cache_hits;
    rj["cache_misses"] = r.cache_misses;
    rj["cache_evictions"] = r.cache_evictions;
    rj["stall_ms"] = r.stall_ms;
    nlohmann::json peak;
    for (size_t t = 0; t < kMemTagCount; ++t)
      peak[mem_tag_name(static_cast<MemTag>(t))] = r.peak_bytes[t];
    rj["peak_bytes"] = peak;
    rj["peak_total_bytes"] = r.peak_total_bytes;
    ranks.push_back(rj);
  }
  j["ranks"] = ranks;
  add_health_json(s.grad_norms, s.nonfinite, j);
  add_step_stats_json(j, s.moe_layers, s.comm);
  return j.dump();
}

namespace {

std::string clock_text(double s) {
  char buf[32];
  const int t = static_cast<int>(s + 0.5);
  std::snprintf(buf, sizeof buf, "%02d:%02d", t / 60, t % 60);
  return buf;
}

// [in] first_step: steps completed before this run (a resume); [in] end_step: this run's last
// step (train.steps or --stop-at). The ETA is this run's pace over this run's steps.
void print_progress(std::ostream& os, const StepLog& s, int64_t first_step, int64_t end_step,
                    int64_t steps) {
  char buf[256];
  const int64_t done = s.step - first_step;
  const double eta = done > 0 ? s.elapsed_s / double(done) * double(end_step - s.step) : 0.0;
  std::snprintf(
      buf, sizeof buf,
      "step %5lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %8.0f tok/s | %s elapsed, "
      "ETA %s%s",
      static_cast<long long>(s.step), static_cast<long long>(steps), s.loss, s.lr, s.grad_norm,
      s.tokens_per_s, clock_text(s.elapsed_s).c_str(), clock_text(eta).c_str(),
      s.applied ? "" : " | SKIPPED (non-finite gradient)");
  os << buf << std::endl;
}

static_assert(std::is_trivially_copyable_v<RankStepStats> && sizeof(RankStepStats) % 8 == 0 &&
                  alignof(RankStepStats) == 8,
              "RankStepStats is all-gathered as 8-byte words");
constexpr size_t kStatWords = sizeof(RankStepStats) / 8;

}  // namespace

TrainResult train(const Config& cfg, const TrainOptions& options) {
  const auto& tc = cfg.train;
  const int world = static_cast<int>(cfg.parallel.world_size);
  const bool on_cuda = cfg.parallel.backend == BackendKind::Cuda;
  // Under mpirun: one rank per process (World::run_mpi); the world is MPI's, and the config
  // must say the same (a silent override would change the batch split and the math).
  const std::optional<comm::MpiProcess> mpi = comm::mpi_process();
  if (mpi)
    MOEZERO_REQUIRE(world == mpi->world_size, "parallel.world_size (", world,
                    ") differs from the MPI world size (", mpi->world_size,
                    " processes from mpirun -np): pass --set parallel.world_size=", mpi->world_size,
                    " or launch as many processes as ranks");
  MOEZERO_REQUIRE(!mpi || !options.collect_params,
                  "TrainOptions::collect_params gathers every rank's parameters in one process "
                  "and is not available under mpirun: save a checkpoint (train.save_dir) and "
                  "read it with checkpoint::load_full_params");
  if (on_cuda && !mpi) {
    std::string why;
    if (!cuda_available(&why))
      MOEZERO_THROW("parallel.backend is \"cuda\" but CUDA is unavailable: ", why);
    MOEZERO_REQUIRE(world <= cuda_device_count(), "parallel.world_size (", world, ") exceeds the ",
                    cuda_device_count(),
                    " GPU(s) of this machine: parallel.backend \"cuda\" runs one rank per GPU");
  }
  MOEZERO_REQUIRE(tc.micro_batch_size % world == 0, "train.micro_batch_size (", tc.micro_batch_size,
                  ") must be divisible by parallel.world_size (", world,
                  "): it is the global number of sequences per micro-batch");
  if (!options.resume_from.empty() && !tc.init_from.empty())
    MOEZERO_THROW("train.init_from (", tc.init_from, ") and a resume from ", options.resume_from,
                  " were both given: a resumed run takes its parameters from the checkpoint; "
                  "drop one of them");
  std::unique_ptr<TokenData> data;
  if (!options.data)
    data = std::make_unique<TokenData>(cfg.data.path, cfg.model.vocab_size, cfg.model.seq_len,
                                       cfg.data.val_fraction);
  const int64_t T = cfg.model.seq_len;
  const int64_t rows = tc.micro_batch_size / world;
  const int64_t step_tokens = tc.micro_batch_size * T * tc.grad_accum_steps;
  const float loss_scale = 1.0f / static_cast<float>(step_tokens);

  std::ofstream metrics;
  const std::string metrics_path =
      options.metrics_path.empty() ? tc.metrics_file : options.metrics_path;
  if (!metrics_path.empty() && (!mpi || mpi->rank == 0)) {  // MPI: rank 0's process writes
    // A resumed run appends to the metrics of the run it continues.
    metrics.open(metrics_path, options.resume_from.empty() ? std::ios::trunc : std::ios::app);
    if (!metrics) MOEZERO_THROW("cannot write the metrics file '", metrics_path, "'");
  }

  // train.init_from: an exported directory's parameters, by group name (checked once, here).
  std::map<std::string, std::vector<float>> init_values;
  if (!tc.init_from.empty()) {
    const HfModel hf = read_hf_dir(tc.init_from);
    check_same_shape(cfg.model, hf, "train.init_from");
    for (GroupValues& g : hf_group_values(hf)) init_values.emplace(g.name, std::move(g.data));
  }
  // The trace (profile.trace / --trace): every rank's traced steps go to one file, written
  // at the end of the run, or when a rank fails, with what was recorded until then.
  const std::string trace_path =
      options.trace_path.empty() ? cfg.profile.trace : options.trace_path;
  const StepList trace_steps = StepList::parse(cfg.profile.steps, "profile.steps");
  // Under MPI every process records its own rank; rank 0's process writes the file with every
  // rank's events, sent to it at the end of the run.
  std::unique_ptr<TraceSink> trace_sink;
  if (!trace_path.empty())
    trace_sink =
        std::make_unique<TraceSink>(!mpi || mpi->rank == 0 ? trace_path : std::string(),
                                    std::string(R"({"config": )") + config_to_json(cfg, -1) + "}");

  TrainResult result;
  std::mutex result_mu;
  std::map<std::string, std::vector<float>> collected;  // collect_params: every rank's groups
  comm::WorldOptions wopt;
  wopt.comm = make_comm_options(cfg.comm_emulation, cfg.comm);

  const auto rank_main = [&](comm::RankContext& ctx) {
    Device& dev = *ctx.device;
    if (tc.memory_limit > 0) dev.allocator().set_capacity_bytes(tc.memory_limit);
    EngineStreams streams{&dev.create_stream("compute"), &dev.create_stream("gather"),
                          &dev.create_stream("reduce")};
    Stream& cs = *streams.compute;
    const ProcessGroup wg = ctx.world_group();
    auto gather = ctx.communicator(wg, "gather");
    auto reduce = ctx.communicator(wg, "reduce");
    auto misc = ctx.communicator(wg, "misc");
    // Expert parallelism: EP groups exchange tokens; EDP groups share (shard) experts.
    const int ep = static_cast<int>(cfg.parallel.ep_size);
    const ProcessGroups pgs(
        world, ep, cfg.model.num_experts > 0 ? static_cast<int>(cfg.model.num_experts) : ep);
    auto edp_gather = ctx.communicator(pgs.edp_group_of(ctx.rank), "gather");
    auto edp_reduce = ctx.communicator(pgs.edp_group_of(ctx.rank), "reduce");
    std::unique_ptr<Communicator> a2a, router;
    if (ep > 1) a2a = ctx.communicator(pgs.ep_group_of(ctx.rank), "a2a");
    if (world > 1) router = ctx.communicator(wg, "router");
    MoeStats moe_stats;
    if (mpi && trace_sink) {  // one time origin for the processes: just after a common exchange
      const int64_t here = 1;
      all_gather_words(dev, cs, *misc, {&here, 1});
      trace_sink->restart_clock();
    }
    // Times every collective and a2a wait (metrics), and traces the chosen steps.
    TraceRecorder recorder(dev, cs, ctx.rank, trace_sink.get(), trace_steps);
    MoeRuntime rt;
    rt.moe = cfg.moe;
    rt.ep_size = ep;
    rt.ep_rank = pgs.ep_rank(ctx.rank);
    rt.a2a = a2a.get();
    rt.a2a_stream = &dev.create_stream("a2a");  // token all-to-all beside compute and gathers
    rt.router = router.get();
    rt.loss_weight = 1.0f / static_cast<float>(tc.grad_accum_steps);
    rt.seed = static_cast<uint64_t>(tc.seed);
    rt.stats = &moe_stats;
    rt.trace = &recorder;
    int moe_layers = 0;
    for (int l = 0; l < static_cast<int>(cfg.model.n_layers); ++l)
      moe_layers += is_moe_layer(cfg.model, l);
    std::unique_ptr<prefetch::FrequencyModel> frequency;
    if (moe_layers > 0) {
      frequency = std::make_unique<prefetch::FrequencyModel>(
          moe_layers, static_cast<int>(cfg.model.num_experts), cfg.prefetch.ema_decay);
      rt.frequency = frequency.get();
    }
    rt.prefetch = cfg.prefetch;
    Transformer model(cfg.model, &rt);
    ZeroOptions zo;
    zo.stage = static_cast<int>(cfg.zero.stage);
    zo.compute_dtype = tc.dtype;
    zo.persistence_threshold_elems = cfg.zero.param_persistence_threshold;
    zo.prefetch_bucket_bytes = cfg.zero.prefetch_bucket_size;
    zo.max_live_bytes = cfg.zero.max_live_parameters;
    zo.reduce_bucket_bytes = cfg.zero.reduce_bucket_size;
    zo.seed = static_cast<uint64_t>(tc.seed);
    zo.check_finite = cfg.profile.check_finite;
    int64_t hook_step = 0;  // 1-based step for the hook
    if (options.grad_hook)
      zo.grad_hook = [&](const GradReadyInfo& gi) {
        options.grad_hook(GradHookInfo{ctx.rank, hook_step, gi.micro_batch, &gi.layout->spec(),
                                       gi.layout, gi.grad, gi.stream});
      };
    ZeroEngine engine(
        dev, streams, model.param_groups(),
        [&](const GroupSpec& g) {
          if (g.kind == GroupKind::Expert) return GroupComms{edp_gather.get(), edp_reduce.get()};
          return GroupComms{gather.get(), reduce.get()};
        },
        *misc, zo,
        cfg.shard_cache.capacity_bytes > 0 && moe_layers > 0
            ? std::make_unique<prefetch::ShardCache>(cfg.shard_cache)
            : nullptr);
    GradHealth health(dev, cs, *misc, engine);  // a collective: names of every rank's groups

    for (int g = 0; g < engine.group_count() && !init_values.empty(); ++g)
      engine.set_full_params_host(g, init_values.at(engine.layout(g).spec().name));
    const checkpoint::RankState ckpt{&cfg, &engine, frequency.get(), misc.get(), &dev, &cs};
    const int64_t first_step =
        options.resume_from.empty() ? 0 : checkpoint::restore(ckpt, options.resume_from);
    if (first_step > 0 && ctx.rank == 0 && options.progress)
      *options.progress << "resumed from " << options.resume_from << " after step " << first_step
                        << std::endl;
    const int64_t end_step =
        options.stop_at_step > 0 ? std::min(options.stop_at_step, tc.steps) : tc.steps;
    if (!options.resume_from.empty() && first_step >= end_step)
      MOEZERO_THROW("the checkpoint at ", options.resume_from, " is after step ", first_step,
                    ": nothing left to train up to step ", end_step,
                    " (raise train.steps to continue)");

    engine.set_trace(&recorder);
    for (Communicator* c : {gather.get(), reduce.get(), misc.get(), edp_gather.get(),
                            edp_reduce.get(), a2a.get(), router.get()})
      if (c) c->set_observer(&recorder);
    StepStatsCollector step_stats(cfg.model, engine);

    const auto t_start = std::chrono::steady_clock::now();
    EngineCounters before = engine.counters();
    for (int64_t step = first_step; step < end_step; ++step) {
      const auto t0 = std::chrono::steady_clock::now();
      hook_step = step + 1;
      dev.allocator().reset_peak();
      TensorBuffer loss(dev, DType::F32, Shape{1}, MemTag::Other, cs, "loss");
      TensorBuffer aux(dev, DType::F32, Shape{1}, MemTag::Other, cs, "aux loss");
      dev.ops().fill(cs, loss, 0.0);
      dev.ops().fill(cs, aux, 0.0);
      moe_stats.clear();
      recorder.begin_step(step + 1);
      const auto predicted = step_stats.predicted(frequency.get());
      std::deque<std::vector<int32_t>> host;  // alive until the step's host sync
      for (int64_t a = 0; a < tc.grad_accum_steps; ++a) {
        auto& tok = host.emplace_back();
        auto& tgt = host.emplace_back();
        const int64_t mb = step * tc.grad_accum_steps + a;
        if (options.data) {
          options.data(BatchRequest{mb, ctx.rank * rows, rows, T, ctx.rank}, tok, tgt);
          MOEZERO_REQUIRE(tok.size() == size_t(rows * T) && tgt.size() == size_t(rows * T),
                          "data source returned ", tok.size(), " tokens and ", tgt.size(),
                          " targets for ", rows, " rows of ", T);
          for (size_t i = 0; i < tok.size(); ++i)
            MOEZERO_REQUIRE(tok[i] >= 0 && tok[i] < cfg.model.vocab_size && tgt[i] >= -1 &&
                                tgt[i] < cfg.model.vocab_size,
                            "data source: micro-batch ", mb, " row ",
                            ctx.rank * rows + int64_t(i) / T, " position ", int64_t(i) % T,
                            ": token ", tok[i], " / target ", tgt[i],
                            " outside [0, model.vocab_size = ", cfg.model.vocab_size, ")");
        } else {
          data->batch(static_cast<uint64_t>(tc.seed), mb, ctx.rank * rows, rows, tok, tgt);
        }
        TensorBuffer tokens(dev, DType::I32, Shape{rows, T}, MemTag::Activation, cs, "tokens");
        TensorBuffer targets(dev, DType::I32, Shape{rows, T}, MemTag::Activation, cs, "targets");
        dev.memcpy_async(tokens.view().data(), tok.data(), tok.size() * 4, cs);
        dev.memcpy_async(targets.view().data(), tgt.data(), tgt.size() * 4, cs);
        const MicroBatchInfo mbi{mb, ctx.rank * rows * T, tc.micro_batch_size * T};
        model.forward(engine, cs, tokens, targets, loss_scale, loss, mbi, aux);
        model.backward(engine, cs);
        engine.finish_backward();
      }
      misc->all_reduce(loss.view().data(), loss.view().data(), 1, DType::F32, ReduceOp::Sum, cs);
      AdamWHyper h;
      h.lr = static_cast<float>(lr_at(tc, step));
      h.beta1 = static_cast<float>(tc.beta1);
      h.beta2 = static_cast<float>(tc.beta2);
      h.eps = static_cast<float>(tc.eps);
      h.weight_decay = static_cast<float>(tc.weight_decay);
      h.grad_clip = static_cast<float>(tc.grad_clip);
      StepResult sr = engine.step(h);
      float loss_host = 0.0f, aux_host = 0.0f;
      dev.memcpy_async(&loss_host, loss.view().data(), sizeof(float), cs);
      dev.memcpy_async(&aux_host, aux.view().data(), sizeof(float), cs);
      join_streams(cs, {streams.gather, streams.reduce, rt.a2a_stream});  // the step's every op
      cs.synchronize();
      const StepTiming timing = recorder.finish_step();
      // A non-finite norm is the same on every rank (computed from the same all-gathered
      // squares), so every rank takes this branch, agrees on the report, and stops or skips.
      std::optional<NonFiniteReport> nonfinite;
      if (!sr.finite) nonfinite = health.agree_nonfinite(sr, step + 1);
      const std::string stop_error =
          !sr.finite && tc.on_nonfinite == NonFinitePolicy::Stop
              ? nonfinite_message(nonfinite, step + 1, loss_host, cfg.profile.check_finite,
                                  NonFinitePolicy::Stop)
              : std::string();

      // Per-rank counters of this step, gathered to every rank (i64).
      EngineCounters now = engine.counters();
      MemStats mem = dev.allocator().stats();
      RankStepStats mine;
      mine.gathered_bytes = now.gathered_bytes - before.gathered_bytes;
      mine.reduce_scattered_bytes = now.reduce_scattered_bytes - before.reduce_scattered_bytes;
      mine.all_reduced_bytes = now.all_reduced_bytes - before.all_reduced_bytes;
      mine.a2a_bytes = moe_stats.a2a_bytes;
      mine.gathered_dense_bytes = now.gathered_dense_bytes - before.gathered_dense_bytes;
      mine.gathered_expert_bytes = now.gathered_expert_bytes - before.gathered_expert_bytes;
      mine.prefetch_hits = now.prefetch_hits - before.prefetch_hits;
      mine.prefetch_misses = now.prefetch_misses - before.prefetch_misses;
      mine.prefetch_wasted_bytes = now.prefetch_wasted_bytes - before.prefetch_wasted_bytes;
      mine.cache_hits = now.cache_hits - before.cache_hits;
      mine.cache_misses = now.cache_misses - before.cache_misses;
      mine.cache_evictions = now.cache_evictions - before.cache_evictions;
      mine.stall_ms = now.stall_ms - before.stall_ms;
      mine.peak_bytes = mem.peak_bytes;
      mine.peak_total_bytes = mem.total_peak_bytes;
      before = now;
      // One exchange per step (one host sync): the struct as raw 8-byte words (every field is
      // 8 bytes wide; checked above), then the per-expert words, whose count depends only on
      // the config; through device buffers (NCCL reads device memory only).
      const std::vector<uint64_t> expert_words = step_stats.rank_words(engine, moe_stats, timing);
      const size_t expert_n = expert_words.size(), stride = kStatWords + expert_n;
      std::vector<int64_t> mine_words(stride);
      std::memcpy(mine_words.data(), &mine, sizeof mine);
      std::memcpy(mine_words.data() + kStatWords, expert_words.data(), expert_n * 8);
      const std::vector<int64_t> words = all_gather_words(dev, cs, *misc, mine_words);
      std::vector<RankStepStats> all(static_cast<size_t>(world));
      std::vector<uint64_t> all_expert_words(expert_n * static_cast<size_t>(world));
      for (size_t r = 0; r < all.size(); ++r) {
        std::memcpy(static_cast<void*>(&all[r]), words.data() + r * stride, sizeof mine);
        std::memcpy(all_expert_words.data() + r * expert_n, words.data() + r * stride + kStatWords,
                    expert_n * 8);
      }
      auto save_time = std::chrono::steady_clock::duration::zero();  // not counted in tok/s
      if (stop_error.empty() && !tc.save_dir.empty() &&
          ((tc.save_every > 0 && (step + 1) % tc.save_every == 0) || step + 1 == end_step)) {
        const auto ts = std::chrono::steady_clock::now();
        checkpoint::save(ckpt, step + 1, options.save_fault);
        save_time = std::chrono::steady_clock::now() - ts;
        if (ctx.rank == 0 && options.progress)
          *options.progress << "checkpoint saved: " << tc.save_dir << " step " << step + 1 << " ("
                            << std::chrono::duration<double>(save_time).count() << " s)"
                            << std::endl;
      }
      if (ctx.rank != 0) {
        if (!stop_error.empty()) MOEZERO_THROW(stop_error);
        continue;
      }

      const auto t1 = std::chrono::steady_clock::now();
      StepLog s;
      s.step = step + 1;
      s.loss = loss_host;
      s.lr = h.lr;
      s.grad_norm = sr.grad_norm;
      s.aux_loss = aux_host / static_cast<double>(tc.grad_accum_steps);
      s.tokens_per_expert = moe_stats.tokens_per_expert;
      s.applied = sr.finite;
      s.tokens = step_tokens;
      s.tokens_per_s =
          double(step_tokens) / std::chrono::duration<double>(t1 - t0 - save_time).count();
      s.elapsed_s = std::chrono::duration<double>(t1 - t_start).count();
      std::vector<double> stall_ms;
      for (const RankStepStats& r : all) stall_ms.push_back(r.stall_ms);
      step_stats.sum(all_expert_words, world, moe_stats, predicted, stall_ms, s.moe_layers, s.comm);
      s.ranks = std::move(all);
      if (cfg.profile.grad_norms) s.grad_norms = health.norms(sr);
      s.nonfinite = nonfinite;
      const std::string line = step_json(s);
      if (metrics.is_open()) metrics << line << "\n" << std::flush;
      if (recorder.last_step_traced()) recorder.step_metrics(line);
      if (options.progress && (s.step % tc.log_every == 0 || s.step == first_step + 1 ||
                               s.step == end_step || !s.applied))
        print_progress(*options.progress, s, first_step, end_step, tc.steps);
      if (options.progress && !s.applied && stop_error.empty())
        *options.progress << "  "
                          << nonfinite_message(nonfinite, s.step, s.loss, cfg.profile.check_finite,
                                               NonFinitePolicy::Skip)
                          << std::endl;
      if (!stop_error.empty()) MOEZERO_THROW(stop_error);  // after its metrics line
      std::lock_guard lock(result_mu);
      result.steps.push_back(std::move(s));
    }
    if (options.collect_params && frequency) {
      std::lock_guard lock(result_mu);
      result.frequency_models.resize(static_cast<size_t>(world));
      result.frequency_models[static_cast<size_t>(ctx.rank)] = frequency->to_json().dump();
    }
    if (options.collect_params) {  // with expert parallelism each rank holds some experts
      std::vector<std::vector<float>> params;
      for (int g = 0; g < engine.group_count(); ++g) params.push_back(engine.full_params_host(g));
      std::lock_guard lock(result_mu);
      result.rank_params.resize(static_cast<size_t>(world));
      result.rank_group_names.resize(static_cast<size_t>(world));
      result.rank_params[static_cast<size_t>(ctx.rank)] = params;
      for (int g = 0; g < engine.group_count(); ++g) {
        result.rank_group_names[static_cast<size_t>(ctx.rank)].push_back(
            engine.layout(g).spec().name);
        collected.try_emplace(engine.layout(g).spec().name,
                              std::move(params[static_cast<size_t>(g)]));
      }
    }
    if (mpi && trace_sink) {  // every rank's events to rank 0's process, which writes the file
      const auto texts = all_gather_strings(
          dev, cs, *misc, ctx.rank == 0 ? std::string() : trace_sink->serialised_events());
      if (ctx.rank == 0)
        for (size_t r = 1; r < texts.size(); ++r) trace_sink->append_serialised(texts[r]);
    }
    dev.synchronize();
  };
  try {
    if (mpi)
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
  if (options.collect_params)  // every group of the model, in execution order
    for (const GroupSpec& g : full_param_groups(cfg.model)) {
      result.group_names.push_back(g.name);
      result.params.push_back(std::move(collected.at(g.name)));
    }
  return result;
}

}  // namespace moezero::moe
