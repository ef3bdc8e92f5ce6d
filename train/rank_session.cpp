// train/rank_session.cpp — one rank of a training run (rank_session.h): RankSession builds
// the rank's communicators, model and engine, then runs each step as named parts: the
// micro-batches, the optimizer step, the exchange of the step's counters, the checkpoint and,
// on rank 0, the metrics line and progress.
#include "train/rank_session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>

#include "core/error.h"
#include "core/host_exchange.h"
#include "core/ops.h"
#include "core/process_groups.h"
#include "model/transformer.h"
#include "moe/gather_strategy.h"
#include "moe/routing_trace.h"
#include "prefetch/frequency_model.h"
#include "prefetch/shard_cache.h"
#include "zero/zero_engine.h"

namespace moezero::moe {

namespace {

using Clock = std::chrono::steady_clock;

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
  os << buf;
  if (s.val_loss) {
    std::snprintf(buf, sizeof buf, " | val loss %.4f ppl %.2f", *s.val_loss, std::exp(*s.val_loss));
    os << buf;
  }
  os << std::endl;
}

AdamWHyper adamw_hyper(const TrainConfig& tc, int64_t step) {
  AdamWHyper h;
  h.lr = static_cast<float>(lr_at(tc, step));
  h.beta1 = static_cast<float>(tc.beta1);
  h.beta2 = static_cast<float>(tc.beta2);
  h.eps = static_cast<float>(tc.eps);
  h.weight_decay = static_cast<float>(tc.weight_decay);
  h.grad_clip = static_cast<float>(tc.grad_clip);
  return h;
}

int count_moe_layers(const ModelConfig& model) {
  int n = 0;
  for (int l = 0; l < static_cast<int>(model.n_layers); ++l) n += is_moe_layer(model, l);
  return n;
}

// The rank's process groups and communicators, always created in this order.
struct RankComms {
  std::unique_ptr<Communicator> gather, reduce, misc;  // world
  // Expert parallelism: EP groups exchange tokens; EDP groups share (shard) experts.
  const ProcessGroups pgs;
  std::unique_ptr<Communicator> edp_gather, edp_reduce;
  std::unique_ptr<Communicator> a2a;     // EP group; null when ep_size == 1
  std::unique_ptr<Communicator> router;  // world; null for one rank

  RankComms(comm::RankContext& ctx, const ModelConfig& model, int ep, int world)
      : gather(ctx.communicator(ctx.world_group(), "gather")),
        reduce(ctx.communicator(ctx.world_group(), "reduce")),
        misc(ctx.communicator(ctx.world_group(), "misc")),
        pgs(world, ep, model.num_experts > 0 ? static_cast<int>(model.num_experts) : ep) {
    const ProcessGroup wg = ctx.world_group();
    edp_gather = ctx.communicator(pgs.edp_group_of(ctx.rank), "gather");
    edp_reduce = ctx.communicator(pgs.edp_group_of(ctx.rank), "reduce");
    if (ep > 1) a2a = ctx.communicator(pgs.ep_group_of(ctx.rank), "a2a");
    if (world > 1) router = ctx.communicator(wg, "router");
  }
  std::vector<Communicator*> all() const {
    return {gather.get(),     reduce.get(), misc.get(),  edp_gather.get(),
            edp_reduce.get(), a2a.get(),    router.get()};
  }
};

// What a step's device work hands to its statistics and its log.
struct StepOutcome {
  AdamWHyper hyper;
  StepResult result;
  float loss = 0.0f, aux = 0.0f;  // host copies of the step's loss and summed aux loss
  StepTiming timing;
  std::optional<NonFiniteReport> nonfinite;  // agreed when the gradient norm is non-finite
  std::string stop_error;                    // train.on_nonfinite = stop hit: the error
};

// Every rank's counters of one step, from one all-gather.
struct StepExchange {
  std::vector<RankStepStats> ranks;    // (world)
  std::vector<uint64_t> expert_words;  // summed over the ranks (step_stats.h)
  int stop_signal = 0;  // TrainOptions::stop_flag seen by any rank (the largest signal): stop
};

class RankSession {
 public:
  RankSession(comm::RankContext& ctx, const TrainRun& run);
  // Steps first_step_ + 1 .. end_step_ (1-based).
  void run_steps();
  // collect_params: this rank's frequency model and full parameters into run_.results.
  void hand_over_params();
  // Under MPI with a trace: every rank's events to rank 0's process, which writes the file.
  void send_trace_to_rank0();
  Device& device() { return dev_; }

