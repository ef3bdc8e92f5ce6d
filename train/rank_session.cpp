// train/rank_session.cpp — one rank of a training run (rank_session.h): RankSession builds
// the rank's communicators, model and engine, then runs each step as named parts: the
// micro-batches, the optimizer step, the exchange of the step's counters, the checkpoint and,
// on rank 0, the metrics line and progress.
//
// The class and its shared state are rank_session_impl.h; construction rank_session_build.cpp, a
// step's parts rank_session_step.cpp; here the run: the steps, rank 0's metrics line and
// progress, and what the rank hands back.
#include "train/rank_session.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/host_exchange.h"
#include "train/rank_session_impl.h"

namespace moezero::train::session_detail {

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
  os << buf;
  if (s.val_loss) {
    std::snprintf(buf, sizeof buf, " | val loss %.4f ppl %.2f", *s.val_loss, std::exp(*s.val_loss));
    os << buf;
  }
  os << std::endl;
}

}  // namespace

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
  link_before_ = link_now();
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

}  // namespace moezero::train::session_detail

namespace moezero::train {

void run_rank(comm::RankContext& ctx, const TrainRun& run) {
  session_detail::RankSession session(ctx, run);
  session.run_steps();
  session.hand_over_params();
  session.send_trace_to_rank0();
  session.device().synchronize();
}

}  // namespace moezero::train
