// core/zero_step.cpp — ZeroEngine: group set-up, deterministic parameter initialisation,
// the AdamW step on this rank's optimizer ranges (global-norm clipping), and host read-back.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <list>

#include "core/error.h"
#include "core/ops.h"
#include "core/zero_engine_impl.h"

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
  const int stage = options.stage;
  st->params_sharded = stage == 3 && st->layout.numel() >= options.persistence_threshold_elems;
  st->grads_sharded = stage >= 2;
  st->opt_sharded = stage >= 1;
  st->padded = st->layout.padded_numel(st->n);
  st->shard_elems = st->padded / st->n;
  st->opt_offset = st->opt_sharded ? st->rank * st->shard_elems : 0;
  st->opt_elems = st->opt_sharded ? st->shard_elems : st->padded;
  st->gathered = device.create_event();
  st->expert = st->layout.spec().kind == GroupKind::Expert;
  groups.push_back(std::move(st));
}

void ZeroEngine::Impl::initialise() {
  Stream& cs = *streams.compute;
  Ops& ops = device.ops();
  const DType dt = options.compute_dtype;
  const bool fp32 = dt == DType::F32;
  std::list<std::vector<float>> keep_f32;  // host sources stay alive until the uploads ran
  std::list<std::vector<bf16>> keep_bf16;
  auto upload = [&](const Tensor& dst, const float* src, int64_t n) {
    if (dst.dtype() == DType::F32) {
      keep_f32.emplace_back(src, src + n);
      device.memcpy_async(dst.data(), keep_f32.back().data(), static_cast<size_t>(n) * 4, cs);
    } else {
      auto& v = keep_bf16.emplace_back(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = float_to_bf16(src[i]);
      device.memcpy_async(dst.data(), v.data(), static_cast<size_t>(n) * 2, cs);
    }
  };
  for (auto& p : groups) {
    GroupState& st = *p;
    const char* name = st.layout.spec().name.c_str();
    std::vector<float> full(static_cast<size_t>(st.padded), 0.0f);
    for (size_t i = 0; i < st.layout.param_count(); ++i)
      init_param(st.layout.spec().params[i], options.seed, full.data() + st.layout.offset(i));

    if (st.params_sharded) {
      const float* mine = full.data() + st.rank * st.shard_elems;
      if (fp32) {
        st.master = TensorBuffer(device, DType::F32, Shape{st.shard_elems}, MemTag::ParamShard, cs, name);
      } else {
        st.param_shard = TensorBuffer(device, dt, Shape{st.shard_elems}, MemTag::ParamShard, cs, name);
        upload(st.param_shard, mine, st.shard_elems);
        st.master = TensorBuffer(device, DType::F32, Shape{st.shard_elems}, MemTag::OptimState, cs, name);
      }
      upload(st.master, mine, st.shard_elems);
      st.master_view = st.master.view();
    } else {
      st.full_persistent = TensorBuffer(device, dt, Shape{st.padded}, MemTag::ParamShard, cs, name);
      upload(st.full_persistent, full.data(), st.padded);
      if (fp32) {
        st.master_view = st.full_persistent.view().view_elems(st.opt_offset, Shape{st.opt_elems});
      } else {
        st.master = TensorBuffer(device, DType::F32, Shape{st.opt_elems}, MemTag::OptimState, cs, name);
        upload(st.master, full.data() + st.opt_offset, st.opt_elems);
        st.master_view = st.master.view();
      }
    }
    st.grad_acc = TensorBuffer(device, dt, Shape{st.grads_sharded ? st.shard_elems : st.padded},
                               MemTag::Grad, cs, name);
    ops.fill(cs, st.grad_acc, 0.0);
    st.exp_avg = TensorBuffer(device, DType::F32, Shape{st.opt_elems}, MemTag::OptimState, cs, name);
    st.exp_avg_sq = TensorBuffer(device, DType::F32, Shape{st.opt_elems}, MemTag::OptimState, cs, name);
    ops.fill(cs, st.exp_avg, 0.0);
    ops.fill(cs, st.exp_avg_sq, 0.0);
  }
  params_updated->record(cs);
  cs.synchronize();
  std::vector<const Communicator*> comms;
  for (auto& p : groups)
    if (p->params_sharded && std::find(comms.begin(), comms.end(), p->comms.gather) == comms.end())
      comms.push_back(p->comms.gather);
  live_limit_per_comm = options.max_live_bytes / std::max<uint64_t>(1, comms.size());
}

namespace {
// The gradient accumulator over this rank's optimizer range (compute dtype).
Tensor grad_range(GroupState& st) {
  if (st.grads_sharded) return st.grad_acc.view();
  return st.grad_acc.view().view_elems(st.opt_offset, Shape{st.opt_elems});
}
}  // namespace

StepResult ZeroEngine::Impl::optimizer_step(const AdamWHyper& h) {
  Stream& cs = *streams.compute;
  Ops& ops = device.ops();
  const bool fp32 = options.compute_dtype == DType::F32;
  flush_buckets();
  end_passes();
  if (reduce_recorded) cs.wait(*reduce_done);
  {  // wasted prefetches may still be reading shards on the gather stream
    auto gather_idle = device.create_event();
    gather_idle->record(*streams.gather);
    cs.wait(*gather_idle);
  }

  // Global gradient norm: each element is counted on exactly one rank: the owner of its
  // optimizer range when the optimizer is sharded, else (stage 0: the group is replicated over
  // its sharding group) the group's first rank. Then one all-reduce over the world (experts
  // live on their EDP group only, so the world sum is what covers them).
  TensorBuffer norm_sq(device, DType::F32, Shape{1}, MemTag::Other, cs, "grad norm");
  ops.fill(cs, norm_sq, 0.0);
  for (auto& p : groups)
    if (p->opt_sharded || p->rank == 0) ops.sum_squares(cs, grad_range(*p), norm_sq);
  if (world_misc.size() > 1)
    world_misc.all_reduce(norm_sq.view().data(), norm_sq.view().data(), 1, DType::F32,
                          ReduceOp::Sum, cs);
  float sum_sq = 0.0f;
  device.memcpy_async(&sum_sq, norm_sq.view().data(), sizeof(float), cs);
  cs.synchronize();  // the one host sync of a step
  counters.stall_ms += collect_stall_ms();  // every timed wait is before this point
  collect_gather_ms();                      // every expert gather too (gather_idle above)

  StepResult r;
  r.grad_norm = std::sqrt(static_cast<double>(sum_sq));
  r.finite = std::isfinite(r.grad_norm);
  if (r.finite) {
    if (h.grad_clip > 0.0f && r.grad_norm > h.grad_clip)  // torch.nn.utils.clip_grad_norm_
      r.clip_scale = static_cast<float>(h.grad_clip / (r.grad_norm + 1e-6));
    ++step;
    for (auto& p : groups) {
      GroupState& st = *p;
      const int64_t opt_end = st.opt_offset + st.opt_elems;
      for (size_t i = 0; i < st.layout.param_count(); ++i) {
        const ParamSpec& ps = st.layout.spec().params[i];
        const int64_t lo = std::max(st.layout.offset(i), st.opt_offset);
        const int64_t hi = std::min(st.layout.offset(i) + ps.shape.numel(), opt_end);
        if (lo >= hi) continue;
        const int64_t local = lo - st.opt_offset, len = hi - lo;
        Tensor g = grad_range(st).view_elems(local, Shape{len});
        TensorBuffer g32;
        if (!fp32) {
          g32 = TensorBuffer(device, DType::F32, Shape{len}, MemTag::Other, cs, "grad f32");
          ops.cast(cs, g, g32);
          g = g32.view();
        }
        AdamWArgs a;
        a.param = st.master_view.view_elems(local, Shape{len});
        a.grad = g;
        a.exp_avg = st.exp_avg.view().view_elems(local, Shape{len});
        a.exp_avg_sq = st.exp_avg_sq.view().view_elems(local, Shape{len});
        if (!fp32)
          a.param_copy = st.params_sharded
                             ? st.param_shard.view().view_elems(local, Shape{len})
                             : st.full_persistent.view().view_elems(lo, Shape{len});
        a.lr = h.lr;
        a.beta1 = h.beta1;
        a.beta2 = h.beta2;
        a.eps = h.eps;
        a.weight_decay = ps.weight_decay ? h.weight_decay : 0.0f;
        a.step = step;
        a.grad_scale = r.clip_scale;
        ops.adamw(cs, a);
      }
    }
  }
  for (auto& p : groups) ops.fill(cs, p->grad_acc, 0.0);
  params_updated->record(cs);

  // Replicated parameters (stages 1-2, small groups at 3): each rank updated its range; gather.
  bool refreshed = false;
  for (auto& p : groups) {
    GroupState& st = *p;
    if (st.params_sharded || !st.opt_sharded || st.n == 1 || !r.finite) continue;
    if (!refreshed) streams.gather->wait(*params_updated);
    refreshed = true;
    char* base = static_cast<char*>(st.full_persistent.view().data());
    const size_t esz = dtype_size_bytes(options.compute_dtype);
    st.comms.gather->all_gather(base + static_cast<size_t>(st.opt_offset) * esz, base,
                                static_cast<size_t>(st.shard_elems), options.compute_dtype,
                                *streams.gather);
    counters.gathered_bytes += st.full_bytes(options.compute_dtype);
  }
  if (refreshed) replicated_ready->record(*streams.gather);
  return r;
}

std::vector<float> ZeroEngine::Impl::full_params_host(int g) {
  GroupState& st = group(g);
  Stream& gs = *streams.gather;
  TensorBuffer tmp(device, DType::F32, Shape{st.padded}, MemTag::Other, gs, "params to host");
  gs.wait(*params_updated);
  if (st.opt_sharded && st.n > 1)
    st.comms.gather->all_gather(st.master_view.data(), tmp.view().data(),
                                static_cast<size_t>(st.opt_elems), DType::F32, gs);
  else
    device.ops().cast(gs, st.master_view, tmp);
  std::vector<float> out(static_cast<size_t>(st.padded));
  device.memcpy_async(out.data(), tmp.view().data(), out.size() * sizeof(float), gs);
  gs.synchronize();
  out.resize(static_cast<size_t>(st.layout.numel()));
  return out;
}

}  // namespace moezero