 private:
  EngineStreams create_streams();
  void build_model();
  void build_engine();
  void load_start_state();
  // Returns the agreed stop signal (0: go on).
  int run_step(int64_t step, Clock::time_point t_start);
  Clock::time_point now() const;  // the step clock (wall, or the simulated device's)
  void note_stop(int64_t step, int sig, bool saved);
  StepOutcome device_step(int64_t step, TensorBuffer& loss, TensorBuffer& aux);
  void micro_batch(int64_t mb, std::deque<std::vector<int32_t>>& host, TensorBuffer& loss,
                   TensorBuffer& aux);
  void read_batch(int64_t mb, std::vector<int32_t>& tok, std::vector<int32_t>& tgt) const;
  RankStepStats step_counters(const StepTiming& timing);
  StepExchange exchange_step_stats(const StepTiming& timing);
  std::optional<double> evaluate(int64_t step);
  Clock::duration save_checkpoint(int64_t step, const std::string& stop_error, bool stopping);
  void log_step(int64_t step, const StepOutcome& o, StepExchange ex,
                const std::vector<std::vector<double>>& predicted, Clock::duration busy,
                Clock::time_point t_start, Clock::time_point t1, std::optional<double> val_loss);

  comm::RankContext& ctx_;
  const TrainRun& run_;
  const Config& cfg_;
  const TrainConfig& tc_;
  Device& dev_;
  const int world_;
  const int64_t T_;     // seq_len
  const int64_t rows_;  // this rank's sequences per micro-batch
  const int64_t step_tokens_;
  const float loss_scale_;
  EngineStreams streams_;
  Stream& cs_;  // compute
  const int ep_;
  RankComms comms_;
  MoeStats moe_stats_;
  std::unique_ptr<TraceRecorder> recorder_;  // times collectives and a2a waits, traces steps
  MoeRuntime rt_;
  int moe_layers_ = 0;
  std::unique_ptr<prefetch::FrequencyModel> frequency_;  // null for a dense model
  std::unique_ptr<prefetch::PrefetchPlanner> planner_;   // the engine's and the MoE layers'
  std::unique_ptr<Transformer> model_;
  // Evaluation (train.eval_every): the same groups, forward only, with its own runtime (built
  // at the first evaluation).
  MoeRuntime eval_rt_;
  std::unique_ptr<Transformer> eval_model_;
  int64_t hook_step_ = 0;  // 1-based step for the grad hook
  std::unique_ptr<ZeroEngine> engine_;
  std::unique_ptr<GradHealth> health_;
  checkpoint::RankState ckpt_;
  int64_t first_step_ = 0, end_step_ = 0;
  std::unique_ptr<StepStatsCollector> step_stats_;
  std::unique_ptr<RoutingTrace> routing_trace_;    // profile.routing_trace; null: off
  std::unique_ptr<RoutingReplay> routing_replay_;  // moe.routing_replay; null: off
  EngineCounters before_;  // the engine's counters at the end of the last step
};

RankSession::RankSession(comm::RankContext& ctx, const TrainRun& run)
    : ctx_(ctx),
      run_(run),
      cfg_(run.cfg),
      tc_(run.cfg.train),
      dev_(*ctx.device),
      world_(static_cast<int>(run.cfg.parallel.world_size)),
      T_(run.cfg.model.seq_len),
      rows_(tc_.micro_batch_size / world_),
      step_tokens_(tc_.micro_batch_size * T_ * tc_.grad_accum_steps),
      loss_scale_(1.0f / static_cast<float>(step_tokens_)),
      streams_(create_streams()),
      cs_(*streams_.compute),
      ep_(static_cast<int>(run.cfg.parallel.ep_size)),
      comms_(ctx, run.cfg.model, ep_, world_) {
  // Under MPI, one time origin for the processes: just after a common exchange.
  if (run_.under_mpi && run_.trace_sink) {
    const int64_t here = 1;
    all_gather_words(dev_, cs_, *comms_.misc, {&here, 1});
    run_.trace_sink->restart_clock();
  }
  recorder_ =
      std::make_unique<TraceRecorder>(dev_, cs_, ctx_.rank, run_.trace_sink, run_.trace_steps);
  build_model();
  build_engine();
  load_start_state();
  engine_->set_trace(recorder_.get());
  for (Communicator* c : comms_.all())
    if (c) c->set_observer(recorder_.get());
  step_stats_ = std::make_unique<StepStatsCollector>(cfg_.model, *engine_);
  if (!cfg_.profile.routing_trace.empty()) {
    std::vector<int> moe_layer_ids;
    for (int l = 0; l < static_cast<int>(cfg_.model.n_layers); ++l)
      if (is_moe_layer(cfg_.model, l)) moe_layer_ids.push_back(l);
    moe_stats_.record_local_counts = true;
    routing_trace_ = std::make_unique<RoutingTrace>(cfg_, std::move(moe_layer_ids), ctx_.rank == 0,
                                                    !run_.options.resume_from.empty());
  }
}

EngineStreams RankSession::create_streams() {
  if (tc_.memory_limit > 0) dev_.allocator().set_capacity_bytes(tc_.memory_limit);
  return EngineStreams{&dev_.create_stream("compute"), &dev_.create_stream("gather"),
                       &dev_.create_stream("reduce")};
}

void RankSession::build_model() {
  rt_.moe = cfg_.moe;
  rt_.ep_size = ep_;
  rt_.ep_rank = comms_.pgs.ep_rank(ctx_.rank);
  rt_.a2a = comms_.a2a.get();
  rt_.a2a_stream = &dev_.create_stream("a2a");  // token all-to-all beside compute and gathers
  rt_.router = comms_.router.get();
  rt_.loss_weight = 1.0f / static_cast<float>(tc_.grad_accum_steps);
  rt_.seed = static_cast<uint64_t>(tc_.seed);
  rt_.stats = &moe_stats_;
  rt_.trace = recorder_.get();
  moe_layers_ = count_moe_layers(cfg_.model);
  if (!cfg_.moe.routing_replay.empty()) {
    std::vector<int> moe_layer_ids;
    for (int l = 0; l < static_cast<int>(cfg_.model.n_layers); ++l)
      if (is_moe_layer(cfg_.model, l)) moe_layer_ids.push_back(l);
    routing_replay_ = std::make_unique<RoutingReplay>(cfg_, moe_layer_ids, rows_ * T_, ctx_.rank);
    rt_.replay = routing_replay_.get();
  }
  rt_.routing_source = run_.options.routing_source;  // simulated backend only
  if (moe_layers_ > 0) {
    frequency_ = std::make_unique<prefetch::FrequencyModel>(
        moe_layers_, static_cast<int>(cfg_.model.num_experts), cfg_.prefetch.ema_decay);
    rt_.frequency = frequency_.get();
  }
  const double gbps =
      cfg_.prefetch.link_gbps > 0.0 ? cfg_.prefetch.link_gbps : cfg_.comm_emulation.link_gbps;
  planner_ = std::make_unique<prefetch::PrefetchPlanner>(
      cfg_.prefetch, frequency_.get(),
      prefetch::link_costs(gbps, cfg_.comm_emulation.latency_us, comms_.edp_gather->size()));
  rt_.planner = planner_.get();
  rt_.gather = &moe::gather_strategy(cfg_.zero.moe_gather);
  rt_.reshard_after_forward = cfg_.zero.reshard_after_forward;
  model_ = std::make_unique<Transformer>(cfg_.model, &rt_);
}

void RankSession::build_engine() {
  ZeroOptions zo;
  zo.stage = static_cast<int>(cfg_.zero.stage);
  zo.compute_dtype = tc_.dtype;
  zo.persistence_threshold_elems = cfg_.zero.param_persistence_threshold;
  zo.shard_single_rank = cfg_.zero.shard_single_rank;
  zo.keep_dense_bytes = cfg_.zero.keep_dense_bytes;
  zo.prefetch_bucket_bytes = cfg_.zero.prefetch_bucket_size;
  zo.max_live_bytes = cfg_.zero.max_live_parameters;
  zo.reduce_bucket_bytes = cfg_.zero.reduce_bucket_size;
  zo.micro_batches_per_step = tc_.grad_accum_steps;
  zo.seed = static_cast<uint64_t>(tc_.seed);
  zo.check_finite = cfg_.profile.check_finite;
  zo.materialize = !run_.options.run_world;  // simulated: states counted, not filled
  if (run_.options.grad_hook)
    zo.grad_hook = [this](const GradReadyInfo& gi) {
      run_.options.grad_hook(GradHookInfo{ctx_.rank, hook_step_, gi.micro_batch, &gi.layout->spec(),
                                          gi.layout, gi.grad, gi.stream});
    };
  engine_ = std::make_unique<ZeroEngine>(
      dev_, streams_, model_->param_groups(),
      [this](const GroupSpec& g) {
        if (g.kind == GroupKind::Expert)
          return GroupComms{comms_.edp_gather.get(), comms_.edp_reduce.get()};
        return GroupComms{comms_.gather.get(), comms_.reduce.get()};
      },
      *comms_.misc, zo,
      cfg_.shard_cache.capacity_bytes > 0 && moe_layers_ > 0 && rt_.gather->uses_shard_cache()
          ? std::make_unique<prefetch::ShardCache>(cfg_.shard_cache)
          : nullptr,
      planner_.get());
  // A collective: names of every rank's groups.
  health_ = std::make_unique<GradHealth>(dev_, cs_, *comms_.misc, comms_.a2a.get(), *engine_);
}

// train.init_from's parameters, then the checkpoint of a resume; sets first_step_, end_step_.
void RankSession::load_start_state() {
  for (int g = 0; g < engine_->group_count() && !run_.init_values.empty(); ++g)
    engine_->set_full_params_host(g, run_.init_values.at(engine_->layout(g).spec().name));
  ckpt_ = checkpoint::RankState{&cfg_, engine_.get(), frequency_.get(), comms_.misc.get(),
                                &dev_, &cs_,          model_.get()};
  const TrainOptions& options = run_.options;
  first_step_ = options.resume_from.empty() ? 0 : checkpoint::restore(ckpt_, options.resume_from);
  if (first_step_ > 0 && ctx_.rank == 0 && options.progress)
    *options.progress << "resumed from " << options.resume_from << " after step " << first_step_
                      << std::endl;
  end_step_ = options.stop_at_step > 0 ? std::min(options.stop_at_step, tc_.steps) : tc_.steps;
  if (!options.resume_from.empty() && first_step_ >= end_step_)
    MOEZERO_USER_ERROR("the checkpoint at ", options.resume_from, " is after step ", first_step_,
                       ": nothing left to train up to step ", end_step_,
                       " (raise train.steps to continue)");
}

// The step clock: the wall clock, or the simulated device's virtual host clock.
Clock::time_point RankSession::now() const {
  if (const std::optional<double> v = dev_.virtual_time_s())
    return Clock::time_point(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*v)));
  return Clock::now();
}

