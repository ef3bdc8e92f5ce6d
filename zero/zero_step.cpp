// zero/zero_step.cpp — ZeroEngine: group set-up, deterministic parameter initialisation,
// and the AdamW step on this rank's optimizer ranges (global-norm clipping).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <list>

#include "core/error.h"
#include "core/ops.h"
#include "zero/zero_engine_impl.h"

namespace moezero {

using zero_detail::GroupState;

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Values of one parameter: a pure function of (seed, name), whatever the world size.
void init_param(const ParamSpec& p, uint64_t seed, float* dst) {
  const int64_t n = p.shape.numel();
  switch (p.init) {
    case ParamInit::Ones: std::fill(dst, dst + n, 1.0f); return;
    case ParamInit::Zeros: std::fill(dst, dst + n, 0.0f); return;
    case ParamInit::Normal: break;
  }
  uint64_t state = splitmix64(seed ^ fnv1a(p.name));
  auto uniform = [&] {  // (0, 1], 53 bits
    state = splitmix64(state);
    return (static_cast<double>(state >> 11) + 1.0) * 0x1.0p-53;
  };
  for (int64_t i = 0; i < n; i += 2) {  // Box-Muller, two normals per draw
    double r = std::sqrt(-2.0 * std::log(uniform())), t = 2.0 * M_PI * uniform();
    dst[i] = static_cast<float>(r * std::cos(t) * p.init_std);
    if (i + 1 < n) dst[i + 1] = static_cast<float>(r * std::sin(t) * p.init_std);
  }
}

}  // namespace

void ZeroEngine::Impl::add_group(GroupSpec spec, GroupComms comms) {
  group_counters.emplace_back();
  auto st = std::make_unique<GroupState>();
  st->layout = GroupLayout(std::move(spec));
  st->comms = comms;
  st->n = comms.gather->size();
  st->rank = comms.gather->rank();
  MOEZERO_CHECK(comms.reduce->size() == st->n && comms.reduce->rank() == st->rank, "group '",
                st->layout.spec().name, "': gather and reduce communicators differ in group");
  const int stage = options.stage();
  // A group held by one rank has nothing to shard or gather (FSDP switches to NO_SHARD at world
  // size 1 for the same reason): its parameters stay gathered, as below the persistence
  // threshold, and its gradients skip the collective (flush_bucket).
  st->params_sharded = stage == 3 && (st->n > 1 || options.zero.shard_single_rank) &&
                       st->layout.numel() >= options.zero.param_persistence_threshold;
  st->grads_sharded = stage >= 1;
  st->grads_deferred = stage == 1;
  st->opt_sharded = stage >= 1;
  st->padded = st->layout.padded_numel(st->n);
  st->shard_elems = st->padded / st->n;
  st->opt_offset = st->opt_sharded ? st->rank * st->shard_elems : 0;
  st->opt_elems = st->opt_sharded ? st->shard_elems : st->padded;
  if (comms.reduce_intra || comms.reduce_cross) {
    MOEZERO_CHECK(comms.reduce_intra && comms.reduce_cross, "group '", st->layout.spec().name,
                  "': a two-hop reduction needs both reduce_intra and reduce_cross");
    st->two_hop.emplace(*comms.reduce_intra, *comms.reduce_cross, options.inter_node_hop,
                        options.zero.quantization_block);
    MOEZERO_CHECK(st->two_hop->per_node() * st->two_hop->nodes() == st->n &&
                      st->two_hop->group_rank() == st->rank,
                  "group '", st->layout.spec().name, "': the two-hop communicators (",
                  comms.reduce_intra->group().str(), ", ", comms.reduce_cross->group().str(),
                  ") do not split ", comms.reduce->group().str());
  }
  st->gathered = device.create_event();
  st->expert = st->layout.spec().kind == GroupKind::Expert;
  // hpZ: only where the partition holds more than one and fewer than all of the group's ranks
  // (one: the secondary shard would be the whole group; all: the gather stays inside anyway).
  const Communicator* sec = comms.secondary;
  if (!st->params_sharded || !sec || sec->size() <= 1 || sec->size() >= st->n)
    st->comms.secondary = nullptr;
  else
    MOEZERO_CHECK(st->n % sec->size() == 0 && sec->group().contains(comms.gather->global_rank()),
                  "group '", st->layout.spec().name, "': the hpZ partition ", sec->group().str(),
                  " does not split its sharding group ", comms.gather->group().str(), " evenly");
  groups.push_back(std::move(st));
}

