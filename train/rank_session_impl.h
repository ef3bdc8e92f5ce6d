// train/rank_session_impl.h — private to the rank session (rank_session.h): the RankSession
// class and what its parts share, used by rank_session_build.cpp (the rank's communicators, model
// and engine, the start state), rank_session_step.cpp (a step's named parts: the micro-batches,
// the optimizer step, the exchange of the step's counters, evaluation, the checkpoint) and
// rank_session.cpp (the run: the steps, rank 0's metrics line and progress, what the rank hands
// back).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/net_model.h"
#include "core/process_groups.h"
#include "model/transformer.h"
#include "moe/routing_trace.h"
#include "prefetch/frequency_model.h"
#include "train/rank_session.h"
#include "zero/zero_engine.h"

namespace moezero::train::session_detail {

using Clock = std::chrono::steady_clock;

// The rank's process groups and communicators, always created in this order.
struct RankComms {
  std::unique_ptr<Communicator> gather, reduce, misc;  // world
  // Expert parallelism: EP groups exchange tokens; EDP groups share (shard) experts.
  const ProcessGroups pgs;
  std::unique_ptr<Communicator> edp_gather, edp_reduce;
  std::unique_ptr<Communicator> a2a;     // EP group; null when ep_size == 1
  std::unique_ptr<Communicator> router;  // world; null for one rank
  // zero.quantized_gradients (zero/quantized_reduce.h): the node's members and the members of
  // this rank's local index on every node, of the world and of the EDP group ("reduce"
  // channel); null where the group sits on one node (one hop, nothing quantised).
  std::unique_ptr<Communicator> reduce_intra, reduce_cross, edp_reduce_intra, edp_reduce_cross;
  // hpZ (zero.hpz_partition_size at stage 3): the world's and the EDP group's members inside
  // this rank's secondary partition (GroupComms::secondary); null where the partition holds
  // one or all of the group's ranks (hpZ does not apply there).
  std::unique_ptr<Communicator> hpz_gather, edp_hpz_gather;

  RankComms(comm::RankContext& ctx, const Config& cfg, int ep, int world)
      : gather(ctx.communicator(ctx.world_group(), "gather")),
        reduce(ctx.communicator(ctx.world_group(), "reduce")),
        misc(ctx.communicator(ctx.world_group(), "misc")),
        pgs(world, ep, cfg.model.num_experts > 0 ? static_cast<int>(cfg.model.num_experts) : ep) {
    const ProcessGroup wg = ctx.world_group();
    edp_gather = ctx.communicator(pgs.edp_group_of(ctx.rank), "gather");
    edp_reduce = ctx.communicator(pgs.edp_group_of(ctx.rank), "reduce");
    if (ep > 1) a2a = ctx.communicator(pgs.ep_group_of(ctx.rank), "a2a");
    if (world > 1) router = ctx.communicator(wg, "router");
    if (cfg.zero.quantized_gradients) {
      const auto rpn = static_cast<int>(cfg.comm_emulation.ranks_per_node);
      two_hop(ctx, wg, rpn, reduce_intra, reduce_cross);
      two_hop(ctx, pgs.edp_group_of(ctx.rank), rpn, edp_reduce_intra, edp_reduce_cross);
    }
    // hpZ: ranks per secondary partition at stage 3 (1: none).
    const int hpz = cfg.zero.stage == 3 ? static_cast<int>(cfg.zero.hpz_partition_size) : 1;
    if (hpz > 1) {
      hpz_gather = secondary_comm(ctx, wg, hpz);
      edp_hpz_gather = secondary_comm(ctx, pgs.edp_group_of(ctx.rank), hpz);
    }
  }
  std::vector<Communicator*> all() const {
    return {gather.get(),           reduce.get(),           misc.get(),
            edp_gather.get(),       edp_reduce.get(),       a2a.get(),
            router.get(),           reduce_intra.get(),     reduce_cross.get(),
            edp_reduce_intra.get(), edp_reduce_cross.get(), hpz_gather.get(),
            edp_hpz_gather.get()};
  }

 private:
  static std::unique_ptr<Communicator> secondary_comm(comm::RankContext& ctx,
                                                      const ProcessGroup& of, int hpz) {
    const ProcessGroup part = secondary_partition_of(of, ctx.rank, hpz);
    if (part.size() <= 1 || part.size() >= of.size()) return nullptr;
    return ctx.communicator(part, "hpz");
  }
  static void two_hop(comm::RankContext& ctx, const ProcessGroup& g, int ranks_per_node,
                      std::unique_ptr<Communicator>& intra, std::unique_ptr<Communicator>& cross) {
    const NodeSplit s = node_split(g, ranks_per_node, ctx.rank);
    if (s.nodes == 1) return;
    intra = ctx.communicator(s.intra, "reduce");
    cross = ctx.communicator(s.cross, "reduce");
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
  void agree_auto_sizes();
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
  void agree_free_link(const StepExchange& ex);
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
  moe::MoeStats moe_stats_;
  std::unique_ptr<TraceRecorder> recorder_;  // times collectives and a2a waits, traces steps
  moe::MoeRuntime rt_;
  int moe_layers_ = 0;
  // shard_cache.capacity_bytes and zero.keep_dense_bytes as resolved (and agreed) for the run
  uint64_t cache_capacity_ = 0, keep_dense_ = 0;
  std::unique_ptr<prefetch::FrequencyModel> frequency_;  // null for a dense model
  std::unique_ptr<prefetch::PregateModel> pregate_;      // prefetch.pregate; else null
  std::unique_ptr<prefetch::PrefetchPlanner> planner_;   // the engine's and the MoE layers'
  std::unique_ptr<model::Transformer> model_;
  // Evaluation (train.eval_every): the same groups, forward only, with its own runtime (built
  // at the first evaluation).
  moe::MoeRuntime eval_rt_;
  std::unique_ptr<model::Transformer> eval_model_;
  int64_t hook_step_ = 0;  // 1-based step for the grad hook
  std::unique_ptr<ZeroEngine> engine_;
  std::unique_ptr<GradHealth> health_;
  checkpoint::RankState ckpt_;
  int64_t first_step_ = 0, end_step_ = 0;
  std::unique_ptr<StepStatsCollector> step_stats_;
  std::unique_ptr<moe::RoutingTrace> routing_trace_;    // profile.routing_trace; null: off
  std::unique_ptr<moe::RoutingReplay> routing_replay_;  // moe.routing_replay; null: off
  EngineCounters before_;        // the engine's counters at the end of the last step
  comm::LinkBytes link_before_;  // this rank's sent bytes by tier at the end of the last step
  // This rank's sent bytes by tier so far (zero where the world does not count them: NCCL,
  // MPI, the simulator).
  comm::LinkBytes link_now() const;
};

}  // namespace moezero::train::session_detail
