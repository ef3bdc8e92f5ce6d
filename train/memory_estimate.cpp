// train/memory_estimate.cpp — the memory a run needs and what the machine allows
// (memory_estimate.h).
#include "train/memory_estimate.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/allocator.h"
#include "core/error.h"
#include "core/param_group.h"
#include "core/process_groups.h"
#include "hf/hf_export.h"
#include "kernels/backend.h"
#include "model/transformer.h"
#include "moe/gather_strategy.h"

namespace moezero::train {

namespace {

uint64_t dtype_bytes(DType d) { return d == DType::F32 ? 4 : 2; }

// A quantised gather's comm buffers for one group (zero/int8_codec.h): its send part and the
// n parts it receives, each the shard's int8 values padded to 4 bytes plus 4 bytes per block.
uint64_t int8_wire_bytes(uint64_t shard_elems, int n, int64_t block) {
  const uint64_t blk = static_cast<uint64_t>(block);
  const uint64_t part = (shard_elems + 3) / 4 * 4 + 4 * ((shard_elems + blk - 1) / blk);
  return part * static_cast<uint64_t>(n + 1);
}

// The activations of one micro-batch on one rank, in elements of the compute dtype, and the
// logits (fp32) — the saved tensors of every layer (model/, layers/, moe/: alloc_act) plus the
// temporaries of the largest layer's backward — under train.activation_checkpointing:
//   none:      every layer's saved tensors;
//   selective: less the core attention's output (att, C per token) of every layer;
//   full:      every layer's input (C) and a MoE layer's kept routing (the router's
//              probabilities, 2E), plus one layer's saved tensors and its recomputed h and
//              output (2C), alive while that layer's backward runs.
uint64_t activation_bytes(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  const uint64_t b = dtype_bytes(cfg.train.dtype);
  const uint64_t world = static_cast<uint64_t>(cfg.parallel.world_size);
  const uint64_t rows =
      static_cast<uint64_t>(cfg.train.micro_batch_size) / std::max<uint64_t>(1, world);
  const uint64_t N = rows * static_cast<uint64_t>(m.seq_len);  // tokens of this rank
  const uint64_t C = static_cast<uint64_t>(m.d_model), F = static_cast<uint64_t>(m.d_ff);
  const uint64_t kvd = static_cast<uint64_t>(m.n_kv_heads) * (C / static_cast<uint64_t>(m.n_heads));
  const uint64_t k = static_cast<uint64_t>(std::max<int64_t>(1, m.top_k));
  const uint64_t E = static_cast<uint64_t>(std::max<int64_t>(0, m.num_experts));
  const ActivationCheckpointing ac = cfg.train.activation_checkpointing;
  // xn, q, att; k, v (selective: att is recomputed in backward)
  const uint64_t attn = (ac == ActivationCheckpointing::Selective ? 2 * C : 3 * C) + 2 * kvd;
  uint64_t per_token = 0, backward = 0, largest_layer = 0;
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const bool moe = model::is_moe_layer(m, static_cast<int>(l));
    const uint64_t routing = moe ? 2 * E : 0;  // the router's probabilities (MoE)
    // resid; attention; FFN: hn + gate + up (dense) or hn + k * (xr + gate + up + y) (the
    // dispatch's sorted copy xs is freed once sent: moe/token_dispatcher.cpp)
    const uint64_t layer = C + attn + (moe ? C + k * (2 * C + 2 * F) : C + 2 * F) + routing;
    per_token += ac == ActivationCheckpointing::Full ? C + routing : layer;
    largest_layer = std::max(largest_layer, layer);
    backward = std::max(backward, moe ? 2 * C + k * (C + 4 * F) : 3 * C + 4 * F);
  }
  if (ac == ActivationCheckpointing::Full) per_token += largest_layer + 2 * C;
  backward = std::max(backward, 2 * C + 2 * kvd + 2 * C);  // attention's dq, dk, dv, datt, dx
  const uint64_t head = C + 2 * static_cast<uint64_t>(m.vocab_size) * 4 / b;  // xn; logits, grad
  return N * (per_token + backward + head) * b;
}

uint64_t read_u64_file(const char* path, bool* ok) {
  std::ifstream in(path);
  std::string s;
  *ok = false;
  if (!(in >> s) || s == "max") return 0;
  try {
    size_t used = 0;
    const uint64_t v = std::stoull(s, &used);
    *ok = used == s.size();
    return v;
  } catch (const std::exception&) {
    return 0;
  }
}

// A field of /proc/self/status or /proc/meminfo in kB, as bytes (0 when absent).
uint64_t proc_kb_field(const char* path, const std::string& field) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream is(line.substr(field.size() + 1));
      uint64_t kb = 0;
      is >> kb;
      return kb * 1024;
    }
  return 0;
}

