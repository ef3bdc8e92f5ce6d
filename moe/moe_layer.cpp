// moe/moe_layer.cpp — forward and backward of the MoE FFN sub-layer (see moe_layer.h).
#include "moe/moe_layer.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/error.h"
#include "core/trace.h"
#include "prefetch/prefetch_policy.h"

namespace moezero::moe {

namespace {
constexpr size_t kNorm = 0, kGate = 1;       // layer group
constexpr size_t kW1 = 0, kW2 = 1, kW3 = 2;  // expert group: gate, down, up
}  // namespace

struct MoeFeedForward::MoeSaved : FeedForward::Saved {
  TensorBuffer rstd, hn;                      // norm: f32 (N), (N, C)
  TensorBuffer perm, inv_perm, offsets;       // i32 (N*k), (N*k), (E+1)
  TensorBuffer xr;                            // (R, C) rows received for the local experts
  TensorBuffer gate, up;                      // (R, F) pre-activations of those rows
  TensorBuffer ys;                            // (P, C) expert outputs back in this rank's order
  Tensor weights;                             // f32 (N, k) combine weights (the router's state)
  int64_t kept = 0;                           // P: kept assignments of this rank
  int64_t received = 0;                       // R
  std::vector<int64_t> send_rows, recv_rows;  // per EP peer
  std::vector<int64_t> block_rows;            // (ep, Epr): rows from peer q for local expert j
  std::vector<char> active;                   // (Epr): local expert j is active (globally agreed)
  int ep = 1, experts_per_rank = 1;

