// zero/zero_engine.h — the ZeRO engine: parameter groups sharded over ranks, gathered just in
// time, gradients reduced into shards, AdamW on fp32 master shards. Stages 0-3 are
// configurations of the same pieces (DESIGN.md "The objects"):
//
//   stage | params (compute dtype)     | gradients                   | optimizer (master, m, v)
//   0     | full, replicated           | full, all-reduced           | full, replicated
//   1     | full, replicated           | shard (reduce-scattered     | shard
//         |                            |   once per step)            |
//   2     | full, replicated           | shard (reduce-scattered)    | shard
//   3     | shard; gathered on acquire | shard (reduce-scattered)    | shard
//
// Stages 1 and 2 move two parameter volumes per optimizer step, as in the ZeRO paper: the
// gradients reduce-scattered (bucketed, on the reduce stream, overlapped with backward) and the
// updated parameters all-gathered. Stage 1 keeps each micro-batch's full gradient on the rank
// (summed locally) and reduce-scatters the sum once, in the backward of the step's last
// micro-batch (ZeroOptions::micro_batches_per_step; the sum in ZeroOptions::grad_accum_dtype());
// stage 2 reduce-scatters every micro-batch.
//
// Groups smaller than `zero.param_persistence_threshold` elements behave as stage 2 under stage
// 3 (full parameters stay resident; they are not worth a collective each). So do groups held by
// one rank (world 1, or experts whose EDP group is one rank), unless `shard_single_rank`: their
// shard is the whole group, so a gather would only copy it (FSDP switches to NO_SHARD at world
// size 1 for the same reason); their gradients also skip the bucket copies and the collective.
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
// started, at most `zero.prefetch_bucket_size` bytes ahead and never past
// `zero.max_live_parameters` bytes of gathered parameters (an on-demand acquire may exceed it by
// the one group it needs); both are counted per sharding group (dense groups over the world,
// experts over their EDP group), because a prefetch decision must be identical on every rank
// that takes part in the gather; the live limit is split evenly between those communicators so
// that the shares add up. When the order changes (MoE routing), the recorder re-learns at the
// end of the step; a wrong prediction costs a gather, never correctness.
//
// Rule that keeps collectives matched: every collective here is issued in an order that is a
// pure function of the call sequence of acquire/grad_ready/step, which the model makes
// identical on every rank of a group.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/communicator.h"
#include "core/config.h"
#include "core/param_group.h"
#include "core/residency.h"
#include "prefetch/prefetch_planner.h"
#include "zero/gather_codec.h"
#include "zero/quantized_reduce.h"

