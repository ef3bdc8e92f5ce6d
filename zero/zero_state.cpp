// zero/zero_state.cpp — ZeroEngine's state to and from the host: for checkpoints, which
// element range of each group this rank writes, export of masters and AdamW moments, import
// from any source (any world size, EP size or stage wrote it) into this rank's shards, and the
// recorded prefetch orders; a group's full parameters read back or set. See zero_engine.h.
//
// Why import reproduces the uninterrupted run bit for bit: between steps a rank's state is
// exactly (masters, moments, step count); the compute-dtype copies are a cast of the masters
// made by the same kernel the optimizer uses (ops.cast == the AdamW param_copy conversion);
// padding elements are 0 in a fresh engine and stay 0 under AdamW (zero gradient, zero param),
// so they are imported as 0; gradient accumulators are zero after step().
#include <algorithm>

#include "core/error.h"
#include "core/ops.h"
#include "zero/zero_engine_impl.h"

namespace moezero {

using zero_detail::GroupState;

ZeroEngine::StateRange ZeroEngine::checkpoint_range(int group) const {
  const GroupState& st = impl_->group(group);
  if (!st.opt_sharded && st.rank != 0) return {};
  const int64_t numel = st.layout.numel();
  const int64_t begin = std::min(st.opt_offset, numel);
  const int64_t end = std::min(st.opt_offset + st.opt_elems, numel);
  return {begin, end - begin};
}

namespace {
Tensor state_view(GroupState& st, ZeroEngine::StateTensor which) {
  switch (which) {
    case ZeroEngine::StateTensor::Master: return st.master_view;
    case ZeroEngine::StateTensor::ExpAvg: return st.exp_avg.view();
    case ZeroEngine::StateTensor::ExpAvgSq: return st.exp_avg_sq.view();
  }
  MOEZERO_THROW("unknown optimizer state tensor ", static_cast<int>(which));
}
}  // namespace

std::vector<float> ZeroEngine::export_state(int group, StateTensor which) {
  GroupState& st = impl_->group(group);
  const StateRange r = checkpoint_range(group);
  std::vector<float> out(static_cast<size_t>(r.count_elems));
  if (r.count_elems == 0) return out;
  Stream& cs = *impl_->streams.compute;
  // A cached expert's fp32 master lives in its gathered buffer: after that gather.
  if (st.shard_aliased() && which == StateTensor::Master) cs.wait(*st.gathered);
  const Tensor src =
      state_view(st, which).view_elems(r.begin_elems - st.opt_offset, Shape{r.count_elems});
  impl_->device.memcpy_async(out.data(), src.data(), out.size() * sizeof(float), cs);
  cs.synchronize();
  return out;
}

void ZeroEngine::import_state(const StateReader& read, int64_t step_count) {
  Impl& m = *impl_;
  MOEZERO_CHECK(step_count >= 0, "import_state: step count ", step_count, " is negative");
  m.device.synchronize();  // no refresh or prefetch may still write the buffers replaced here
  Stream& cs = *m.streams.compute;
  Ops& ops = m.device.ops();
  const bool fp32 = options_.compute_dtype == DType::F32;
  // Reads [lo, hi) of the group (clipped to numel) into dst[lo - base ...]; the rest stays 0.
  auto fill = [&](int g, StateTensor which, int64_t base, std::vector<float>& dst) {
    const int64_t numel = m.group(g).layout.numel();
    const int64_t lo = std::min(base, numel);
    const int64_t hi = std::min(base + static_cast<int64_t>(dst.size()), numel);
    if (hi > lo) read(g, which, lo, hi - lo, dst.data() + (lo - base));
  };
  for (int g = 0; g < static_cast<int>(m.groups.size()); ++g) {
    GroupState& st = *m.groups[static_cast<size_t>(g)];
    MOEZERO_CHECK(st.state == zero_detail::FetchState::Sharded || !st.params_sharded,
                  "import_state: group '", st.layout.spec().name,
                  "' is gathered; import state between steps only");
    st.secondary.reset();  // hpZ: a copy of the parameters replaced here (an evaluation's)
    const size_t opt_n = static_cast<size_t>(st.opt_elems);
    std::vector<float> master(opt_n, 0.0f), avg(opt_n, 0.0f), avg_sq(opt_n, 0.0f);
    fill(g, StateTensor::ExpAvg, st.opt_offset, avg);
    fill(g, StateTensor::ExpAvgSq, st.opt_offset, avg_sq);
    if (st.params_sharded) {
      fill(g, StateTensor::Master, st.opt_offset, master);
      m.device.memcpy_async(st.master.view().data(), master.data(), opt_n * 4, cs);
      if (!fp32) ops.cast(cs, st.master.view(), st.param_shard.view());
    } else {  // replicated parameters: every rank holds all of them
      std::vector<float> full(static_cast<size_t>(st.padded), 0.0f);
      fill(g, StateTensor::Master, 0, full);
      if (fp32) {  // the master is a view of full_persistent
        m.device.memcpy_async(st.full_persistent.view().data(), full.data(), full.size() * 4, cs);
      } else {
        TensorBuffer tmp(m.device, DType::F32, Shape{st.padded}, MemTag::Other, cs, "import");
        m.device.memcpy_async(tmp.view().data(), full.data(), full.size() * 4, cs);
        ops.cast(cs, tmp.view(), st.full_persistent.view());
        m.device.memcpy_async(st.master.view().data(), full.data() + st.opt_offset, opt_n * 4, cs);
      }
      cs.synchronize();  // `full` and `tmp` are released at the end of this scope
    }
    m.device.memcpy_async(st.exp_avg.view().data(), avg.data(), opt_n * 4, cs);
    m.device.memcpy_async(st.exp_avg_sq.view().data(), avg_sq.data(), opt_n * 4, cs);
    ops.fill(cs, st.grad_acc, 0.0);
    cs.synchronize();  // the host vectors die with this iteration
  }
  m.step = step_count;
  m.params_updated->record(cs);
  cs.synchronize();
}

std::vector<std::pair<std::string, std::vector<int>>> ZeroEngine::prefetch_orders() const {
  return impl_->fetch.orders();
}

void ZeroEngine::set_prefetch_orders(
    const std::vector<std::pair<std::string, std::vector<int>>>& orders) {
  const int n = static_cast<int>(impl_->groups.size());
  for (const auto& [key, ids] : orders)
    for (int g : ids)
      MOEZERO_CHECK(g >= 0 && g < n, "prefetch order '", key, "': group ", g, " out of range (", n,
                    " groups)");
  impl_->fetch.set_orders(orders);
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

void ZeroEngine::Impl::set_full_params_host(int g, std::span<const float> values) {
  GroupState& st = group(g);
  const std::string& name = st.layout.spec().name;
  MOEZERO_CHECK(static_cast<int64_t>(values.size()) == st.layout.numel(),
                "set_full_params_host: parameter group '", name, "' holds ", st.layout.numel(),
                " values, got ", values.size());
  MOEZERO_CHECK(st.state == zero_detail::FetchState::Sharded,
                "set_full_params_host: parameter group '", name,
                "' is gathered (acquired, prefetched or cached); call it between steps");
  st.secondary.reset();  // hpZ: a copy of the parameters replaced here (an evaluation's)
  Stream& cs = *streams.compute;
  // Nothing may still read the buffers we overwrite (a gather of the shards, the refresh of
  // replicated parameters after a step).
  streams.gather->synchronize();
  cs.synchronize();
  std::vector<float> full(static_cast<size_t>(st.padded), 0.0f);  // padding stays zero
  std::copy(values.begin(), values.end(), full.begin());
  std::vector<bf16> half;
  auto upload = [&](const Tensor& dst, int64_t first) {
    const int64_t n = dst.numel();
    if (dst.dtype() == DType::F32) {
      device.memcpy_async(dst.data(), full.data() + first, static_cast<size_t>(n) * 4, cs);
    } else {
      MOEZERO_CHECK(dst.dtype() == DType::BF16, "set_full_params_host: unexpected dtype ",
                    dtype_name(dst.dtype()));
      half.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        half[static_cast<size_t>(i)] = float_to_bf16(full[static_cast<size_t>(first + i)]);
      device.memcpy_async(dst.data(), half.data(), static_cast<size_t>(n) * 2, cs);
    }
    cs.synchronize();  // `half` is reused by the next upload
  };
  if (st.params_sharded) {
    const int64_t first = st.rank * st.shard_elems;
    if (st.param_shard) upload(st.param_shard.view(), first);  // bf16 compute shard
    upload(st.master.view(), first);  // fp32 (in fp32 mode: the shard itself)
  } else {
    upload(st.full_persistent.view(), 0);
    if (st.master)
      upload(st.master.view(), st.opt_offset);  // bf16 mode: separate fp32 master range
  }
  params_updated->record(cs);  // later gathers read the new shards
}

}  // namespace moezero