  // f(row, n) for each non-empty block of rows received for local expert j: the received
  // rows are laid out [source peer q][local expert jj], so expert j's rows are one block per peer.
  template <typename F>
  void for_each_block(int j, F&& f) const {
    int64_t row = 0;
    for (int q = 0; q < ep; ++q)
      for (int jj = 0; jj < experts_per_rank; ++jj) {
        const int64_t n = block_rows[static_cast<size_t>(q * experts_per_rank + jj)];
        if (jj == j && n > 0) f(row, n);
        row += n;
      }
  }
};

MoeFeedForward::MoeFeedForward(const ModelConfig& cfg, const MoeRuntime& rt, int layer,
                               int moe_index, int first_group)
    : cfg_(cfg),
      rt_(rt),
      layer_(layer),
      moe_index_(moe_index),
      first_group_(first_group),
      experts_per_rank_(static_cast<int>(cfg.num_experts / rt.ep_size)),
      router_(router_config(cfg, rt.moe, rt.seed), layer) {
  MOEZERO_CHECK(cfg.num_experts > 0 && cfg.num_experts % rt.ep_size == 0, "layer ", layer,
                ": model.num_experts (", cfg.num_experts, ") must be a positive multiple of ",
                "parallel.ep_size (", rt.ep_size, ")");
  MOEZERO_CHECK(rt.ep_size == 1 || (rt.a2a && rt.a2a->size() == rt.ep_size), "layer ", layer,
                ": the EP communicator must span ep_size = ", rt.ep_size, " ranks");
  if (rt_.stats && static_cast<int>(rt_.stats->tokens_per_expert.size()) <= moe_index_) {
    rt_.stats->tokens_per_expert.resize(static_cast<size_t>(moe_index_) + 1);
    rt_.stats->active_experts.resize(static_cast<size_t>(moe_index_) + 1);
    rt_.stats->a2a_tokens_in.resize(static_cast<size_t>(moe_index_) + 1);
    rt_.stats->a2a_tokens_out.resize(static_cast<size_t>(moe_index_) + 1);
  }
  if (rt_.stats) {
    const size_t m = static_cast<size_t>(moe_index_), E = static_cast<size_t>(cfg.num_experts);
    rt_.stats->tokens_per_expert[m].assign(E, 0);
    rt_.stats->a2a_tokens_in[m].assign(E, 0);
    rt_.stats->a2a_tokens_out[m].assign(E, 0);
  }
}

MoeFeedForward::~MoeFeedForward() = default;

std::vector<GroupSpec> MoeFeedForward::param_groups() const {
  const std::string p = "model.layers." + std::to_string(layer_) + ".";
  const float std_ = static_cast<float>(cfg_.init_std);
  const int64_t C = cfg_.d_model, F = cfg_.d_ff, E = cfg_.num_experts;
  std::vector<GroupSpec> groups;
  GroupSpec g;
  g.name = "layers." + std::to_string(layer_) + ".moe";
  g.kind = GroupKind::Dense;
  g.layer = layer_;
  g.params = {norm_weight(p + "post_attention_layernorm.weight", C),
              linear_weight(p + "block_sparse_moe.gate.weight", E, C, std_)};
  groups.push_back(g);
  for (int j = 0; j < experts_per_rank_; ++j) {
    const int e = rt_.ep_rank * experts_per_rank_ + j;
    const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
    GroupSpec eg;
    eg.name = "layers." + std::to_string(layer_) + ".experts." + std::to_string(e);
    eg.kind = GroupKind::Expert;
    eg.layer = layer_;
    eg.expert = e;
    eg.params = {linear_weight(x + "w1.weight", F, C, std_),
                 linear_weight(x + "w2.weight", C, F, std_),
                 linear_weight(x + "w3.weight", F, C, std_)};
    groups.push_back(std::move(eg));
  }
  return groups;
}

void MoeFeedForward::prepare(const ModuleContext& ctx, ParamProvider& params, Prepare when) {
  planned_.clear();
  if (!rt_.frequency || rt_.prefetch.policy == PrefetchPolicy::None ||
      rt_.prefetch.lookahead_layers == 0)
    return;
  const int Epr = experts_per_rank_;
  std::vector<int> candidates(static_cast<size_t>(Epr));
  std::vector<uint64_t> bytes(static_cast<size_t>(Epr));
  for (int j = 0; j < Epr; ++j) {
    candidates[static_cast<size_t>(j)] = rt_.ep_rank * Epr + j;
    bytes[static_cast<size_t>(j)] = static_cast<uint64_t>(params.layout(expert_group(j)).numel()) *
                                    dtype_size_bytes(params.compute_dtype());
  }
  // The previous MoE layer's agreed active set of this micro-batch (co-activation), known only
  // when planning just in time.
  const std::vector<char>* prev = moe_index_ > 0 && when == Prepare::JustInTime
                                      ? &rt_.frequency->last_active(moe_index_ - 1)
                                      : nullptr;
  planned_ =
      prefetch::plan_prefetch(rt_.prefetch, *rt_.frequency, moe_index_, candidates, bytes, prev);
  for (int e : planned_) params.prefetch(expert_group(e - rt_.ep_rank * Epr), ctx.s());
}

void MoeFeedForward::prepare_backward(const ModuleContext& ctx, ParamProvider& params,
                                      const Saved& saved) {
  const auto* sv = dynamic_cast<const MoeSaved*>(&saved);
  MOEZERO_CHECK(sv != nullptr, "MoeFeedForward::prepare_backward of layer ", layer_,
                ": saved state is not a MoeFeedForward's");
  if (rt_.prefetch.policy == PrefetchPolicy::None) return;
  std::vector<int> local(static_cast<size_t>(experts_per_rank_));
  for (int j = 0; j < experts_per_rank_; ++j) local[static_cast<size_t>(j)] = j;
  for (int j : prefetch::backward_order(local, sv->active))
    params.prefetch(expert_group(j), ctx.s(), ParamProvider::FetchReason::Predicted);
}

MoeFeedForward::RunOrder MoeFeedForward::run_order(const ModuleContext& ctx, ParamProvider& params,
                                                   const std::vector<char>& active,
                                                   ParamProvider::FetchReason reason) const {
  std::vector<int> ids;
  for (int j = 0; j < experts_per_rank_; ++j)
    if (active[static_cast<size_t>(j)]) ids.push_back(j);
  for (int j : ids)  // agreed order; no-op if resident or in flight (a predicted prefetch)
    params.prefetch(expert_group(j), ctx.s(), reason);
  // Cached experts first, in id order: acquiring them updates the shard cache's recency, which
  // must advance identically on every rank. Then the rest by readiness (a host-side query of
  // local timing: their acquires touch no shared decision state).
  RunOrder order;
  std::vector<int> ready, in_flight;
  for (int j : ids) {
    const int g = expert_group(j);
    if (params.needs_fetch(g))
      order.then.push_back(j);  // over the live limit: id order
    else if (params.cached(g))
      order.first.push_back(j);
    else if (params.ready(g))
      ready.push_back(j);
    else
      in_flight.push_back(j);
  }
  order.first.insert(order.first.end(), ready.begin(), ready.end());
  order.first.insert(order.first.end(), in_flight.begin(), in_flight.end());
  return order;
}

int MoeFeedForward::expert_span(const ModuleContext& ctx, const MoeSaved& sv, int j,
                                TracePass pass) const {
  if (!rt_.trace || !rt_.trace->tracing()) return -1;
  int64_t tokens = 0;
  sv.for_each_block(j, [&](int64_t, int64_t n) { tokens += n; });
  return rt_.trace->begin_expert(ctx.s(), layer_, rt_.ep_rank * experts_per_rank_ + j, tokens,
                                 pass);
}

void MoeFeedForward::on_a2a_stream(const ModuleContext& ctx, TensorBuffer& send, TensorBuffer& recv,
                                   const std::function<void(Stream&)>& call) {
  Stream& as = a2a_stream(ctx);
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
  if (rt_.trace)
    rt_.trace->a2a_wait(cs, *arrived);  // recv is complete; the wait is timed
  else
    cs.wait(*arrived);
}

void MoeFeedForward::exchange(const ModuleContext& ctx, TensorBuffer& send,
                              const std::vector<int64_t>& send_rows, TensorBuffer& recv,
                              const std::vector<int64_t>& recv_rows) {
  const int64_t C = cfg_.d_model;
  if (rt_.ep_size == 1) {
    if (send.view().numel() > 0) ctx.ops().cast(ctx.s(), send, recv);
    return;
  }
  std::vector<size_t> se(send_rows.size()), re(recv_rows.size());
  uint64_t bytes = 0;
  for (size_t p = 0; p < se.size(); ++p) {
    se[p] = static_cast<size_t>(send_rows[p] * C);
    re[p] = static_cast<size_t>(recv_rows[p] * C);
    if (static_cast<int>(p) != rt_.a2a->rank())
      bytes += se[p] * dtype_size_bytes(send.view().dtype());
  }
  on_a2a_stream(ctx, send, recv, [&](Stream& as) {
    rt_.a2a->all_to_all_v(send.view().data(), se, recv.view().data(), re, send.view().dtype(), as);
  });
  if (rt_.stats) rt_.stats->a2a_bytes += bytes;
}

std::unique_ptr<FeedForward::Saved> MoeFeedForward::forward(const ModuleContext& ctx,
                                                            ParamProvider& params, const Tensor& h,
                                                            const Tensor& out) {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  Device& dev = s.device();
  const int64_t N = ctx.rows(), C = cfg_.d_model, F = cfg_.d_ff, E = cfg_.num_experts;
  const int k = static_cast<int>(cfg_.top_k), ep = rt_.ep_size, Epr = experts_per_rank_;
  auto sv = std::make_unique<MoeSaved>();
  sv->ep = ep;
  sv->experts_per_rank = Epr;

  // 1-2. norm and routing.
  const Tensor flat = params.acquire(first_group_, s);
  const GroupLayout& lay = params.layout(first_group_);
  sv->rstd = ctx.alloc(DType::F32, Shape{N}, "moe.rstd");
  sv->hn = ctx.alloc_act(Shape{N, C}, "moe.hn");
  ops.rmsnorm_forward(s, h, lay.view(flat, kNorm), static_cast<float>(cfg_.norm_eps), sv->hn,
                      sv->rstd);
  Router::Routing& rt = router_.forward_local(ctx, sv->hn, lay.view(flat, kGate), ctx.token_offset,
                                              ctx.micro_batch, RouterMode::Train);
  TensorBuffer local_counts = ctx.alloc(DType::I32, Shape{E}, "moe.local_counts");
  ops.expert_histogram(s, rt.expert_ids, static_cast<int>(E), local_counts);

  // 3. agreement: global statistics over the world, per-peer counts over the EP group.
  if (rt_.router && rt_.router->size() > 1)
    rt_.router->all_reduce(rt.stats.data(), rt.stats.data(), static_cast<size_t>(3 * E), DType::F32,
                           ReduceOp::Sum, s);
  const int64_t global_tokens = ctx.global_tokens > 0 ? ctx.global_tokens : N;
  router_.finish(ctx, global_tokens, rt_.loss_weight, ctx.loss_out, ctx.aux_out);
  params.release(first_group_, s);  // the router read the gate weight (forward_local/finish)
  TensorBuffer recv_counts = ctx.alloc(DType::I32, Shape{ep * Epr}, "moe.recv_counts");
  if (ep > 1) {  // on the a2a stream, like every use of the EP communicator
    std::vector<size_t> per(static_cast<size_t>(ep), static_cast<size_t>(Epr));
    on_a2a_stream(ctx, local_counts, recv_counts, [&](Stream& as) {
      rt_.a2a->all_to_all_v(local_counts.view().data(), per, recv_counts.view().data(), per,
                            DType::I32, as);
    });
  } else {
    ops.cast(s, local_counts, recv_counts);
  }
  std::vector<int32_t> h_local(static_cast<size_t>(E)), h_recv(static_cast<size_t>(ep * Epr));
  std::vector<float> h_stats(static_cast<size_t>(3 * E));
  dev.memcpy_async(h_local.data(), local_counts.view().data(), h_local.size() * 4, s);
  dev.memcpy_async(h_recv.data(), recv_counts.view().data(), h_recv.size() * 4, s);
  dev.memcpy_async(h_stats.data(), rt.stats.data(), h_stats.size() * 4, s);
  s.synchronize();  // HOST SYNC: sizes of the token exchange and the agreed active set

  sv->send_rows.assign(static_cast<size_t>(ep), 0);
  sv->recv_rows.assign(static_cast<size_t>(ep), 0);
  sv->block_rows.assign(static_cast<size_t>(ep * Epr), 0);
  for (int p = 0; p < ep; ++p)
    for (int j = 0; j < Epr; ++j) {
      sv->send_rows[p] += h_local[static_cast<size_t>(p * Epr + j)];
      sv->block_rows[static_cast<size_t>(p * Epr + j)] = h_recv[static_cast<size_t>(p * Epr + j)];
      sv->recv_rows[p] += h_recv[static_cast<size_t>(p * Epr + j)];
    }
  sv->kept = std::accumulate(sv->send_rows.begin(), sv->send_rows.end(), int64_t{0});
  sv->received = std::accumulate(sv->recv_rows.begin(), sv->recv_rows.end(), int64_t{0});
  sv->active.assign(static_cast<size_t>(Epr), 0);
  int active_count = 0;
  for (int j = 0; j < Epr; ++j) {
    const int e = rt_.ep_rank * Epr + j;
    sv->active[static_cast<size_t>(j)] = h_stats[static_cast<size_t>(E + e)] > 0.5f;
  }
  if (rt_.frequency) {  // learn from the agreed counts; identical on every rank
    std::vector<int64_t> kept(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
      kept[static_cast<size_t>(e)] =
          static_cast<int64_t>(h_stats[static_cast<size_t>(E + e)] + 0.5f);
    rt_.frequency->update(moe_index_, kept);
    for (int j = 0; j < Epr; ++j)
      params.set_keep_score(expert_group(j),
                            rt_.frequency->probability(moe_index_, rt_.ep_rank * Epr + j));
  }
  for (int e : planned_)  // predicted but not needed: the provider drops (or caches) them
    if (!sv->active[static_cast<size_t>(e - rt_.ep_rank * Epr)])
      params.discard_prefetch(expert_group(e - rt_.ep_rank * Epr));
  planned_.clear();
  if (rt_.stats) {
    auto& tpe = rt_.stats->tokens_per_expert[static_cast<size_t>(moe_index_)];
    for (int64_t e = 0; e < E; ++e) {
      tpe[static_cast<size_t>(e)] +=
          static_cast<int64_t>(h_stats[static_cast<size_t>(E + e)] + 0.5f);
      active_count += h_stats[static_cast<size_t>(E + e)] > 0.5f;
    }
    rt_.stats->active_experts[static_cast<size_t>(moe_index_)] = active_count;
    if (ep > 1) {  // token assignments crossing ranks, per expert (forward dispatch)
      auto& in = rt_.stats->a2a_tokens_in[static_cast<size_t>(moe_index_)];
      auto& out = rt_.stats->a2a_tokens_out[static_cast<size_t>(moe_index_)];
      for (int p = 0; p < ep; ++p) {
        if (p == rt_.ep_rank) continue;
        for (int j = 0; j < Epr; ++j) {
          const size_t at = static_cast<size_t>(p * Epr + j);
          out[at] += h_local[at];  // expert p*Epr + j lives on EP rank p
          in[static_cast<size_t>(rt_.ep_rank * Epr + j)] += h_recv[at];  // from peer p
        }
      }
    }
  }

  // 4. dispatch: sort by expert, gather rows, exchange.
  sv->perm = ctx.alloc(DType::I32, Shape{N * k}, "moe.perm");
  sv->inv_perm = ctx.alloc(DType::I32, Shape{N * k}, "moe.inv_perm");
  sv->offsets = ctx.alloc(DType::I32, Shape{E + 1}, "moe.offsets");
  ops.sort_by_expert(s, rt.expert_ids, static_cast<int>(E), sv->perm, sv->inv_perm, sv->offsets);
  TensorBuffer xs = ctx.alloc_act(Shape{sv->kept, C}, "moe.xs");
  ops.gather_rows(s, sv->hn, sv->perm, k, xs);
  sv->xr = ctx.alloc_act(Shape{sv->received, C}, "moe.xr");
  exchange(ctx, xs, sv->send_rows, sv->xr, sv->recv_rows);
  xs.reset();

  // 5. experts, each over its row blocks (one per source peer).
  sv->gate = ctx.alloc_act(Shape{sv->received, F}, "moe.gate");
  sv->up = ctx.alloc_act(Shape{sv->received, F}, "moe.up");
  TensorBuffer act = ctx.alloc_act(Shape{sv->received, F}, "moe.act");
  TensorBuffer yr = ctx.alloc_act(Shape{sv->received, C}, "moe.yr");
  const RunOrder order = run_order(ctx, params, sv->active, ParamProvider::FetchReason::Needed);
  auto run_expert = [&](int j) {
    const int g = expert_group(j);
    const int span = expert_span(ctx, *sv, j, TracePass::Forward);
    const Tensor w = params.acquire(g, s);
    const GroupLayout& el = params.layout(g);
    sv->for_each_block(j, [&](int64_t row, int64_t n) {
      const Tensor x = sv->xr.view().slice_rows(row, row + n);
      const Tensor ga = sv->gate.view().slice_rows(row, row + n);
      const Tensor up = sv->up.view().slice_rows(row, row + n);
      const Tensor a = act.view().slice_rows(row, row + n);
      linear_forward(ctx, x, el.view(w, kW1), ga);
      linear_forward(ctx, x, el.view(w, kW3), up);
      ops.swiglu_forward(s, ga, up, a);
      linear_forward(ctx, a, el.view(w, kW2), yr.view().slice_rows(row, row + n));
    });
    if (rt_.trace) rt_.trace->end_span(span);
  };
  for (int j : order.first) run_expert(j);  // in the order parameters are ready
  std::vector<int> first_ids = order.first;
  std::sort(first_ids.begin(), first_ids.end());
  for (int j : first_ids) params.release(expert_group(j), s);  // id order: the cache agrees
  for (int j : order.then) {  // on-demand gathers, one at a time, id order
    run_expert(j);
    params.release(expert_group(j), s);
  }
  act.reset();

  // 6. back to the token owners, weighted combine, residual.
  sv->ys = ctx.alloc_act(Shape{sv->kept, C}, "moe.ys");
  exchange(ctx, yr, sv->recv_rows, sv->ys, sv->send_rows);
  yr.reset();
  sv->weights = rt.weights;
  ops.combine_rows(s, sv->ys, sv->inv_perm, rt.weights, k, out);
  ops.add(s, out, h, out);
  return sv;
}

void MoeFeedForward::backward(const ModuleContext& ctx, ParamProvider& params,
                              std::unique_ptr<Saved> saved, const Tensor& h, const Tensor& dresid) {
  auto* sv = dynamic_cast<MoeSaved*>(saved.get());
  MOEZERO_CHECK(sv != nullptr, "MoeFeedForward::backward of layer ", layer_,
                ": saved state is missing or not a MoeFeedForward's");
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t N = ctx.rows(), C = cfg_.d_model, F = cfg_.d_ff;
  const int k = static_cast<int>(cfg_.top_k);

  // 6'. combine backward: dys (P, C), dweights (N, k); send dys to the expert owners.
  TensorBuffer dys = ctx.alloc_act(Shape{sv->kept, C}, "moe.dys");
  TensorBuffer dweights = ctx.alloc(DType::F32, Shape{N, k}, "moe.dweights");
  ops.combine_rows_backward(s, dresid, sv->ys, sv->perm, sv->inv_perm, sv->weights, k, dys,
                            dweights);
  sv->ys.reset();
  TensorBuffer dyr = ctx.alloc_act(Shape{sv->received, C}, "moe.dyr");
  exchange(ctx, dys, sv->send_rows, dyr, sv->recv_rows);
  dys.reset();

  // 5'. experts in the forward order (the agreed active set: every EDP member issues the same
  // gathers and gradient reductions). Backward prefetch is exact: the routing is known, so
  // every needed expert's gather starts now, in the order they will run (cached ones are
  // resident already; the provider keeps within its live-parameter limit).
  TensorBuffer dxr = ctx.alloc_act(Shape{sv->received, C}, "moe.dxr");
  TensorBuffer act = ctx.alloc_act(Shape{sv->received, F}, "moe.act");
  TensorBuffer dact = ctx.alloc_act(Shape{sv->received, F}, "moe.dact");
  TensorBuffer dgate = ctx.alloc_act(Shape{sv->received, F}, "moe.dgate");
  TensorBuffer dup = ctx.alloc_act(Shape{sv->received, F}, "moe.dup");
  const RunOrder order = run_order(ctx, params, sv->active, ParamProvider::FetchReason::Predicted);
  auto run_expert = [&](int j) {
    const int g = expert_group(j);
    const int span = expert_span(ctx, *sv, j, TracePass::Backward);
    const Tensor w = params.acquire(g, s);
    const Tensor gw = params.grad(g, s);
    const GroupLayout& el = params.layout(g);
    sv->for_each_block(j, [&](int64_t row, int64_t n) {
      auto rows = [&](const TensorBuffer& t) { return t.view().slice_rows(row, row + n); };
      ops.swiglu_forward(s, rows(sv->gate), rows(sv->up), rows(act));  // recompute
      linear_backward_data(ctx, rows(dyr), el.view(w, kW2), rows(dact), Accumulate::No);
      linear_backward_weight(ctx, rows(dyr), rows(act), el.view(gw, kW2));
      ops.swiglu_backward(s, rows(sv->gate), rows(sv->up), rows(dact), rows(dgate), rows(dup));
      linear_backward_weight(ctx, rows(dgate), rows(sv->xr), el.view(gw, kW1));
      linear_backward_weight(ctx, rows(dup), rows(sv->xr), el.view(gw, kW3));
      linear_backward_data(ctx, rows(dgate), el.view(w, kW1), rows(dxr), Accumulate::No);
      linear_backward_data(ctx, rows(dup), el.view(w, kW3), rows(dxr), Accumulate::Yes);
    });
    if (rt_.trace) rt_.trace->end_span(span);
  };
  auto finish_expert = [&](int j) {
    params.grad_ready(expert_group(j), s);
    params.release(expert_group(j), s);
  };
  for (int j : order.first) run_expert(j);
  std::vector<int> first_ids = order.first;
  std::sort(first_ids.begin(), first_ids.end());
  for (int j : first_ids) finish_expert(j);  // id order: gradient buckets and the cache agree
  for (int j : order.then) {
    run_expert(j);
    finish_expert(j);
  }
  act.reset();
  dact.reset();
  dgate.reset();
  dup.reset();
  sv->gate.reset();
  sv->up.reset();
  sv->xr.reset();
  dyr.reset();

  // 4'. rows back to their tokens; gather_rows' backward is an unweighted combine.
  TensorBuffer dxs = ctx.alloc_act(Shape{sv->kept, C}, "moe.dxs");
  exchange(ctx, dxr, sv->recv_rows, dxs, sv->send_rows);
  dxr.reset();
  TensorBuffer dhn = ctx.alloc_act(Shape{N, C}, "moe.dhn");
  ops.combine_rows(s, dxs, sv->inv_perm, Tensor(), k, dhn);
  dxs.reset();

  // 2'-1'. router and norm: the last writes into the layer group's gradient.
  const Tensor flat = params.acquire(first_group_, s);
  const Tensor gflat = params.grad(first_group_, s);
  const GroupLayout& lay = params.layout(first_group_);
  router_.backward(ctx, dweights, sv->hn, lay.view(flat, kGate), dhn, lay.view(gflat, kGate));
  TensorBuffer dh = ctx.alloc_act(Shape{N, C}, "moe.dh");
  ops.rmsnorm_backward(s, dhn, h, lay.view(flat, kNorm), sv->rstd, dh, lay.view(gflat, kNorm));
  params.grad_ready(first_group_, s);
  params.release(first_group_, s);
  ops.add(s, dresid, dh, dresid);
}

}  // namespace moezero::moe
