// train/memory_estimate.h — the memory a run needs, from its config alone, before anything is
// allocated: bytes per rank of parameters, gradients and optimizer states (by ZeRO stage), the
// largest gathered working set, the shard cache, the activations of one micro-batch; and the
// memory this machine allows (train.memory_limit, RLIMIT_AS, the cgroup's memory.max,
// MemAvailable). `moezero train` prints the estimate in its run header; train() refuses a run
// whose certain part (model states plus the largest gathered group) cannot fit, naming the
// numbers and what to change.
//
// The one place that knows what a run allocates: a feature that adds buffers adds its bytes
// here (and to tests/train/memory_estimate_test.cpp, which holds the estimate against the
// allocator's measured peak).
#pragma once

#include <cstdint>
#include <string>

#include "core/config.h"

namespace moezero::train {

// Bytes one rank allocates (on its device; on the CPU backend, host memory).
struct MemoryEstimate {
  // Model states, exact (the ZeRO engine's buffers, padding included): this rank's parameter
  // shards (or full copies below stage 3 / under the persistence threshold), the gradient
  // accumulators, and the optimizer states (AdamW moments, plus fp32 masters under bf16).
  uint64_t params = 0, grads = 0, optim = 0;
  // The largest gathered working set: full parameters alive at once (zero.max_live_parameters,
  // at least two of the largest sharded group: one in use, one prefetched), the fp32 full
  // gradient of the groups in backward, and the reduce buckets; the experts held from forward
  // to backward without a byte limit (fsdp's block, zero.reshard_after_forward=false: every
  // local expert, less what `cache` counts); with zero.quantized_weights
  // also the largest group's int8 wire buffers (its send part and the n parts received).
  uint64_t gathered = 0;
  // Of `gathered`, stage 1: the rank's sum of its micro-batches' full gradients, every group's
  // (4 bytes per parameter; zero.grad_accum_dtype=param: the compute dtype's). 0 at other stages.
  uint64_t grad_accum = 0;
  uint64_t largest_group = 0;  // full bytes of the largest group (compute dtype), in gathered
  // Full bytes of this rank's experts of every MoE layer (compute dtype, padded; stage 3): what
  // a shard cache holding every local expert holds. largest_expert: the largest one of them.
  uint64_t experts = 0, largest_expert = 0;
  // Full bytes of the dense groups stage 3 shards (compute dtype, padded): what a dense keep
  // holding every one holds (zero.keep_dense_bytes).
  uint64_t dense = 0;
  uint64_t cache = 0;        // the shard cache's budget (shard_cache.capacity_bytes when used)
  uint64_t activations = 0;  // one micro-batch's forward activations and backward temporaries
  // hpZ (zero.hpz_partition_size): the secondary shards, padded / m elements (compute dtype) of
  // every stage-3 group hpZ applies to (m: the group's ranks in one partition); every group's,
  // as when each is gathered and freed in a step (a bound: a group a residency keeps for the
  // step holds none; MemTag::Secondary).
  uint64_t secondary = 0;
  // Host bytes the engine's initialisation holds at once per rank (the largest group in fp32).
  uint64_t init_host = 0;
  int ranks_in_process = 1;  // ranks sharing this process's memory (threads on the CPU)
  int first_gpu = 0;  // CUDA: this process's ranks use GPUs first_gpu .. + ranks_in_process - 1
  bool host_is_device = true;  // CPU backend: device bytes are this process's memory