void take_min(MemoryLimit& m, uint64_t bytes, const char* source, bool address_space = false) {
  if (bytes == 0) return;
  if (m.bytes == 0 || bytes < m.bytes) m = MemoryLimit{bytes, source, address_space};
}

// What the ranks of this process certainly take from `machine`: their certain bytes, the
// initialisation's host copy and, against an address-space limit, the runtime's reservations.
uint64_t process_need(const MemoryEstimate& e, const MemoryLimit& machine) {
  const uint64_t per_rank =
      e.certain() + e.init_host + (machine.address_space ? kRuntimeAddressSpacePerRank : 0);
  return per_rank * static_cast<uint64_t>(e.ranks_in_process);
}

std::string gib(uint64_t bytes) { return format_bytes(bytes); }

}  // namespace

MemoryEstimate estimate_memory(const Config& cfg, bool under_mpi) {
  MemoryEstimate e;
  const ModelConfig& m = cfg.model;
  const int world = static_cast<int>(cfg.parallel.world_size);
  const int ep = static_cast<int>(std::max<int64_t>(1, cfg.parallel.ep_size));
  const int stage = static_cast<int>(cfg.zero.stage);
  const uint64_t b = dtype_bytes(cfg.train.dtype);
  const bool fp32 = cfg.train.dtype == DType::F32;
  uint64_t sharded_full = 0, largest_sharded = 0, largest_padded = 0, expert_full = 0;
  uint64_t padded_total = 0;
  uint64_t largest_wire = 0;  // zero.quantized_weights: the largest group's wire staging
  int experts_seen = 0;
  // hpZ: a group's ranks in one secondary partition (GroupComms::secondary; 0 where hpZ does
  // not apply: one or all of the group's ranks, or hpZ off). Every EDP group has as many.
  const int hpz = static_cast<int>(cfg.zero.hpz_partition_size);
  const auto members = [&](const ProcessGroup& g) {
    const int k = hpz > 1 ? secondary_partition_members(g, hpz) : 0;
    return k > 1 && k < g.size() ? k : 0;
  };
  const int dense_m = members(make_world_group(world));
  const int expert_m =
      m.num_experts > 0
          ? members(ProcessGroups(world, ep, static_cast<int>(m.num_experts)).edp_group_of(0))
          : 0;
  const int experts_per_rank = m.num_experts > 0 ? static_cast<int>(m.num_experts) / ep : 0;
  for (const GroupSpec& g : hf::full_param_groups(m)) {
    const bool expert = g.kind == GroupKind::Expert;
    // With expert parallelism a rank holds num_experts / ep_size experts (counted as the first
    // ones: every expert has the same shape), sharded over its EDP group.
    if (expert && experts_seen++ % static_cast<int>(m.num_experts) >= experts_per_rank) continue;
    const int n = expert ? world / ep : world;
    const GroupLayout layout(g);
    const uint64_t padded = static_cast<uint64_t>(layout.padded_numel(n));
    const uint64_t shard = padded / static_cast<uint64_t>(n);
    const bool params_sharded =
        stage == 3 && (n > 1 || cfg.zero.shard_single_rank) &&
        layout.numel() >= static_cast<int64_t>(cfg.zero.param_persistence_threshold);
    const uint64_t opt_elems = stage >= 1 ? shard : padded;
    if (params_sharded) {
      e.params += shard * b;            // shard (the fp32 master itself when fp32)
      if (!fp32) e.optim += shard * 4;  // fp32 master
      sharded_full += padded * b;
      if (expert) {
        expert_full += padded * b;
        e.largest_expert = std::max(e.largest_expert, padded * b);
      }
      largest_sharded = std::max(largest_sharded, padded * b);
      if (cfg.zero.quantized_weights)
        largest_wire =
            std::max(largest_wire, int8_wire_bytes(shard, n, cfg.zero.quantization_block));
      const int sm = expert ? expert_m : dense_m;
      if (sm > 0) e.secondary += padded / static_cast<uint64_t>(sm) * b;
    } else {
      e.params += padded * b;
      if (!fp32) e.optim += opt_elems * 4;
    }
    e.grads += (stage >= 1 ? shard : padded) * b;
    e.optim += 2 * opt_elems * 4;  // AdamW moments
    largest_padded = std::max(largest_padded, padded);
    padded_total += padded;
  }
  e.largest_group = largest_sharded;
  e.experts = expert_full;
  e.dense = sharded_full - expert_full;
  const uint64_t live = std::max<uint64_t>(cfg.zero.max_live_parameters, 2 * largest_sharded);
  // fp32 full gradients: below stage 2 every group's lives until the optimizer step (stage 1
  // defers the reduction to it); from stage 2 those of the groups in backward, until reduced.
  // Stage 1 with zero.grad_accum_dtype=param sums them in the compute dtype instead, so only
  // the groups in backward hold an fp32 gradient (as from stage 2).
  const uint64_t in_backward = std::min(padded_total * 4, 4 * largest_padded * 4);
  const bool accum_in_param =
      stage == 1 && !fp32 && cfg.zero.grad_accum_dtype == GradAccumDtype::Param;
  if (stage == 1) e.grad_accum = padded_total * (accum_in_param ? b : 4);
  const uint64_t grad_full = accum_in_param ? e.grad_accum + in_backward
                             : stage <= 1   ? padded_total * 4
                                            : in_backward;
  // The reduce bucket's send and receive buffers; zero.quantized_gradients adds the node sums,
  // the int8 wire buffers and (bf16) an fp32 sum: at most about one bucket more.
  const uint64_t bucket = std::min<uint64_t>(cfg.zero.reduce_bucket_size, largest_padded * b);
  const moe::GatherStrategy& gather = moe::gather_strategy(cfg.zero.moe_gather);
  if (m.num_experts > 0 && gather.uses_shard_cache())
    e.cache = std::min<uint64_t>(cfg.shard_cache.capacity_bytes, expert_full);  // never more
                                                                                // than every expert
  // Experts held from forward to backward without a byte limit (fsdp's block; experts with
  // zero.reshard_after_forward=false): every local expert at most, beyond the live limit, less
  // what the cache budget counts already (a hit is the cache's buffer, not a new one).
  const uint64_t held =
      m.num_experts > 0 && gather.holds_after_forward(cfg.zero.reshard_after_forward)
          ? expert_full - e.cache
          : 0;
  e.gathered = std::min(sharded_full, live + held) + grad_full +
               (cfg.zero.quantized_gradients ? 3 : 2) * bucket + largest_wire;
  // Dense groups kept gathered between micro-batches (zero.keep_dense_bytes), counted with the
  // cache: resident parameter copies beyond the live limit.
  if (cfg.train.grad_accum_steps > 1)
    e.cache += std::min<uint64_t>(cfg.zero.keep_dense_bytes, sharded_full - expert_full);
  e.activations = activation_bytes(cfg);
  e.init_host = largest_padded * 4;
  e.host_is_device = cfg.parallel.backend == BackendKind::Cpu;
  e.ranks_in_process = under_mpi ? 1 : world;
  return e;
}