void RankSession::run_steps() {
  const auto t_start = now();
  before_ = engine_->counters();
  for (int64_t step = first_step_; step < end_step_; ++step) {
    const int sig = run_step(step, t_start);
    if (sig != 0 && step + 1 < end_step_) {  // a stop at the last step is a normal end
      note_stop(step + 1, sig, !tc_.save_dir.empty());
      return;
    }
  }
}

// Every rank: the run stopped after 1-based `step` on signal `sig` (the result's stop fields).
void RankSession::note_stop(int64_t step, int sig, bool saved) {
  if (ctx_.rank == 0 && run_.options.progress)
    *run_.options.progress << "stopped after step " << step << " (signal " << sig << ")"
                           << (saved ? ", checkpoint saved in " + tc_.save_dir : std::string())
                           << std::endl;
  std::lock_guard lock(run_.results.mu);
  run_.results.result.stop_signal = sig;
  run_.results.result.stopped_after_step = step;
  run_.results.result.stop_saved = saved;
}

// 0-based `step`: the device work, the counters' exchange, the checkpoint, then rank 0 logs.
int RankSession::run_step(int64_t step, Clock::time_point t_start) {
  const auto t0 = now();
  hook_step_ = step + 1;
  dev_.allocator().reset_peak();
  TensorBuffer loss(dev_, DType::F32, Shape{1}, MemTag::Other, cs_, "loss");
  TensorBuffer aux(dev_, DType::F32, Shape{1}, MemTag::Other, cs_, "aux loss");
  dev_.ops().fill(cs_, loss, 0.0);
  dev_.ops().fill(cs_, aux, 0.0);
  moe_stats_.clear();
  recorder_->begin_step(step + 1);
  const auto predicted = step_stats_->predicted(frequency_.get());
  const StepOutcome o = device_step(step, loss, aux);
  StepExchange ex = exchange_step_stats(o.timing);
  const int stop = ex.stop_signal;
  // The routing trace reads this step's counts before evaluation runs (which records none).
  if (routing_trace_) routing_trace_->record_step(step + 1, moe_stats_, dev_, cs_, *comms_.misc);
  const auto te = now();
  // Not when stopping on a signal (agreed: every rank skips it alike).
  const std::optional<double> val_loss =
      o.stop_error.empty() && stop == 0 ? evaluate(step) : std::nullopt;
  const Clock::duration eval_time = now() - te;                                      // not in tok/s
  const Clock::duration save_time = save_checkpoint(step, o.stop_error, stop != 0);  // not in tok/s
  if (ctx_.rank != 0) {
    if (!o.stop_error.empty()) MOEZERO_USER_ERROR(o.stop_error);
    return stop;
  }
  const auto t1 = now();
  log_step(step, o, std::move(ex), predicted, t1 - t0 - save_time - eval_time, t_start, t1,
           val_loss);
  return stop;
}