namespace moezero {

// What ZeroOptions::grad_hook sees: a group's full gradient of one micro-batch, complete on
// `stream` (the compute stream), before the non-finite check and the reduction.
struct GradReadyInfo {
  int group = 0;  // engine index
  const GroupLayout* layout = nullptr;
  Tensor grad;               // f32 (padded numel): the full gradient; writable
  Stream* stream = nullptr;  // enqueue reads/writes of `grad` here
  int64_t step = 0;          // 0-based: calls of step() before this one
  int64_t micro_batch = 0;   // 0-based: finish_backward() calls since the last step()
};

// What the engine is built from: the `zero` section as parsed (core/config.h ZeroConfig: stage,
// persistence threshold, buckets, live limit, dense keep, quantisation), read as it is, and what
// the run adds from its other sections. Nothing copies the section's fields one by one.
struct ZeroOptions {
  // The zero section. The engine reads: stage; param_persistence_threshold (elements: smaller
  // groups stay replicated); shard_single_rank (groups held by one rank take the full path
  // anyway: gathered at stage 3, gradients through the bucket copies and the one-rank
  // collective; copies only, for tests and for profiling the fetch machinery on one rank);
  // keep_dense_bytes (stage 3 with several micro-batches per step: dense groups released
  // before the step's last micro-batch stay gathered, up to this many bytes per gather
  // communicator in release order, and serve the next micro-batches' acquires without a
  // gather until the step ends; experts have the shard cache; 0: regather every micro-batch,
  // as FSDP does without set_reshard_after_backward(False)); prefetch_bucket_size and
  // max_live_parameters (bytes); reduce_bucket_size (bytes per reduce-scatter bucket);
  // grad_accum_dtype (grad_accum_dtype() below); quantized_weights and quantization_block (the
  // gathers' wire format when gather_codec is null) and quantization_block for the two-hop
  // reduction. moe_gather, reshard_after_forward, quantized_gradients and hpz_partition_size
  // reach it as the communicators and the model the run builds from them.
  ZeroConfig zero;
  DType compute_dtype = DType::F32;  // train.dtype
  // prefetch_set: the most bytes of full parameters one coalesced gather carries PER RANK of
  // its communicator (a set larger than size() x this is cut by shape). Per rank because a
  // ring all-gather pays one link latency per rank: a chunk of n x 8 MiB sends 8 MiB per ring
  // step, so the latency is about 1 % of a chunk's transfer at 100 Gbit/s on every group size
  // (a fixed 64 MiB cut a 1,024-GPU plan's 33 MiB experts into one 128-rank ring each:
  // 127 x 8.7 us per expert, 9 % of its step; docs/zero.md). 8 ranks: 64 MiB, as before.
  uint64_t coalesce_shard_bytes = 8ull << 20;
  // train.grad_accum_steps. Stage 1: gradients are summed on the rank and reduce-scattered in
  // the backward of micro-batch micro_batches_per_step - 1 (0-based; later ones reduce too). A
  // step that ends with fewer micro-batches reduces the rest at step(), not overlapped.
  int64_t micro_batches_per_step = 1;
  uint64_t seed = 1234;  // train.seed: parameter initialisation
  // False on the simulated backend (issue 18): the states are allocated (and counted by tag)
  // but no initial value is computed or uploaded, so a rank can stand for a shard of a model
  // far larger than this machine's memory.
  bool materialize = true;
  // profile.check_finite: gradient health (docs/health.md): every full gradient is scanned for
  // NaN/Inf on the compute stream before it is reduced (Ops::find_nonfinite); the results
  // are read at the step's one host sync and the first one is StepResult::nonfinite.
  bool check_finite = true;
  // Test/debug hook, called on the host in grad_ready() before the check (may be empty).
  std::function<void(const GradReadyInfo&)> grad_hook;
  // The wire format of parameter all-gathers (zero/gather_codec.h). Null: BlockInt8Codec of
  // zero.quantization_block when zero.quantized_weights, else IdentityCodec.
  std::shared_ptr<const GatherCodec> gather_codec;
  // Gradient reduce-scatters of groups whose GroupComms name reduce_intra and reduce_cross take
  // two hops (zero/quantized_reduce.h, zero.quantized_gradients): the inter-node hop's wire
  // format (its elements per int8 scale: zero.quantization_block).
  InterNodeHop inter_node_hop = InterNodeHop::Int8;

  // A run's options: its zero section as it is, and train.dtype, train.grad_accum_steps,
  // train.seed and profile.check_finite. The run adds materialize and grad_hook.
  static ZeroOptions of(const Config& c);