MemoryLimit machine_memory_limit() {
  MemoryLimit lim;
  rlimit rl{};
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const uint64_t mapped = proc_kb_field("/proc/self/status", "VmSize");
    const uint64_t cap = static_cast<uint64_t>(rl.rlim_cur);
    take_min(lim, cap > mapped ? cap - mapped : 1, "the address-space limit (ulimit -v)", true);
  }
  bool ok = false;
  const uint64_t max2 = read_u64_file("/sys/fs/cgroup/memory.max", &ok);
  if (ok) {
    bool ok2 = false;
    const uint64_t cur = read_u64_file("/sys/fs/cgroup/memory.current", &ok2);
    take_min(lim, ok2 && max2 > cur ? max2 - cur : max2, "the cgroup's memory.max");
  } else {
    const uint64_t max1 = read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes", &ok);
    if (ok && max1 < (uint64_t{1} << 60)) take_min(lim, max1, "the cgroup's memory limit");
  }
  take_min(lim, proc_kb_field("/proc/meminfo", "MemAvailable"), "MemAvailable (/proc/meminfo)");
  return lim;
}

uint64_t rank_memory_budget(const Config& cfg, const MemoryEstimate& e, const MemoryLimit& machine,
                            uint64_t device_bytes) {
  uint64_t budget = 0;
  const auto take = [&budget](uint64_t bytes) {
    if (bytes > 0) budget = budget == 0 ? bytes : std::min(budget, bytes);
  };
  take(cfg.train.memory_limit);
  take(device_bytes);
  if (cfg.parallel.backend == BackendKind::Cuda) {
    const int end = std::min(e.first_gpu + e.ranks_in_process, cuda_device_count());
    for (int g = e.first_gpu; g < end; ++g) take(cuda_free_memory(g));
  } else if (e.host_is_device && machine.bytes > 0) {
    const uint64_t ranks = static_cast<uint64_t>(std::max(1, e.ranks_in_process));
    const uint64_t runtime = machine.address_space ? kRuntimeAddressSpacePerRank : 0;
    take(std::max<uint64_t>(machine.bytes / ranks, runtime + 1) - runtime);
  }
  return budget;
}