// The micro-batches, the loss all-reduce and the optimizer step, up to the step's host sync.
// [in,out] loss, aux: zeroed by the caller; the micro-batches add to them.
StepOutcome RankSession::device_step(int64_t step, TensorBuffer& loss, TensorBuffer& aux) {
  std::deque<std::vector<int32_t>> host;  // alive until the step's host sync
  for (int64_t a = 0; a < tc_.grad_accum_steps; ++a)
    micro_batch(step * tc_.grad_accum_steps + a, host, loss, aux);
  comms_.misc->all_reduce(loss.view().data(), loss.view().data(), 1, DType::F32, ReduceOp::Sum,
                          cs_);
  StepOutcome o;
  o.hyper = adamw_hyper(tc_, step);
  o.result = engine_->step(o.hyper);
  dev_.memcpy_async(&o.loss, loss.view().data(), sizeof(float), cs_);
  dev_.memcpy_async(&o.aux, aux.view().data(), sizeof(float), cs_);
  join_streams(cs_, {streams_.gather, streams_.reduce, rt_.a2a_stream},  // the step's every op
               recorder_.get());
  cs_.synchronize();
  o.timing = recorder_->finish_step();
  model_->update_expert_bias();  // moe.expert_bias_update_rate (from the agreed loads)
  // A non-finite norm is the same on every rank (computed from the same all-gathered
  // squares), so every rank takes this branch, agrees on the report, and stops or skips.
  if (!o.result.finite) o.nonfinite = health_->agree_nonfinite(o.result, step + 1);
  if (!o.result.finite && tc_.on_nonfinite == NonFinitePolicy::Stop)
    o.stop_error = nonfinite_message(o.nonfinite, step + 1, o.loss, cfg_.profile.check_finite,
                                     NonFinitePolicy::Stop);
  return o;
}

