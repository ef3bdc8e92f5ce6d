// core/zero_engine.h — the ZeRO engine: parameter groups sharded over ranks, gathered just in
// time, gradients reduced into shards, AdamW on fp32 master shards. Stages 0-3 are
// configurations of the same pieces (DESIGN.md "The objects"):
//
//   stage | params (compute dtype)     | gradients                   | optimizer (master, m, v)
//   0     | full, replicated           | full, all-reduced           | full, replicated
//   1     | full, replicated           | full, all-reduced           | shard
//   2     | full, replicated           | shard (reduce-scattered)    | shard
//   3     | shard; gathered on acquire | shard (reduce-scattered)    | shard
//
// Groups smaller than `persistence_threshold_elems` behave as stage 2 under stage 3 (full
// parameters stay resident; they are not worth a collective each).
//
// Bytes per parameter per rank (Ψ parameters, N ranks), model states only:
//   fp32 mode: the master IS the compute parameter (one buffer): 4 (param) + 4 (grad) + 8 (m, v)
//              = 16 Ψ / N at stage 3.
//   bf16 mode: 2 (bf16 param shard) + 2 (bf16 grad shard) + 12 (fp32 master, m, v)
//              = 16 Ψ / N at stage 3 — the ZeRO paper's (2 + 2 + 12) Ψ / N.
//
// Streams: all-gathers run on the gather stream, gradient reductions on the reduce stream,
// compute waits per group on the gather event (no host synchronisation). The optimizer step
// synchronises the host once, to read the global gradient norm (as every ZeRO runtime does
// for clipping and logging).
//
// Prefetch (dense order): the order of acquire() calls of the first step is recorded and
// replayed: after each acquire, fetches for the next groups of the recorded order are
// started, at most `prefetch_bucket_bytes` ahead and never past `max_live_bytes` of gathered
// parameters (an on-demand acquire may exceed it by the one group it needs); both are counted
// per sharding group (dense groups over the world, experts over their EDP group), because a
// prefetch decision must be identical on every rank that takes part in the gather; the live
// limit is split evenly between those communicators so that the shares add up. When the order
// changes (MoE routing), the recorder re-learns at the end of the step; a wrong prediction
// costs a gather, never correctness.
//
// Rule that keeps collectives matched: every collective here is issued in an order that is a
// pure function of the call sequence of acquire/grad_ready/step, which the model makes
// identical on every rank of a group.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/communicator.h"
#include "core/residency.h"
#include "core/param_group.h"

namespace moezero {

struct ZeroOptions {
  int stage = 3;
  DType compute_dtype = DType::F32;
  int64_t persistence_threshold_elems = 1024;
  uint64_t prefetch_bucket_bytes = 64ull << 20;
  uint64_t max_live_bytes = 1ull << 30;
  uint64_t reduce_bucket_bytes = 64ull << 20;
  uint64_t seed = 1234;  // parameter initialisation
};

// The communicators of a group's sharding group (world for dense groups, the EDP group for
// experts): one per stream purpose, so gathers and reductions never cross.
struct GroupComms {
  Communicator* gather = nullptr;
  Communicator* reduce = nullptr;
};

struct EngineStreams {
  Stream* compute = nullptr;
  Stream* gather = nullptr;
  Stream* reduce = nullptr;
};

struct AdamWHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_clip = 0.0f;  // 0: no clipping
};

struct StepResult {
  double grad_norm = 0.0;     // global L2 norm of the gradient, before clipping
  float clip_scale = 1.0f;
  bool finite = true;         // false: the step was not applied (non-finite gradient)
};

