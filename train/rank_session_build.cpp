// train/rank_session_build.cpp — a RankSession's construction: the rank's streams and
// communicators, its MoE runtime and model, its ZeRO engine, then the start state (train.init_from
// or the checkpoint of a resume), the trace recorder and the step statistics.
#include <algorithm>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/host_exchange.h"
#include "moe/gather_strategy.h"
#include "prefetch/shard_cache.h"
#include "train/rank_session_impl.h"

namespace moezero::train::session_detail {

namespace {

int count_moe_layers(const ModelConfig& model) {
  int n = 0;
  for (int l = 0; l < static_cast<int>(model.n_layers); ++l) n += model::is_moe_layer(model, l);
  return n;
}

}  // namespace

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
      comms_(ctx, run.cfg, ep_, world_) {
  // Under MPI, one time origin for the processes: just after a common exchange.
  if (run_.under_mpi && run_.trace_sink) {
    const int64_t here = 1;
    all_gather_words(dev_, cs_, *comms_.misc, {&here, 1});
    run_.trace_sink->restart_clock();
  }
  recorder_ =
      std::make_unique<TraceRecorder>(dev_, cs_, ctx_.rank, run_.trace_sink, run_.trace_steps);
  agree_auto_sizes();
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
      if (model::is_moe_layer(cfg_.model, l)) moe_layer_ids.push_back(l);
    moe_stats_.record_local_counts = true;
    routing_trace_ = std::make_unique<moe::RoutingTrace>(
        cfg_, std::move(moe_layer_ids), ctx_.rank == 0, !run_.options.resume_from.empty());
  }
}

// The "auto" budgets (shard_cache.capacity_bytes, zero.keep_dense_bytes) resolve from each
// process's memory: under MPI the processes may differ (hosts, GPUs, free memory), so they take
// the smallest of each. Ranks as threads or simulated share one resolution.
void RankSession::agree_auto_sizes() {
  cache_capacity_ = cfg_.shard_cache.capacity_bytes;
  keep_dense_ = cfg_.zero.keep_dense_bytes;
  if (!run_.under_mpi || !run_.auto_sizes) return;
  const auto word = [](uint64_t v) {
    return static_cast<int64_t>(std::min<uint64_t>(v, INT64_MAX));
  };
  const int64_t mine[2] = {word(cache_capacity_), word(keep_dense_)};
  const std::vector<int64_t> all = all_gather_words(dev_, cs_, *comms_.misc, mine);
  for (size_t i = 0; i + 1 < all.size(); i += 2) {
    cache_capacity_ = std::min(cache_capacity_, static_cast<uint64_t>(all[i]));
    keep_dense_ = std::min(keep_dense_, static_cast<uint64_t>(all[i + 1]));
  }
}

EngineStreams RankSession::create_streams() {
  if (tc_.memory_limit > 0) dev_.allocator().set_capacity_bytes(tc_.memory_limit);
  return EngineStreams{&dev_.create_stream("compute"), &dev_.create_stream("gather"),
                       &dev_.create_stream("reduce")};
}

void RankSession::build_model() {
  rt_.options = {.moe = cfg_.moe,
                 .loss_weight = 1.0f / static_cast<float>(tc_.grad_accum_steps),
                 .seed = static_cast<uint64_t>(tc_.seed),
                 .gather = &moe::gather_strategy(cfg_.zero.moe_gather),
                 .reshard_after_forward = cfg_.zero.reshard_after_forward,
                 .reduce_every_expert = cfg_.zero.expert_grads == ExpertGrads::All};
  rt_.comms = {.ep_size = ep_,
               .ep_rank = comms_.pgs.ep_rank(ctx_.rank),
               .a2a = comms_.a2a.get(),
               .a2a_stream = &dev_.create_stream("a2a"),  // token all-to-all beside the others
               .router = comms_.router.get()};
  rt_.report = {.stats = &moe_stats_, .trace = recorder_.get()};
  moe_layers_ = count_moe_layers(cfg_.model);
  if (!cfg_.moe.routing_replay.empty()) {
    std::vector<int> moe_layer_ids;
    for (int l = 0; l < static_cast<int>(cfg_.model.n_layers); ++l)
      if (model::is_moe_layer(cfg_.model, l)) moe_layer_ids.push_back(l);
    routing_replay_ =
        std::make_unique<moe::RoutingReplay>(cfg_, moe_layer_ids, rows_ * T_, ctx_.rank);
  }
  rt_.routing = {.replay = routing_replay_.get(),
                 .source = run_.options.routing_source};  // source: simulated backend only
  if (moe_layers_ > 0)
    frequency_ = std::make_unique<prefetch::FrequencyModel>(
        moe_layers_, static_cast<int>(cfg_.model.num_experts), cfg_.prefetch.ema_decay);
  planner_ = std::make_unique<prefetch::PrefetchPlanner>(
      cfg_.prefetch, frequency_.get(),
      prefetch::link_costs(cfg_.prefetch, cfg_.comm_emulation, comms_.edp_gather->size()));
  // prefetch.pregate: needs a layer after the first, the real router input (not simulated) and
  // experts gathered by routing (stage 3, moe_gather=experts); otherwise nothing would read it.
  if (cfg_.prefetch.pregate && moe_layers_ >= 2 && run_.options.routing_source == nullptr &&
      cfg_.zero.stage == 3 && cfg_.zero.moe_gather == MoeGather::Experts)
    pregate_ = std::make_unique<prefetch::PregateModel>(
        moe_layers_, static_cast<int>(cfg_.model.num_experts), cfg_.prefetch.ema_decay);
  rt_.planning = {
      .frequency = frequency_.get(), .planner = planner_.get(), .pregate = pregate_.get()};
  model_ = std::make_unique<model::Transformer>(cfg_.model, &rt_);
  model_->set_activation_checkpointing(cfg_.train.activation_checkpointing);
}

void RankSession::build_engine() {
  ZeroOptions zo = ZeroOptions::of(cfg_);
  zo.zero.keep_dense_bytes = keep_dense_;    // as agreed (agree_auto_sizes)
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
          return GroupComms{comms_.edp_gather.get(), comms_.edp_reduce.get(),
                            comms_.edp_reduce_intra.get(), comms_.edp_reduce_cross.get(),
                            comms_.edp_hpz_gather.get()};
        return GroupComms{comms_.gather.get(), comms_.reduce.get(), comms_.reduce_intra.get(),
                          comms_.reduce_cross.get(), comms_.hpz_gather.get()};
      },
      *comms_.misc, zo,
      cache_capacity_ > 0 && moe_layers_ > 0 && rt_.options.gather->uses_shard_cache()
          ? std::make_unique<prefetch::ShardCache>(
                ShardCacheConfig{cache_capacity_, cfg_.shard_cache.eviction})
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

}  // namespace moezero::train::session_detail