// Global micro-batch `mb`: this rank's rows, forward and backward. [in,out] host: keeps the
// host copies of tokens and targets alive until the step's host sync.
void RankSession::micro_batch(int64_t mb, std::deque<std::vector<int32_t>>& host,
                              TensorBuffer& loss, TensorBuffer& aux) {
  auto& tok = host.emplace_back();
  auto& tgt = host.emplace_back();
  read_batch(mb, tok, tgt);
  TensorBuffer tokens(dev_, DType::I32, Shape{rows_, T_}, MemTag::Activation, cs_, "tokens");
  TensorBuffer targets(dev_, DType::I32, Shape{rows_, T_}, MemTag::Activation, cs_, "targets");
  dev_.memcpy_async(tokens.view().data(), tok.data(), tok.size() * 4, cs_);
  dev_.memcpy_async(targets.view().data(), tgt.data(), tgt.size() * 4, cs_);
  const MicroBatchInfo mbi{mb, ctx_.rank * rows_ * T_, tc_.micro_batch_size * T_};
  model_->forward(*engine_, cs_, tokens, targets, loss_scale_, loss, mbi, aux);
  model_->backward(*engine_, cs_);
  engine_->finish_backward();
}

// This rank's rows of global micro-batch `mb`, from the custom source (checked) or the data.
void RankSession::read_batch(int64_t mb, std::vector<int32_t>& tok,
                             std::vector<int32_t>& tgt) const {
  const int64_t row0 = ctx_.rank * rows_;
  if (!run_.options.data) {
    run_.data->batch(static_cast<uint64_t>(tc_.seed), mb, row0, rows_, tok, tgt);
    return;
  }
  run_.options.data(BatchRequest{mb, row0, rows_, T_, ctx_.rank}, tok, tgt);
  MOEZERO_REQUIRE(tok.size() == size_t(rows_ * T_) && tgt.size() == size_t(rows_ * T_),
                  "data source returned ", tok.size(), " tokens and ", tgt.size(), " targets for ",
                  rows_, " rows of ", T_);
  const int64_t vocab = cfg_.model.vocab_size;
  for (size_t i = 0; i < tok.size(); ++i)
    MOEZERO_REQUIRE(tok[i] >= 0 && tok[i] < vocab && tgt[i] >= -1 && tgt[i] < vocab,
                    "data source: micro-batch ", mb, " row ", row0 + int64_t(i) / T_, " position ",
                    int64_t(i) % T_, ": token ", tok[i], " / target ", tgt[i],
                    " outside [0, model.vocab_size = ", vocab, ")");
}