namespace {

// What an "auto" budget gets: `all` (the bytes that keep everything) when nothing bounds the
// rank (budget 0), when keeping everything fits kAutoMemoryFraction of the budget, or when it
// costs nothing more than keeping none (need_all <= need_none); else the bytes left beside
// need_none, or 0.
uint64_t fill(uint64_t all, uint64_t need_none, uint64_t need_all, uint64_t rank_budget_bytes) {
  const double usable = kAutoMemoryFraction * static_cast<double>(rank_budget_bytes);
  if (all == 0 || rank_budget_bytes == 0 || static_cast<double>(need_all) <= usable ||
      need_all <= need_none)
    return all;
  const double rest = static_cast<double>(need_none);
  return usable <= rest ? 0 : static_cast<uint64_t>(usable - rest);
}

}  // namespace

uint64_t auto_cache_capacity(const Config& cfg, bool under_mpi, uint64_t rank_budget_bytes) {
  if (cfg.shard_cache.capacity_bytes != kAutoBytes) return cfg.shard_cache.capacity_bytes;
  Config c = cfg;
  c.shard_cache.capacity_bytes = 0;
  const MemoryEstimate none = estimate_memory(c, under_mpi);
  c.shard_cache.capacity_bytes = none.experts;
  // Experts held from forward to backward without a limit (fsdp's block,
  // zero.reshard_after_forward=false) are resident anyway: keeping them costs nothing more.
  const uint64_t bytes = fill(none.experts, none.per_rank(),
                              estimate_memory(c, under_mpi).per_rank(), rank_budget_bytes);
  return bytes == none.experts ? bytes : bytes / none.largest_expert * none.largest_expert;
}

AutoSizes auto_sizes(const Config& cfg, bool under_mpi, uint64_t rank_budget_bytes) {
  const bool dense_auto = cfg.zero.keep_dense_bytes == kAutoBytes;
  Config c = cfg;
  if (dense_auto) c.zero.keep_dense_bytes = 0;  // the experts come first
  AutoSizes a{auto_cache_capacity(c, under_mpi, rank_budget_bytes), cfg.zero.keep_dense_bytes};
  if (!dense_auto) return a;
  c.shard_cache.capacity_bytes = a.cache_bytes;
  const MemoryEstimate none = estimate_memory(c, under_mpi);  // no dense keep
  c.zero.keep_dense_bytes = none.dense;
  // One micro-batch per step keeps nothing between micro-batches: every group costs nothing.
  a.keep_dense_bytes = fill(none.dense, none.per_rank(), estimate_memory(c, under_mpi).per_rank(),
                            rank_budget_bytes);
  return a;
}