  uint64_t states() const { return params + grads + optim; }
  // What the run cannot do without: the states and the largest group gathered once.
  uint64_t certain() const { return states() + largest_group; }
  uint64_t per_rank() const { return states() + gathered + cache + activations + secondary; }
};

// [in] under_mpi: one rank per process (else every rank is a thread of this process).
MemoryEstimate estimate_memory(const Config& cfg, bool under_mpi);

// The memory this process may use, and where that bound comes from.
struct MemoryLimit {
  uint64_t bytes = 0;  // 0: unknown / unlimited
  std::string source;  // "the address-space limit (ulimit -v)", "the cgroup's memory.max", ...
  // The bound is on address space (RLIMIT_AS): reserved, not only touched, memory counts, so
  // each rank's runtime reservations (kRuntimeAddressSpacePerRank) count too.
  bool address_space = false;
};

// Address space one rank's runtime reserves beyond its buffers on the CPU backend: its stream
// threads' stacks, their malloc arenas and OpenBLAS's per-thread buffers (128 MiB each).
// Measured with examples/configs/tiny.json (2 ranks) under ulimit -v: 521 MiB left after
// start-up hangs inside OpenBLAS (its buffer mmap fails and it retries forever), 1.0 GiB runs.
constexpr uint64_t kRuntimeAddressSpacePerRank = 384ull << 20;
// The smallest of the address-space limit (RLIMIT_AS, less what is mapped now), the cgroup's
// memory.max (less memory.current) and /proc/meminfo's MemAvailable.
MemoryLimit machine_memory_limit();

// The memory one rank may use, for the "auto" sizes: the smallest known of train.memory_limit,
// the device's (CUDA: the least free memory of this process's GPUs, cudaMemGetInfo; the CPU
// backend: `machine` shared by the process's ranks, less their runtime address space) and
// `device_bytes` (the simulated GPU's memory; 0: none). 0 when nothing bounds it.
uint64_t rank_memory_budget(const Config& cfg, const MemoryEstimate& e, const MemoryLimit& machine,
                            uint64_t device_bytes);

// What shard_cache.capacity_bytes = "auto" resolves to for a rank with `rank_budget_bytes`
// (rank_memory_budget; 0: nothing bounds it): every local expert (MemoryEstimate::experts) when
// they fit in kAutoMemoryFraction of the budget beside the rest of the run's estimate (its
// per_rank() with the cache off) or cost nothing more (experts held from forward to backward
// are resident anyway), else the whole experts that do (0 when none). An explicit
// capacity is returned as it is. The cache is the dial between ZeRO-3's traffic and ZeRO-2's:
// by default it takes the memory the run does not need, as FSDP2 kept unresharded would.
// Ranks must agree on it (their gathers follow from it): under MPI the trainer takes the
// smallest over the processes.
uint64_t auto_cache_capacity(const Config& cfg, bool under_mpi, uint64_t rank_budget_bytes);

// Both resident-copy budgets as the run uses them: the shard cache's first (auto_cache_capacity,
// counting an "auto" dense keep as none), then zero.keep_dense_bytes = "auto": every sharded
// dense group (MemoryEstimate::dense) when it fits beside the rest and the cache, or costs
// nothing (one micro-batch per step keeps nothing), else the bytes left (0 when none). Explicit
// values are returned as they are.
struct AutoSizes {
  uint64_t cache_bytes = 0;       // shard_cache.capacity_bytes
  uint64_t keep_dense_bytes = 0;  // zero.keep_dense_bytes
};
AutoSizes auto_sizes(const Config& cfg, bool under_mpi, uint64_t rank_budget_bytes);
// The share of a rank's memory the "auto" budgets plan to fill with the whole estimate (which
// counts full working sets: on examples/plan/moe13b.json with every expert and dense group kept
// it says 75.3 GiB where the simulated run peaks at 71.0): the remainder covers the
// allocator's rounding and fragmentation and what the estimate does not see.
inline constexpr double kAutoMemoryFraction = 0.95;

// The run header's line(s): "memory   per rank: params ..., total ... of ... available".
std::string memory_estimate_text(const MemoryEstimate& e, const MemoryLimit& machine,
                                 uint64_t memory_limit);

// Throws OutOfMemoryError (one line: the numbers and what to change) when the certain part of
// the estimate exceeds train.memory_limit per rank, or, on the CPU backend, the ranks of this
// process exceed the machine's limit.
void check_memory_fits(const Config& cfg, const MemoryEstimate& e, const MemoryLimit& machine);

}  // namespace moezero::train