// This rank's counters of the step; the engine's counters now are the next step's baseline.
RankStepStats RankSession::step_counters(const StepTiming& timing) {
  const EngineCounters now = engine_->counters();
  const RankStepStats mine =
      rank_step_stats(now, before_, moe_stats_, dev_.allocator().stats(), timing);
  before_ = now;
  return mine;
}

// One exchange per step: every rank's struct as raw 8-byte words and its stop signal (0: none;
// every rank stops after the same step when any saw one) by an all-gather, then the per-expert
// words, whose count depends only on the config, summed over the ranks by an all-reduce (their
// size does not grow with the world); through device buffers (NCCL reads device memory only).
StepExchange RankSession::exchange_step_stats(const StepTiming& timing) {
  const RankStepStats mine = step_counters(timing);
  const std::vector<uint64_t> expert_words = step_stats_->rank_words(*engine_, moe_stats_, timing);
  const size_t stride = kRankStepStatsWords + 1;
  std::vector<int64_t> mine_words(stride);
  to_words(mine, mine_words.data());
  mine_words[stride - 1] = run_.options.stop_flag ? run_.options.stop_flag->load() : 0;
  const std::vector<int64_t> words = all_gather_words(dev_, cs_, *comms_.misc, mine_words);
  StepExchange ex;
  ex.ranks.resize(static_cast<size_t>(world_));
  for (size_t r = 0; r < ex.ranks.size(); ++r) {
    ex.ranks[r] = from_words(words.data() + r * stride);
    ex.stop_signal = std::max(ex.stop_signal, static_cast<int>(words[r * stride + stride - 1]));
  }
  std::vector<int64_t> signed_words(expert_words.begin(), expert_words.end());
  const std::vector<int64_t> summed = all_reduce_words(dev_, cs_, *comms_.misc, signed_words);
  ex.expert_words.assign(summed.begin(), summed.end());
  return ex;
}