std::string memory_estimate_text(const MemoryEstimate& e, const MemoryLimit& machine,
                                 uint64_t memory_limit) {
  std::ostringstream os;
  os << "  memory   per rank: params " << gib(e.params) << ", grads " << gib(e.grads)
     << ", optimizer " << gib(e.optim) << ", gathered " << gib(e.gathered) << ", cache "
     << gib(e.cache) << ", activations " << gib(e.activations);
  if (e.secondary > 0) os << ", secondary " << gib(e.secondary);
  os << " = " << gib(e.per_rank());
  if (memory_limit > 0) os << " (train.memory_limit " << gib(memory_limit) << ")";
  if (e.host_is_device) {
    const uint64_t total =
        e.per_rank() * static_cast<uint64_t>(e.ranks_in_process) +
        (machine.address_space ? kRuntimeAddressSpacePerRank * uint64_t(e.ranks_in_process) : 0);
    os << "\n           this process: " << e.ranks_in_process << " rank(s) x " << gib(e.per_rank())
       << (machine.address_space
               ? " + runtime address space " + gib(kRuntimeAddressSpacePerRank) + " per rank"
               : std::string())
       << " = " << gib(total);
    if (machine.bytes > 0) {
      os << " of " << gib(machine.bytes) << " (" << machine.source << ")";
      if (total > machine.bytes) os << ": may not fit";
    }
  }
  return os.str();
}

void check_memory_fits(const Config& cfg, const MemoryEstimate& e, const MemoryLimit& machine) {
  const std::string what_to_change =
      "lower the need (zero.stage 3, a larger parallel.world_size, a smaller "
      "train.micro_batch_size, zero.max_live_parameters or shard_cache.capacity_bytes, "
      "train.dtype bf16, a smaller model)";
  const uint64_t limit = cfg.train.memory_limit;
  if (limit > 0 && e.certain() > limit)
    MOEZERO_THROW_AS(OutOfMemoryError, "OutOfMemoryError: the run needs at least ",
                     gib(e.certain()), " per rank (params ", gib(e.params), ", grads ",
                     gib(e.grads), ", optimizer ", gib(e.optim), ", largest gathered group ",
                     gib(e.largest_group), "; estimate with activations and working set ",
                     gib(e.per_rank()), "), over train.memory_limit ", gib(limit), ": ",
                     what_to_change, " or raise train.memory_limit");
  if (cfg.parallel.backend == BackendKind::Cuda) {  // this process's GPUs (first_gpu, ...)
    const int end = std::min(e.first_gpu + e.ranks_in_process, cuda_device_count());
    int at = -1;
    uint64_t least = 0;
    for (int g = e.first_gpu; g < end; ++g) {
      const uint64_t f = cuda_free_memory(g);
      if (f > 0 && (at < 0 || f < least)) {
        at = g;
        least = f;
      }
    }
    if (at >= 0 && e.certain() > least)
      MOEZERO_THROW_AS(OutOfMemoryError, "OutOfMemoryError: the run needs at least ",
                       gib(e.certain()), " per rank (params ", gib(e.params), ", grads ",
                       gib(e.grads), ", optimizer ", gib(e.optim), ", largest gathered group ",
                       gib(e.largest_group), "), but GPU ", at, " has ", gib(least),
                       " free (cudaMemGetInfo): ", what_to_change);
  }
  if (!e.host_is_device || machine.bytes == 0) return;
  const uint64_t ranks = static_cast<uint64_t>(e.ranks_in_process);
  const uint64_t need = process_need(e, machine);
  const std::string runtime =
      machine.address_space ? ", runtime address space " + gib(kRuntimeAddressSpacePerRank) : "";
  if (need > machine.bytes)
    MOEZERO_THROW_AS(OutOfMemoryError, "OutOfMemoryError: the run needs at least ", gib(need),
                     " in this process (", ranks, " rank(s) x (params ", gib(e.params), ", grads ",
                     gib(e.grads), ", optimizer ", gib(e.optim), ", largest gathered group ",
                     gib(e.largest_group), ", initialisation ", gib(e.init_host), runtime,
                     "); buffers with activations and working set ", gib(e.per_rank() * ranks),
                     "), but ", machine.source, " allows ", gib(machine.bytes), ": ",
                     what_to_change, ", or raise that limit");
}

}  // namespace moezero::train