  int stage() const { return static_cast<int>(zero.stage); }
  // Stage 1: the dtype of the rank's sum of a step's micro-batch gradients (until the last
  // one's reduction): F32, or the compute dtype (zero.grad_accum_dtype=param: half the bytes in
  // bf16, each micro-batch's addition rounded to it).
  DType grad_accum_dtype() const {
    return zero.grad_accum_dtype == GradAccumDtype::Param ? compute_dtype : DType::F32;
  }
};

// The communicators of a group's sharding group (world for dense groups, the EDP group for
// experts): one per stream purpose, so gathers and reductions never cross.
struct GroupComms {
  Communicator* gather = nullptr;
  Communicator* reduce = nullptr;
  // Both set: gradients are reduce-scattered in two hops (zero/quantized_reduce.h) over these
  // subgroups of `reduce`'s group (core/process_groups.h NodeSplit): this rank's node's
  // members, and the members of its local index on every node. Null: one reduce-scatter.
  Communicator* reduce_intra = nullptr;
  Communicator* reduce_cross = nullptr;
  // hpZ (ZeRO++ hierarchical partitions, zero.hpz_partition_size): the members of the sharding
  // group inside this rank's secondary partition (normally its node), in group order; used on
  // the gather stream. Null: off. The engine uses it for stage-3 groups when it holds more than
  // one and fewer than all ranks of the sharding group (it must divide their number): when a
  // group's full buffer is freed within a step, this rank keeps its slice of it over the
  // partition (the secondary shard, MemTag::Secondary), and the step's later gathers of
  // the group all-gather those slices over it only (zero/fetch_secondary.cpp).
  Communicator* secondary = nullptr;
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

// The first non-finite value found in this rank's full gradients of a step (before reduction).
struct NonFiniteGrad {
  int group = -1;             // engine index of the group
  int param = -1;             // parameter index inside the group; -1: padding (never expected)
  int64_t index = 0;          // element index inside that parameter (flat group index if -1)
  int64_t flat_index = 0;     // element index inside the flat group buffer
  int64_t kind = 1;           // NonFiniteKind: 1 NaN, 2 +Inf, 3 -Inf
  int64_t count = 0;          // non-finite values in that gradient
  int64_t micro_batch = 0;    // 0-based micro-batch of the step
  int64_t order = 0;          // position among this step's checked gradients (backward order)
  int64_t bad_gradients = 0;  // checked gradients of this step with a non-finite value
};

struct StepResult {
  double grad_norm = 0.0;  // global L2 norm of the gradient, before clipping
  float clip_scale = 1.0f;
  bool finite = true;  // false: the step was not applied (non-finite gradient)
  // Squared L2 norms of the gradient shards, every rank of world_misc: element
  // [r * shard_sq_slots + g] is rank r's shard of its group g (engine order on rank r; slots
  // past rank r's group count are 0). A rank's shard of a group is its 1/n slice of the reduced
  // gradient (n = ranks sharing the group): the shard it holds at stages 2-3, the range whose
  // optimizer state it owns at stage 1, the same slice of the replicated gradient at stage 0.
  // grad_norm is the square root of their sum (summed in double, the same order on every rank).
  std::vector<float> shard_sq;
  int shard_sq_slots = 0;
  std::optional<NonFiniteGrad> nonfinite;  // this rank's first non-finite value (check_finite)
};

// Exact, machine-independent counters (bytes this rank moved), cumulative. reduce_wire_bytes:
// the bytes the gradient reduce-scatters sent, as the network model counts their algorithms (a
// ring over n ranks sends (n - 1) / n of its input; the two-hop reduction of
// zero.quantized_gradients its node ring's share plus its cross-node all_to_all_v's bytes).
struct EngineCounters {
  uint64_t gathered_bytes = 0;  // all-gather output bytes (full buffers filled)
  // The same all-gathers' output bytes in their wire format (GatherCodec::wire_shape, n parts):
  // equal to gathered_bytes with the identity codec; about (1 + 4 / block) / 4 of the fp32
  // gathered_bytes with BlockInt8Codec.
  uint64_t gathered_wire_bytes = 0;
  uint64_t reduce_scattered_bytes = 0;  // reduce-scatter input bytes
  uint64_t reduce_wire_bytes = 0;       // what those reduce-scatters sent (see above)
  uint64_t all_reduced_bytes = 0;       // gradient all-reduce bytes (stage 0)
  uint64_t gathers = 0;                 // all-gathers issued (of parameter groups)
  uint64_t prefetched = 0;              // gathers issued ahead of their acquire
  uint64_t prefetch_hits = 0;           // expert acquires whose gather a plan made before routing
  uint64_t prefetch_waste = 0;          // prefetched gathers released unused at step end
  uint64_t peak_live_bytes = 0;         // most gathered (stage-3) parameter bytes alive at once
  uint64_t gathered_dense_bytes = 0;    // gathered_bytes of dense groups
  uint64_t gathered_expert_bytes = 0;   // gathered_bytes of expert groups
  uint64_t prefetch_misses = 0;         // expert acquires whose gather started after routing
  uint64_t miss_bytes = 0;              // their gathered bytes
  uint64_t exact_prefetches = 0;        // expert acquires whose gather backward started exactly
  uint64_t wasted_bytes = 0;            // expert gathers freed without ever being acquired
  uint64_t needed_expert_bytes = 0;     // full bytes of every expert acquire (what was needed)
  uint64_t cache_hits = 0;              // acquires served by the shard cache
  uint64_t cache_misses = 0;            // expert acquires the cache could not serve
  uint64_t dense_kept_hits = 0;         // dense acquires served by keep_dense_bytes
  uint64_t cache_evictions = 0;
  // hpZ: all-gathers of secondary shards inside a partition, their output bytes (also in
  // gathered_bytes)
  uint64_t hpz_gathers = 0, hpz_gathered_bytes = 0;
  double stall_ms = 0.0;  // compute stream waiting on parameter gathers
};

// The same counters per parameter group (cumulative; exact). Summed over all groups they equal
// the matching EngineCounters, except the replicated-parameter refresh of stages 1-2 (counted
// in EngineCounters::gathered_bytes only).
struct GroupCounters {
  uint64_t gathers = 0;         // all-gathers issued for the group (stage 3)
  uint64_t gathered_bytes = 0;  // their output bytes
  uint64_t cache_hits = 0, cache_misses = 0;
  uint64_t prefetch_hits = 0, prefetch_misses = 0, exact_prefetches = 0, wasted_bytes = 0;
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
  // [in] planner: keeps the dense recorded order (and plans the experts, for the model's MoE
  // layers); null: the engine keeps its own. Not owned.
  // Parameters are initialised from
  // (options.seed, parameter name), so every world size and stage starts identically.
  ZeroEngine(Device& device, EngineStreams streams, std::vector<GroupSpec> groups,
             const std::function<GroupComms(const GroupSpec&)>& comms_of, Communicator& world_misc,
             ZeroOptions options, std::unique_ptr<ResidencyCache> expert_cache = nullptr,
             prefetch::PrefetchPlanner* planner = nullptr);
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
  // One all-gather for every group of `groups` that is sharded and not resident or in flight
  // (they must share a gather communicator): each rank's shards side by side, unpacked into
  // the groups' full buffers on the gather stream. Acquire and release stay per group.
  void prefetch_block(std::span<const int> groups, Stream& compute,
                      FetchReason reason = FetchReason::Predicted) override;
  void prefetch_set(std::span<const int> groups, Stream& compute,
                    FetchReason reason = FetchReason::Predicted) override;
  void discard_prefetch(int group) override;
  void set_keep_score(int group, double score) override;
  bool needs_fetch(int group) const override;
  bool cached(int group) const override;
  uint64_t fetch_ticket(int group) const override;
  bool may_hold(int group) const override;
  void use_held(int group) override;
  void hold(int group) override;

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
  // Overwrites the parameters of `group` with `values` (fp32, layout(group).numel() of them:
  // what full_params_host returns), e.g. to start from an exported model: this rank copies its
  // own range into its fp32 master (shard or replica) and into its compute-dtype copy (the
  // bf16 shard, or the replicated full buffer). Optimizer moments, gradients and the step
  // count are left as they are. No collective: every rank of the group must pass the same
  // values. Call between steps: the group must not be gathered (acquired, prefetched or held
  // by the shard cache). Synchronises the compute and gather streams.
  void set_full_params_host(int group, std::span<const float> values);
  EngineCounters counters() const;
  GroupCounters group_counters(int group) const;
  int64_t step_count() const;
  // [in] trace: stall spans, cache instants and live/cache byte counters go there while it is
  // tracing (null: none, the default). Not owned.
  void set_trace(TraceRecorder* trace);

