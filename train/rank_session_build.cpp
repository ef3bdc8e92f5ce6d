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
#include "zero/int8_codec.h"

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
      if (model::is_moe_layer(cfg_.model, l)) moe_layer_ids.push_back(l);
    routing_replay_ =
        std::make_unique<moe::RoutingReplay>(cfg_, moe_layer_ids, rows_ * T_, ctx_.rank);
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
  model_ = std::make_unique<model::Transformer>(cfg_.model, &rt_);
  model_->set_activation_checkpointing(cfg_.train.activation_checkpointing);
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
  zo.grad_accum_dtype =
      cfg_.zero.grad_accum_dtype == GradAccumDtype::Param ? tc_.dtype : DType::F32;
  zo.seed = static_cast<uint64_t>(tc_.seed);
  zo.check_finite = cfg_.profile.check_finite;
  zo.materialize = !run_.options.run_world;  // simulated: states counted, not filled
  zo.inter_node_hop = InterNodeHop::Int8;
  zo.quantization_block = cfg_.zero.quantization_block;
  if (cfg_.zero.quantized_weights)
    zo.gather_codec = std::make_shared<BlockInt8Codec>(cfg_.zero.quantization_block);
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

}  // namespace moezero::train::session_detail
