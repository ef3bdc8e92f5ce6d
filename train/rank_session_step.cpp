// train/rank_session_step.cpp — one step of a RankSession as named parts: the micro-batches and
// the optimizer step (device_step), the exchange of every rank's counters, the evaluation on
// held-out data and the checkpoint, in the same collective order on every rank.
#include <algorithm>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "comm/local/local_world.h"
#include "core/error.h"
#include "core/host_exchange.h"
#include "core/ops.h"
#include "moe/gather_strategy.h"
#include "prefetch/link_idle.h"
#include "train/rank_session_impl.h"

namespace moezero::train::session_detail {

namespace {

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

}  // namespace

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
  agree_free_link(ex);
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
  join_streams(cs_,
               {streams_.gather, streams_.reduce, rt_.comms.a2a_stream},  // the step's every op
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
  const moe::MicroBatchInfo mbi{mb, ctx_.rank * rows_ * T_, tc_.micro_batch_size * T_};
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
  const comm::LinkBytes link = link_now();
  const RankStepStats mine = rank_step_stats(now, before_, moe_stats_, dev_.allocator().stats(),
                                             timing, link, link_before_);
  before_ = now;
  link_before_ = link;
  return mine;
}

comm::LinkBytes RankSession::link_now() const {
  return ctx_.world ? ctx_.world->link_bytes(ctx_.rank) : comm::LinkBytes{};
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

// The next step's free link time per expert plan (prefetch.speculate=idle), from every rank's
// idle link time of this step as the statistics all-gather delivered it: the same value on
// every rank (prefetch/link_idle.h), whatever its own clock measured.
void RankSession::agree_free_link(const StepExchange& ex) {
  if (!planner_->measures_idle_link()) return;
  std::vector<double> idle;
  for (const RankStepStats& r : ex.ranks) idle.push_back(r.idle_link_ms);
  planner_->set_free_link_ns(
      prefetch::agreed_free_link_ns(idle, moe_layers_ * tc_.grad_accum_steps));
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
    eval_rt_.options.moe.router_jitter = 0.0;
    eval_rt_.report.stats = nullptr;
    eval_rt_.routing.replay = nullptr;  // evaluation routes by the router
    eval_rt_.planning.frequency = nullptr;
    eval_rt_.planning.pregate = nullptr;
    eval_rt_.report.trace = nullptr;
    eval_rt_.options.gather = &moe::gather_strategy(rt_.options.gather->evaluation_strategy());
    eval_rt_.options.reshard_after_forward = true;
    eval_model_ = std::make_unique<model::Transformer>(cfg_.model, &eval_rt_);
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
    const moe::MicroBatchInfo mbi{b, ctx_.rank * rows_ * T_, global_rows * T_};
    eval_model_->forward(*engine_, cs_, tokens, targets, scale, loss, mbi);
    eval_model_->discard_activations();
  }
  comms_.misc->all_reduce(loss.view().data(), loss.view().data(), 1, DType::F32, ReduceOp::Sum,
                          cs_);
  float host_loss = 0.0f;
  dev_.memcpy_async(&host_loss, loss.view().data(), sizeof(float), cs_);
  join_streams(cs_, {streams_.gather, streams_.reduce, rt_.comms.a2a_stream}, nullptr);
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

}  // namespace moezero::train::session_detail