// The validation loss after 0-based `step` when train.eval_every (or the run's last step) says
// so: the mean loss over every target of train.eval_batches held-out micro-batches of every
// rank (TokenData::val_batch: the same tokens at every world size). Forward only, on every rank
// with the same collectives in the same order (parameter gathers, MoE agreement and token
// exchange, one loss all-reduce). The evaluation model's runtime has no router jitter, no
// prefetch model or statistics (the training's routing history stays its own) and releases
// every expert after forward (fsdp gathers as leaf). Its traffic is counted in the next step's
// counters (groups it prefetched may serve that step), and the engine's recorded fetch order
// sees its acquires (the next step may replay less). Returns the loss on every rank; nullopt
// when no evaluation is due.
std::optional<double> RankSession::evaluate(int64_t step) {
  const bool due =
      tc_.eval_every > 0 && ((step + 1) % tc_.eval_every == 0 || step + 1 == end_step_);
  if (!due) return std::nullopt;
  if (!eval_model_) {
    eval_rt_ = rt_;
    eval_rt_.moe.router_jitter = 0.0;
    eval_rt_.stats = nullptr;
    eval_rt_.replay = nullptr;  // evaluation routes by the router
    eval_rt_.frequency = nullptr;
    eval_rt_.trace = nullptr;
    eval_rt_.gather = &moe::gather_strategy(rt_.gather->evaluation_strategy());
    eval_rt_.reshard_after_forward = true;
    eval_model_ = std::make_unique<Transformer>(cfg_.model, &eval_rt_);
  }
  const int64_t batches = tc_.eval_batches, global_rows = tc_.micro_batch_size;
  const float scale = 1.0f / static_cast<float>(batches * global_rows * T_);
  TensorBuffer loss(dev_, DType::F32, Shape{1}, MemTag::Other, cs_, "val loss");
  dev_.ops().fill(cs_, loss, 0.0);
  std::deque<std::vector<int32_t>> host;  // alive until the sync below
  for (int64_t b = 0; b < batches; ++b) {
    auto& tok = host.emplace_back();
    auto& tgt = host.emplace_back();
    run_.data->val_batch(b, global_rows, ctx_.rank * rows_, rows_, tok, tgt);
    TensorBuffer tokens(dev_, DType::I32, Shape{rows_, T_}, MemTag::Activation, cs_, "tokens");
    TensorBuffer targets(dev_, DType::I32, Shape{rows_, T_}, MemTag::Activation, cs_, "targets");
    dev_.memcpy_async(tokens.view().data(), tok.data(), tok.size() * 4, cs_);
    dev_.memcpy_async(targets.view().data(), tgt.data(), tgt.size() * 4, cs_);
    const MicroBatchInfo mbi{b, ctx_.rank * rows_ * T_, global_rows * T_};
    eval_model_->forward(*engine_, cs_, tokens, targets, scale, loss, mbi);
    eval_model_->discard_activations();
  }
  comms_.misc->all_reduce(loss.view().data(), loss.view().data(), 1, DType::F32, ReduceOp::Sum,
                          cs_);
  float host_loss = 0.0f;
  dev_.memcpy_async(&host_loss, loss.view().data(), sizeof(float), cs_);
  join_streams(cs_, {streams_.gather, streams_.reduce, rt_.a2a_stream}, nullptr);
  cs_.synchronize();
  return host_loss;
}

// Saves after 0-based `step` when train.save_every, the run's last step or a stop signal
// (`stopping`) says so (not after a step whose non-finite gradient stops the run). Returns the
// time it took (zero when not saving).
Clock::duration RankSession::save_checkpoint(int64_t step, const std::string& stop_error,
                                             bool stopping) {
  const bool due =
      (tc_.save_every > 0 && (step + 1) % tc_.save_every == 0) || step + 1 == end_step_ || stopping;
  if (!stop_error.empty() || tc_.save_dir.empty() || !due) return Clock::duration::zero();
  const auto ts = Clock::now();
  checkpoint::save(ckpt_, step + 1, run_.options.save_fault);
  const Clock::duration save_time = Clock::now() - ts;
  if (ctx_.rank == 0 && run_.options.progress)
    *run_.options.progress << "checkpoint saved: " << tc_.save_dir << " step " << step + 1 << " ("
                           << std::chrono::duration<double>(save_time).count() << " s)"
                           << std::endl;
  return save_time;
}

