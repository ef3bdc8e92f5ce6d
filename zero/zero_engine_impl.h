// zero/zero_engine_impl.h — private state of ZeroEngine, shared by zero_engine.cpp (gradient
// buckets), zero_step.cpp (initialisation, optimizer step) and zero_state.cpp (state to and
// from the host). Fetching is the FetchCoordinator's (fetch_coordinator.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "zero/fetch_coordinator.h"
#include "zero/group_state.h"
#include "zero/zero_engine.h"

namespace moezero {

// The engine's private state: what its parts share (zero_detail::EngineShared), the fetch
// coordinator (fetch_coordinator.h) and the gradient side: buckets, checks, optimizer step.
struct ZeroEngine::Impl : zero_detail::EngineShared {
  Impl(Device& device, EngineStreams streams, Communicator& world_misc, ZeroOptions options,
       std::unique_ptr<ResidencyCache> expert_cache, prefetch::PrefetchPlanner* planner);

  void add_group(GroupSpec spec, GroupComms comms);
  void initialise();
  Tensor grad(int g, Stream& compute);
  // A group whose gradient one rank reduces alone (flush_bucket's copy, no collective).
  bool reduced_alone(const zero_detail::GroupState& st) const {
    return st.n == 1 && !options.zero.shard_single_rank;
  }
  void grad_ready(int g, Stream& compute);
  void accumulate_local(int g, Stream& compute);  // stage 1, not the last micro-batch
  void enqueue_reduction(int g);                  // grad_full joins its communicator's bucket
  void reduce_local_leftovers();                  // stage 1: sums whose last micro-batch never came
  struct Bucket {
    std::vector<int> groups;  // groups whose gradients await reduction
    uint64_t bytes = 0;
  };
  void flush_bucket(Bucket& b);
  void flush_buckets();
  StepResult optimizer_step(const AdamWHyper& hyper);
  // The steps of optimizer_step, in order (zero_step.cpp).
  void drain_passes();  // buckets reduced, prefetches settled, compute after reduce and gather
  // What the step's one host sync reads (enqueued on the compute stream by enqueue_readback).
  struct StepReadback {
    TensorBuffer sq;                     // f32 (norm_slots): squared shard norms, this rank
    TensorBuffer all_sq;                 // f32 (world, norm_slots): every rank's (world > 1)
    std::vector<int64_t> check_results;  // i64 (checks, 3): find_nonfinite results, on the host
  };
  StepReadback enqueue_readback(StepResult& r);  // also enqueues the copy into r.shard_sq
  void apply_adamw(const AdamWHyper& hyper, float grad_scale);  // every optimizer range
  void refresh_replicated();  // all-gather replicated groups' updated ranges (gather stream)
  std::vector<float> full_params_host(int g);
  void set_full_params_host(int g, std::span<const float> values);

  Communicator& world_misc;
  FetchCoordinator fetch;
  std::unique_ptr<Event> reduce_done;  // reduce: last bucket reduced
  bool reduce_recorded = false;

  static std::string comm_key(const Communicator* c) {
    return c->group().str() + "/" + c->channel();
  }
  std::map<std::string, Bucket> buckets;  // one per reduce communicator, keyed by comm_key

  // Gradient health (docs/health.md).
  int64_t step_calls = 0;  // calls of optimizer_step (applied or skipped)
  int norm_slots = 0;      // max group count over the ranks of world_misc
  static constexpr int64_t kChecksPerChunk = 256;
  std::vector<TensorBuffer> check_chunks;  // i64 (kChecksPerChunk, 3): find_nonfinite results
  struct Check {
    int group;
    int64_t micro_batch;
    // Not scanned at grad_ready: the gradient went straight into grad_acc and stays there
    // unchanged until the step (one rank, fp32, one micro-batch per step), so the step scans it
    // only when the gradient norm is not finite (every non-finite element makes it so).
    bool deferred = false;
  };
  std::vector<Check> checks;  // this step's checks, in the order they were enqueued
  void check_gradient(int g, Stream& compute);
  std::optional<NonFiniteGrad> resolve_checks(const std::vector<int64_t>& results);
  // Fills the results of the deferred checks: none when the norm is finite, else scans now.
  void run_deferred_checks(std::vector<int64_t>& results, bool norm_finite);
};

}  // namespace moezero