// Exact, machine-independent counters (bytes this rank moved), cumulative.
struct EngineCounters {
  uint64_t gathered_bytes = 0;          // all-gather output bytes (full buffers filled)
  uint64_t reduce_scattered_bytes = 0;  // reduce-scatter input bytes
  uint64_t all_reduced_bytes = 0;       // gradient all-reduce bytes (stages 0 and 1)
  uint64_t gathers = 0;                 // all-gathers issued (of parameter groups)
  uint64_t prefetched = 0;              // gathers issued ahead of their acquire
  uint64_t prefetch_hits = 0;           // acquires that found their gather already issued
  uint64_t prefetch_waste = 0;          // prefetched gathers released unused at step end
  uint64_t peak_live_bytes = 0;         // most gathered (stage-3) parameter bytes alive at once
  uint64_t gathered_dense_bytes = 0;    // gathered_bytes of dense groups
  uint64_t gathered_expert_bytes = 0;   // gathered_bytes of expert groups
  uint64_t prefetch_misses = 0;         // acquires that had to gather on demand
  uint64_t prefetch_wasted_bytes = 0;   // prefetched, released without being acquired
  uint64_t cache_hits = 0;              // acquires served by the shard cache
  uint64_t cache_misses = 0;            // expert acquires the cache could not serve
  uint64_t cache_evictions = 0;
  double stall_ms = 0.0;                // compute stream waiting on parameter gathers
};

// The same counters per parameter group (cumulative; exact). Summed over all groups they equal
// the matching EngineCounters, except the replicated-parameter refresh of stages 1-2 (counted
// in EngineCounters::gathered_bytes only).
struct GroupCounters {
  uint64_t gathers = 0;         // all-gathers issued for the group (stage 3)
  uint64_t gathered_bytes = 0;  // their output bytes
  uint64_t cache_hits = 0, cache_misses = 0;
  uint64_t prefetch_hits = 0, prefetch_misses = 0, prefetch_wasted_bytes = 0;
  double gather_ms = 0.0;  // expert groups: time their gathers took on the gather stream,
                           // from events resolved at the optimizer step's host sync
};

class TraceRecorder;

class ZeroEngine final : public ParamProvider {
 public:
  // [in] groups: in execution order of forward. [in] comms_of: the communicators of each
  // group's sharding group (called once per group). [in] world_misc: a world communicator for
  // the gradient-norm all-reduce (its own channel). [in] expert_cache: keeps gathered expert
  // groups (GroupKind::Expert) resident between release and the next acquire (forward to
  // backward, across micro-batches) within its byte budget; every entry is dropped at the
  // optimizer step (the shards change), so it never serves stale parameters. Null: no cache.
  // Parameters are initialised from
  // (options.seed, parameter name), so every world size and stage starts identically.
  ZeroEngine(Device& device, EngineStreams streams, std::vector<GroupSpec> groups,
             const std::function<GroupComms(const GroupSpec&)>& comms_of,
             Communicator& world_misc, ZeroOptions options,
             std::unique_ptr<ResidencyCache> expert_cache = nullptr);
  ~ZeroEngine() override;

  // ParamProvider
  int group_count() const override;
  const GroupLayout& layout(int group) const override;
  DType compute_dtype() const override { return options_.compute_dtype; }
  Tensor acquire(int group, Stream& compute) override;
  void release(int group, Stream& compute) override;
  Tensor grad(int group, Stream& compute) override;
  void grad_ready(int group, Stream& compute) override;
  void prefetch(int group, Stream& compute, FetchReason reason = FetchReason::Predicted) override;
  void discard_prefetch(int group) override;
  void set_keep_score(int group, double score) override;
  bool ready(int group) const override;
  bool needs_fetch(int group) const override;
  bool cached(int group) const override;

  // Ends a micro-batch's backward: flushes the pending reduce bucket.
  void finish_backward();
  // Ends the step's forward/backward passes (every micro-batch): releases prefetched groups
  // nobody acquired, re-learns the order if it changed.
  // Applies AdamW to this rank's optimizer shards (global-norm clipping across all shards),
  // zeroes gradient accumulators, refreshes replicated parameters. One host sync.
  StepResult step(const AdamWHyper& hyper);

  // The full parameters of `group` as fp32 on the host (a collective over the group's
  // sharding group at stage 3: every member must call it; synchronises). For tests/export.
  std::vector<float> full_params_host(int group);
  EngineCounters counters() const;
  GroupCounters group_counters(int group) const;
  int64_t step_count() const;
  // [in] trace: stall spans, cache instants and live/cache byte counters go there while it is
  // tracing (null: none, the default). Not owned.
  void set_trace(TraceRecorder* trace);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ZeroOptions options_;
};

}  // namespace moezero