// Rank 0: the step's StepLog, its metrics line (file and trace), progress, then the result
// (or the stop error, after the metrics line). [in] busy: the step's time, save excluded.
void RankSession::log_step(int64_t step, const StepOutcome& o, StepExchange ex,
                           const std::vector<std::vector<double>>& predicted, Clock::duration busy,
                           Clock::time_point t_start, Clock::time_point t1,
                           std::optional<double> val_loss) {
  StepLog s;
  s.step = step + 1;
  s.val_loss = val_loss;
  s.loss = o.loss;
  s.lr = o.hyper.lr;
  s.grad_norm = o.result.grad_norm;
  s.aux_loss = o.aux / static_cast<double>(tc_.grad_accum_steps);
  s.tokens_per_expert = moe_stats_.tokens_per_expert;
  s.applied = o.result.finite;
  s.tokens = step_tokens_;
  s.tokens_per_s = double(step_tokens_) / std::chrono::duration<double>(busy).count();
  s.elapsed_s = std::chrono::duration<double>(t1 - t_start).count();
  step_stats_->sum(ex.expert_words, moe_stats_, predicted, s.moe_layers, s.comm);
  s.ranks = std::move(ex.ranks);
  if (cfg_.profile.grad_norms) s.grad_norms = health_->norms(o.result);
  s.nonfinite = o.nonfinite;
  const std::string line = step_json(s);
  if (run_.metrics) {  // flushed per step: a crash keeps every finished step's line
    run_.metrics->write(line + "\n");
    run_.metrics->flush();
  }
  if (recorder_->last_step_traced()) recorder_->step_metrics(line);
  const TrainOptions& options = run_.options;
  if (options.progress && (s.step % tc_.log_every == 0 || s.step == first_step_ + 1 ||
                           s.step == end_step_ || !s.applied || s.val_loss))
    print_progress(*options.progress, s, first_step_, end_step_, tc_.steps);
  if (options.progress && !s.applied && o.stop_error.empty())
    *options.progress << "  "
                      << nonfinite_message(o.nonfinite, s.step, s.loss, cfg_.profile.check_finite,
                                           NonFinitePolicy::Skip)
                      << std::endl;
  if (!o.stop_error.empty()) MOEZERO_USER_ERROR(o.stop_error);  // after its metrics line
  std::lock_guard lock(run_.results.mu);
  run_.results.result.steps.push_back(std::move(s));
}

void RankSession::hand_over_params() {
  if (!run_.options.collect_params) return;
  RankResults& out = run_.results;
  const size_t rank = static_cast<size_t>(ctx_.rank);
  if (frequency_) {
    std::lock_guard lock(out.mu);
    out.result.frequency_models.resize(static_cast<size_t>(world_));
    out.result.frequency_models[rank] = frequency_->to_json().dump();
  }
  // With expert parallelism each rank holds some experts.
  std::vector<std::vector<float>> params;
  for (int g = 0; g < engine_->group_count(); ++g) params.push_back(engine_->full_params_host(g));
  std::lock_guard lock(out.mu);
  out.result.rank_params.resize(static_cast<size_t>(world_));
  out.result.rank_group_names.resize(static_cast<size_t>(world_));
  out.result.rank_params[rank] = params;
  for (int g = 0; g < engine_->group_count(); ++g) {
    const std::string& name = engine_->layout(g).spec().name;
    out.result.rank_group_names[rank].push_back(name);
    out.collected.try_emplace(name, std::move(params[static_cast<size_t>(g)]));
  }
}

void RankSession::send_trace_to_rank0() {
  if (!run_.under_mpi || !run_.trace_sink) return;
  TraceSink& sink = *run_.trace_sink;
  const auto texts = all_gather_strings(dev_, cs_, *comms_.misc,
                                        ctx_.rank == 0 ? std::string() : sink.serialised_events());
  if (ctx_.rank == 0)
    for (size_t r = 1; r < texts.size(); ++r) sink.append_serialised(texts[r]);
}

}  // namespace

void run_rank(comm::RankContext& ctx, const TrainRun& run) {
  RankSession session(ctx, run);
  session.run_steps();
  session.hand_over_params();
  session.send_trace_to_rank0();
  session.device().synchronize();
}

}  // namespace moezero::moe