  // ---- Checkpoint state (zero/zero_state.cpp). Call between steps only (after step(), before
  // the next acquire): no gradient accumulation state exists then (step() zeroes it), no
  // parameters are gathered and the shard cache is empty.
  enum class StateTensor : uint8_t { Master = 0, ExpAvg = 1, ExpAvgSq = 2 };  // all fp32
  struct StateRange {
    int64_t begin_elems = 0;  // first element of the group's unpadded flat buffer
    int64_t count_elems = 0;  // 0: this rank writes nothing for the group
  };
  // The part of group `group`'s state (elements of its unpadded flat buffer, [0, numel)) this
  // rank writes to a checkpoint: its optimizer range clipped to numel. With an unsharded
  // optimizer (stage 0) every rank of the group holds the same values: only its first rank
  // writes them, the others get an empty range. The ranges of a group's ranks tile [0, numel).
  StateRange checkpoint_range(int group) const;
  // This rank's values of `which` over checkpoint_range(group), fp32 on the host (synchronises).
  std::vector<float> export_state(int group, StateTensor which);
  // Where imported state comes from: fills dst[0, count) with elements [begin, begin + count)
  // of group `group`'s `which` (0 <= begin, begin + count <= numel; never asked for padding).
  using StateReader = std::function<void(int group, StateTensor which, int64_t begin_elems,
                                         int64_t count_elems, float* dst)>;
  // Replaces this rank's model and optimizer state: fp32 masters (and the compute-dtype copies
  // cast from them, as the optimizer writes them), both AdamW moments, and the count of
  // applied optimizer steps (AdamW bias correction, the cache's parameter version). Asks
  // `read` only for what this rank holds: its optimizer range of masters and moments, and all
  // parameters of a group whose parameters are replicated. Any world size, EP size or stage
  // may have written the source. Synchronises the device.
  void import_state(const StateReader& read, int64_t step_count);
  // The dense prefetcher's recorded acquire order per gather communicator (key, group ids):
  // saved so that a resumed run on the same world prefetches as the uninterrupted one would.
  // Restoring is optional (a missing order is re-learned in one step) and only valid for the
  // same world size, EP size and stage.
  std::vector<std::pair<std::string, std::vector<int>>> prefetch_orders() const;
  void set_prefetch_orders(const std::vector<std::pair<std::string, std::vector<int>>>& orders);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ZeroOptions options_;
};

}  // namespace moezero
