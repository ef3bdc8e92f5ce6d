// moe/token_dispatcher.cpp — dispatch, combine and their backward (token_dispatcher.h).
#include "moe/token_dispatcher.h"

#include <numeric>

#include "core/trace.h"

namespace moezero::moe {

TokenDispatcher::TokenDispatcher(const MoeComms& comms, const MoeReporting& report, int64_t d_model,
                                 int num_experts, int top_k)
    : comms_(comms),
      report_(report),
      C_(d_model),
      E_(num_experts),
      k_(top_k),
      experts_per_rank_(num_experts / comms.ep_size) {}

DispatchCounts TokenDispatcher::count(const layers::ModuleContext& ctx,
                                      const Tensor& expert_ids) const {
  DispatchCounts c;
  c.local = ctx.alloc(DType::I32, Shape{E_}, "moe.local_counts");
  ctx.ops().expert_histogram(ctx.s(), expert_ids, E_, c.local);
  return c;
}

void TokenDispatcher::exchange_counts(const layers::ModuleContext& ctx, DispatchCounts& c) {
  const int ep = comms_.ep_size, Epr = experts_per_rank_;
  c.recv = ctx.alloc(DType::I32, Shape{ep * Epr}, "moe.recv_counts");
  if (ep > 1) {  // on the a2a stream, like every use of the EP communicator
    std::vector<size_t> per(static_cast<size_t>(ep), static_cast<size_t>(Epr));
    on_a2a_stream(ctx, c.local, c.recv, [&](Stream& as) {
      comms_.a2a->all_to_all_v(c.local.view().data(), per, c.recv.view().data(), per, DType::I32,
                               as);
    });
  } else {
    ctx.ops().cast(ctx.s(), c.local, c.recv);
  }
}

void TokenDispatcher::download_counts(const layers::ModuleContext& ctx, DispatchCounts& c) const {
  Stream& s = ctx.s();
  c.h_local.assign(static_cast<size_t>(E_), 0);
  c.h_recv.assign(static_cast<size_t>(comms_.ep_size * experts_per_rank_), 0);
  s.device().memcpy_async(c.h_local.data(), c.local.view().data(), c.h_local.size() * 4, s);
  s.device().memcpy_async(c.h_recv.data(), c.recv.view().data(), c.h_recv.size() * 4, s);
}

DispatchState TokenDispatcher::plan(const DispatchCounts& c, int moe_index) const {
  const int ep = comms_.ep_size, Epr = experts_per_rank_;
  DispatchState st;
  st.ep = ep;
  st.experts_per_rank = Epr;
  st.send_rows.assign(static_cast<size_t>(ep), 0);
  st.recv_rows.assign(static_cast<size_t>(ep), 0);
  st.block_rows.assign(static_cast<size_t>(ep * Epr), 0);
  for (int p = 0; p < ep; ++p)
    for (int j = 0; j < Epr; ++j) {
      const size_t at = static_cast<size_t>(p * Epr + j);
      st.send_rows[static_cast<size_t>(p)] += c.h_local[at];
      st.block_rows[at] = c.h_recv[at];
      st.recv_rows[static_cast<size_t>(p)] += c.h_recv[at];
    }
  st.kept = std::accumulate(st.send_rows.begin(), st.send_rows.end(), int64_t{0});
  st.received = std::accumulate(st.recv_rows.begin(), st.recv_rows.end(), int64_t{0});
  if (report_.stats && ep > 1) {  // token assignments crossing ranks, per expert (forward dispatch)
    auto& in = report_.stats->a2a_tokens_in[static_cast<size_t>(moe_index)];
    auto& out = report_.stats->a2a_tokens_out[static_cast<size_t>(moe_index)];
    for (int p = 0; p < ep; ++p) {
      if (p == comms_.ep_rank) continue;
      for (int j = 0; j < Epr; ++j) {
        const size_t at = static_cast<size_t>(p * Epr + j);
        out[at] += c.h_local[at];  // expert p*Epr + j lives on EP rank p
        in[static_cast<size_t>(comms_.ep_rank * Epr + j)] += c.h_recv[at];  // from peer p
      }
    }
  }
  return st;
}

TensorBuffer TokenDispatcher::dispatch(const layers::ModuleContext& ctx, const Tensor& x,
                                       const Tensor& expert_ids, DispatchState& st) {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t Nk = expert_ids.numel();
  st.perm = ctx.alloc(DType::I32, Shape{Nk}, "moe.perm");
  st.inv_perm = ctx.alloc(DType::I32, Shape{Nk}, "moe.inv_perm");
  st.offsets = ctx.alloc(DType::I32, Shape{E_ + 1}, "moe.offsets");
  ops.sort_by_expert(s, expert_ids, E_, st.perm, st.inv_perm, st.offsets);
  TensorBuffer xs = ctx.alloc_act(Shape{st.kept, C_}, "moe.xs");
  ops.gather_rows(s, x, st.perm, k_, xs);
  TensorBuffer xr = ctx.alloc_act(Shape{st.received, C_}, "moe.xr");
  exchange(ctx, xs, st.send_rows, xr, st.recv_rows);
  xs.reset();
  return xr;
}

void TokenDispatcher::combine(const layers::ModuleContext& ctx, TensorBuffer& y,
                              const Tensor& weights, DispatchState& st, const Tensor& out) {
  st.ys = ctx.alloc_act(Shape{st.kept, C_}, "moe.ys");
  exchange(ctx, y, st.recv_rows, st.ys, st.send_rows);
  y.reset();
  st.weights = weights;
  ctx.ops().combine_rows(ctx.s(), st.ys, st.inv_perm, weights, k_, out);
}

TensorBuffer TokenDispatcher::combine_backward(const layers::ModuleContext& ctx, const Tensor& dout,
                                               DispatchState& st, TensorBuffer& dweights) {
  const int64_t N = ctx.rows();
  TensorBuffer dys = ctx.alloc_act(Shape{st.kept, C_}, "moe.dys");
  dweights = ctx.alloc(DType::F32, Shape{N, k_}, "moe.dweights");
  ctx.ops().combine_rows_backward(ctx.s(), dout, st.ys, st.perm, st.inv_perm, st.weights, k_, dys,
                                  dweights);
  st.ys.reset();
  TensorBuffer dyr = ctx.alloc_act(Shape{st.received, C_}, "moe.dyr");
  exchange(ctx, dys, st.send_rows, dyr, st.recv_rows);
  dys.reset();
  return dyr;
}

TensorBuffer TokenDispatcher::dispatch_backward(const layers::ModuleContext& ctx, TensorBuffer& dx,
                                                DispatchState& st) {
  TensorBuffer dxs = ctx.alloc_act(Shape{st.kept, C_}, "moe.dxs");
  exchange(ctx, dx, st.recv_rows, dxs, st.send_rows);
  dx.reset();
  TensorBuffer dtokens = ctx.alloc_act(Shape{ctx.rows(), C_}, "moe.dhn");
  ctx.ops().combine_rows(ctx.s(), dxs, st.inv_perm, Tensor(), k_, dtokens);  // gather's backward
  dxs.reset();
  return dtokens;
}

void TokenDispatcher::on_a2a_stream(const layers::ModuleContext& ctx, TensorBuffer& send,
                                    TensorBuffer& recv, const std::function<void(Stream&)>& call) {
  Stream& as = comms_.a2a_stream ? *comms_.a2a_stream : ctx.s();
  Stream& cs = ctx.s();
  if (&as == &cs) {
    call(cs);
    return;
  }
  Device& dev = cs.device();
  auto written = dev.create_event();
  written->record(cs);
  as.wait(*written);  // send is complete
  send.buffer().record_stream(as);
  recv.buffer().record_stream(as);
  call(as);
  auto arrived = dev.create_event();
  arrived->record(as);
  if (report_.trace)
    report_.trace->a2a_wait(cs, *arrived);  // recv is complete; the wait is timed
  else
    cs.wait(*arrived);
}

void TokenDispatcher::exchange(const layers::ModuleContext& ctx, TensorBuffer& send,
                               const std::vector<int64_t>& send_rows, TensorBuffer& recv,
                               const std::vector<int64_t>& recv_rows) {
  if (comms_.ep_size == 1) {  // the rows stay here: hand the buffer over (every caller drops send)
    MOEZERO_CHECK(send.view().shape() == recv.view().shape(), "token exchange at EP 1: sending ",
                  send.view().shape().str(), " rows into ", recv.view().shape().str());
    std::swap(send, recv);
    return;
  }
  std::vector<size_t> se(send_rows.size()), re(recv_rows.size());
  uint64_t bytes = 0;
  for (size_t p = 0; p < se.size(); ++p) {
    se[p] = static_cast<size_t>(send_rows[p] * C_);
    re[p] = static_cast<size_t>(recv_rows[p] * C_);
    if (static_cast<int>(p) != comms_.a2a->rank())
      bytes += se[p] * dtype_size_bytes(send.view().dtype());
  }
  on_a2a_stream(ctx, send, recv, [&](Stream& as) {
    comms_.a2a->all_to_all_v(send.view().data(), se, recv.view().data(), re, send.view().dtype(),
                             as);
  });
  if (report_.stats) report_.stats->a2a_bytes += bytes;
}

}  // namespace moezero::moe