namespace {

// Host-to-device copies on one stream whose host sources stay alive as long as this object:
// the caller synchronises the stream before it goes.
class HostUploads {
 public:
  HostUploads(Device& device, Stream& stream) : device_(device), stream_(stream) {}
  // [out] dst (f32 or bf16) = [in] src[0, n), converted to dst's dtype on the host.
  void upload(const Tensor& dst, const float* src, int64_t n) {
    if (dst.dtype() == DType::F32) {
      f32_.emplace_back(src, src + n);
      device_.memcpy_async(dst.data(), f32_.back().data(), static_cast<size_t>(n) * 4, stream_);
    } else {
      auto& v = bf16_.emplace_back(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = float_to_bf16(src[i]);
      device_.memcpy_async(dst.data(), v.data(), static_cast<size_t>(n) * 2, stream_);
    }
  }

 private:
  Device& device_;
  Stream& stream_;
  std::list<std::vector<float>> f32_;
  std::list<std::vector<bf16>> bf16_;
};

// Allocates one group's model states on `cs` and uploads its initial parameters (see
// init_param); gradient accumulator and AdamW moments start at zero.
void init_group(GroupState& st, const ZeroOptions& options, Device& device, Stream& cs,
                HostUploads& up) {
  const DType dt = options.compute_dtype;
  const bool fp32 = dt == DType::F32;
  const char* name = st.layout.spec().name.c_str();
  // Simulated: nothing is uploaded, so the host copy is not made (it is the full group).
  const bool values = options.materialize;
  std::vector<float> full(values ? static_cast<size_t>(st.padded) : 0, 0.0f);
  for (size_t i = 0; i < st.layout.param_count() && values; ++i)
    init_param(st.layout.spec().params[i], options.seed, full.data() + st.layout.offset(i));

  if (st.params_sharded) {
    const float* mine = values ? full.data() + st.rank * st.shard_elems : nullptr;
    if (fp32) {
      st.master =
          TensorBuffer(device, DType::F32, Shape{st.shard_elems}, MemTag::ParamShard, cs, name);
    } else {
      st.param_shard =
          TensorBuffer(device, dt, Shape{st.shard_elems}, MemTag::ParamShard, cs, name);
      if (values) up.upload(st.param_shard, mine, st.shard_elems);
      st.master =
          TensorBuffer(device, DType::F32, Shape{st.shard_elems}, MemTag::OptimState, cs, name);
    }
    if (values) up.upload(st.master, mine, st.shard_elems);
    st.master_view = st.master.view();
  } else {
    st.full_persistent = TensorBuffer(device, dt, Shape{st.padded}, MemTag::ParamShard, cs, name);
    if (values) up.upload(st.full_persistent, full.data(), st.padded);
    if (fp32) {
      st.master_view = st.full_persistent.view().view_elems(st.opt_offset, Shape{st.opt_elems});
    } else {
      st.master =
          TensorBuffer(device, DType::F32, Shape{st.opt_elems}, MemTag::OptimState, cs, name);
      if (values) up.upload(st.master, full.data() + st.opt_offset, st.opt_elems);
      st.master_view = st.master.view();
    }
  }
  Ops& ops = device.ops();
  st.grad_acc = TensorBuffer(device, dt, Shape{st.grads_sharded ? st.shard_elems : st.padded},
                             MemTag::Grad, cs, name);
  ops.fill(cs, st.grad_acc, 0.0);
  st.exp_avg = TensorBuffer(device, DType::F32, Shape{st.opt_elems}, MemTag::OptimState, cs, name);
  st.exp_avg_sq =
      TensorBuffer(device, DType::F32, Shape{st.opt_elems}, MemTag::OptimState, cs, name);
  ops.fill(cs, st.exp_avg, 0.0);
  ops.fill(cs, st.exp_avg_sq, 0.0);
}

// The largest `value` of any rank of `comm` (one all-reduce on `cs`, then a host sync).
int max_over_ranks(Communicator& comm, Device& device, Stream& cs, int value) {
  if (comm.size() <= 1) return value;
  float count = static_cast<float>(value);
  TensorBuffer c(device, DType::F32, Shape{1}, MemTag::Other, cs, "group count");
  device.memcpy_async(c.view().data(), &count, sizeof count, cs);
  comm.all_reduce(c.view().data(), c.view().data(), 1, DType::F32, ReduceOp::Max, cs);
  device.memcpy_async(&count, c.view().data(), sizeof count, cs);
  cs.synchronize();
  return static_cast<int>(count);
}

}  // namespace

void ZeroEngine::Impl::initialise() {
  Stream& cs = *streams.compute;
  {
    HostUploads uploads(device, cs);
    for (auto& p : groups) init_group(*p, options, device, cs, uploads);
    params_updated->record(cs);
    cs.synchronize();  // the uploads ran: their host sources may go
  }
  fetch.initialise();
  // Slots of the per-group norm vector: the largest group count of any rank (EP ranks hold
  // different experts, but the all-gather needs one count).
  norm_slots = max_over_ranks(world_misc, device, cs, static_cast<int>(groups.size()));
}

namespace {
// The gradient accumulator over this rank's optimizer range (compute dtype).
Tensor grad_range(GroupState& st) {
  if (st.grads_sharded) return st.grad_acc.view();
  return st.grad_acc.view().view_elems(st.opt_offset, Shape{st.opt_elems});
}
// This rank's shard of the reduced gradient: its 1/n slice (stages 2-3: what it holds; stage
// 1: its optimizer range; stage 0: the same slice of the replicated gradient).
Tensor shard_range(GroupState& st) {
  if (st.grads_sharded) return st.grad_acc.view();
  return st.grad_acc.view().view_elems(st.rank * st.shard_elems, Shape{st.shard_elems});
}
}  // namespace

void ZeroEngine::Impl::run_deferred_checks(std::vector<int64_t>& res, bool norm_finite) {
  // A non-finite element of any gradient makes the norm non-finite (inf and NaN survive the
  // sum of squares), so a finite norm means every deferred scan would have found nothing.
  std::vector<size_t> todo;
  for (size_t k = 0; k < checks.size(); ++k) {
    if (!checks[k].deferred) continue;
    if (norm_finite) {
      res[k * 3] = -1;  // what find_nonfinite writes for a finite tensor
      res[k * 3 + 1] = 0;
      res[k * 3 + 2] = static_cast<int64_t>(NonFiniteKind::None);
    } else {
      todo.push_back(k);
    }
  }
  if (todo.empty()) return;
  Stream& cs = *streams.compute;
  for (size_t k : todo) {  // grad_acc still holds exactly the gradient grad_ready saw
    const Tensor slot = check_chunks[k / kChecksPerChunk].view().view_elems(
        static_cast<int64_t>(k % kChecksPerChunk) * 3, Shape{3});
    device.ops().find_nonfinite(cs, group(checks[k].group).grad_acc.view(), slot);
    device.memcpy_async(res.data() + k * 3, slot.data(), 3 * sizeof(int64_t), cs);
  }
  cs.synchronize();
}

std::optional<NonFiniteGrad> ZeroEngine::Impl::resolve_checks(const std::vector<int64_t>& res) {
  std::optional<NonFiniteGrad> out;
  int64_t bad = 0;
  for (size_t k = 0; k < checks.size(); ++k) {
    const int64_t at = res[k * 3], count = res[k * 3 + 1], kind = res[k * 3 + 2];
    if (at < 0) continue;
    ++bad;
    if (out) continue;
    NonFiniteGrad f;
    f.group = checks[k].group;
    f.flat_index = f.index = at;
    f.kind = kind;
    f.count = count;
    f.micro_batch = checks[k].micro_batch;
    f.order = static_cast<int64_t>(k);
    const GroupLayout& l = group(f.group).layout;
    for (size_t i = 0; i < l.param_count(); ++i) {
      const int64_t off = l.offset(i), n = l.spec().params[i].shape.numel();
      if (at >= off && at < off + n) {
        f.param = static_cast<int>(i);
        f.index = at - off;
      }
    }
    out = f;
  }
  if (out) out->bad_gradients = bad;
  return out;
}

void ZeroEngine::Impl::drain_passes() {
  Stream& cs = *streams.compute;
  reduce_local_leftovers();
  flush_buckets();
  fetch.end_passes();
  if (reduce_recorded) wait_on_comm(cs, *reduce_done, "wait reduce-scatter");
  // Wasted prefetches may still be reading shards on the gather stream.
  auto gather_idle = device.create_event();
  gather_idle->record(*streams.gather);
  wait_on_comm(cs, *gather_idle, "wait gathers");
}

ZeroEngine::Impl::StepReadback ZeroEngine::Impl::enqueue_readback(StepResult& r) {
  // Gradient norms (docs/health.md): the squared norm of each group's shard on this rank, one
  // slot per group, all-gathered over the world (experts live on their EDP group only, so the
  // world is what covers them): every element of every gradient is counted exactly once, on
  // the rank whose shard holds it. Plus the non-finite check results of the step's gradients.
  Stream& cs = *streams.compute;
  Ops& ops = device.ops();
  StepReadback rb;
  const int world = world_misc.size();
  rb.sq =
      TensorBuffer(device, DType::F32, Shape{norm_slots}, MemTag::Other, cs, "grad norm squares");
  ops.fill(cs, rb.sq, 0.0);
  for (size_t g = 0; g < groups.size(); ++g)
    ops.sum_squares(cs, shard_range(*groups[g]),
                    rb.sq.view().view_elems(static_cast<int64_t>(g), Shape{1}));
  Tensor all_view = rb.sq.view();
  if (world > 1) {
    rb.all_sq = TensorBuffer(device, DType::F32, Shape{int64_t{world} * norm_slots}, MemTag::Other,
                             cs, "grad norm squares, all ranks");
    world_misc.all_gather(rb.sq.view().data(), rb.all_sq.view().data(),
                          static_cast<size_t>(norm_slots), DType::F32, cs);
    all_view = rb.all_sq.view();
  }
  r.shard_sq.resize(static_cast<size_t>(all_view.numel()));
  r.shard_sq_slots = norm_slots;
  device.memcpy_async(r.shard_sq.data(), all_view.data(), all_view.size_bytes(), cs);
  rb.check_results.resize(checks.size() * 3);
  for (size_t c = 0; c * kChecksPerChunk < checks.size(); ++c) {
    const size_t first = c * kChecksPerChunk;
    const size_t n = std::min<size_t>(kChecksPerChunk, checks.size() - first);
    device.memcpy_async(rb.check_results.data() + first * 3, check_chunks[c].view().data(),
                        n * 3 * sizeof(int64_t), cs);
  }
  return rb;
}

void ZeroEngine::Impl::apply_adamw(const AdamWHyper& h, float grad_scale) {
  Stream& cs = *streams.compute;
  const bool fp32 = options.compute_dtype == DType::F32;
  // Every shard of this rank in one multi-tensor call (one parallel loop on the CPU).
  std::vector<AdamWArgs> entries;
  for (auto& p : groups) {
    GroupState& st = *p;
    const int64_t opt_end = st.opt_offset + st.opt_elems;
    for (size_t i = 0; i < st.layout.param_count(); ++i) {
      const ParamSpec& ps = st.layout.spec().params[i];
      const int64_t lo = std::max(st.layout.offset(i), st.opt_offset);
      const int64_t hi = std::min(st.layout.offset(i) + ps.shape.numel(), opt_end);
      if (lo >= hi) continue;
      const int64_t local = lo - st.opt_offset, len = hi - lo;
      // bf16: the op widens the gradient itself (exactly, as a cast to f32 would).
      const Tensor g = grad_range(st).view_elems(local, Shape{len});
      AdamWArgs a;
      a.param = st.master_view.view_elems(local, Shape{len});
      a.grad = g;
      a.exp_avg = st.exp_avg.view().view_elems(local, Shape{len});
      a.exp_avg_sq = st.exp_avg_sq.view().view_elems(local, Shape{len});
      if (!fp32)
        a.param_copy = st.params_sharded ? st.param_shard.view().view_elems(local, Shape{len})
                                         : st.full_persistent.view().view_elems(lo, Shape{len});
      a.lr = h.lr;
      a.beta1 = h.beta1;
      a.beta2 = h.beta2;
      a.eps = h.eps;
      a.weight_decay = ps.weight_decay ? h.weight_decay : 0.0f;
      a.step = step;
      a.grad_scale = grad_scale;
      entries.push_back(a);
    }
  }
  device.ops().adamw_multi(cs, entries);
}

void ZeroEngine::Impl::refresh_replicated() {
  bool refreshed = false;
  for (auto& p : groups) {
    GroupState& st = *p;
    if (st.params_sharded || !st.opt_sharded || st.n == 1) continue;
    if (!refreshed) streams.gather->wait(*params_updated);
    refreshed = true;
    char* base = static_cast<char*>(st.full_persistent.view().data());
    const size_t esz = dtype_size_bytes(options.compute_dtype);
    st.comms.gather->all_gather(base + static_cast<size_t>(st.opt_offset) * esz, base,
                                static_cast<size_t>(st.shard_elems), options.compute_dtype,
                                *streams.gather);
    counters.gathered_bytes += st.full_bytes(options.compute_dtype);
    counters.gathered_wire_bytes += st.full_bytes(options.compute_dtype);  // no codec here
  }
  if (refreshed) replicated_ready->record(*streams.gather);
}

StepResult ZeroEngine::Impl::optimizer_step(const AdamWHyper& h) {
  Stream& cs = *streams.compute;
  drain_passes();
  StepResult r;
  StepReadback rb = enqueue_readback(r);          // its buffers live to the end of the step
  cs.synchronize();                               // the one host sync of a step
  counters.stall_ms += fetch.collect_stall_ms();  // every timed wait is before this point
  fetch.collect_gather_ms();                      // every expert gather too (drain_passes)
  double sum_sq = 0.0;  // rank-major, the same order (and so the same value) on every rank
  for (float v : r.shard_sq) sum_sq += static_cast<double>(v);
  r.grad_norm = std::sqrt(sum_sq);
  r.finite = std::isfinite(r.grad_norm);
  run_deferred_checks(rb.check_results, r.finite);
  r.nonfinite = resolve_checks(rb.check_results);
  checks.clear();
  micro_batch = 0;
  ++step_calls;
  if (r.finite) {
    if (h.grad_clip > 0.0f && r.grad_norm > h.grad_clip)  // torch.nn.utils.clip_grad_norm_
      r.clip_scale = static_cast<float>(h.grad_clip / (r.grad_norm + 1e-6));
    ++step;
    apply_adamw(h, r.clip_scale);
  }
  for (auto& p : groups) device.ops().fill(cs, p->grad_acc, 0.0);
  params_updated->record(cs);
  // Replicated parameters (stages 1-2, small groups at 3): each rank updated its range; gather.
  if (r.finite) refresh_replicated();
  return r;
}

}  // namespace moezero
