// moe/moe_layer.cpp — the MoE FFN sub-layer as a list of named steps (see moe_layer.h): route,
// agree, dispatch, compute, combine, and their backward.
#include "moe/moe_layer.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/trace.h"
#include "moe/routing_source.h"
#include "moe/routing_trace.h"
#include "prefetch/prefetch_planner.h"

namespace moezero::moe {

namespace {
constexpr size_t kMoeNorm = 0, kRouterGate = 1;  // layer group
// The runtime's prefetch planner; without one, nothing is planned ahead and backward is exact.
const prefetch::PrefetchPlanner& planner_of(const MoeRuntime& rt) {
  static const prefetch::PrefetchPlanner kNone;
  return rt.planning.planner ? *rt.planning.planner : kNone;
}
}  // namespace

struct MoeFeedForward::MoeSaved : layers::FeedForward::Saved {
  TensorBuffer rstd, hn;        // norm: f32 (N), (N, C)
  DispatchState routes;         // the token layout of this micro-batch (and combine's saved input)
  TensorBuffer xr;              // (R, C) rows received for the local experts
  TensorBuffer gate, up;        // (R, F) pre-activations of those rows
  std::vector<char> active;     // (Epr): local expert j is active (globally agreed)
  std::vector<Tensor> held;     // (Epr) zero.moe_gather fsdp: experts acquired from forward to
                                // backward; empty otherwise
  std::vector<float> selected;  // (E) agreed top-k selections (the expert-bias load)
  SharedExperts::Saved shared;  // model.num_shared_experts > 0
  TensorBuffer agreement;       // prefetch.pregate: f32 (4E) the router statistics (3E), then
                                // the next MoE layer's lookahead counts (E); all-reduced at once
};

MoeFeedForward::MoeFeedForward(const ModelConfig& cfg, const MoeRuntime& rt, int layer,
                               int moe_index, int first_group)
    : cfg_(cfg),
      rt_(rt),
      layer_(layer),
      moe_index_(moe_index),
      first_group_(first_group),
      router_(router_config(cfg, rt.options.moe, rt.options.seed), layer),
      dispatcher_(rt.comms, rt.report, cfg.d_model, static_cast<int>(cfg.num_experts),
                  static_cast<int>(cfg.top_k)),
      experts_(cfg, rt, layer, first_group + 1) {
  MOEZERO_CHECK(cfg.num_experts > 0 && cfg.num_experts % rt.comms.ep_size == 0, "layer ", layer,
                ": model.num_experts (", cfg.num_experts, ") must be a positive multiple of ",
                "parallel.ep_size (", rt.comms.ep_size, ")");
  MOEZERO_CHECK(rt.comms.ep_size == 1 || (rt.comms.a2a && rt.comms.a2a->size() == rt.comms.ep_size),
                "layer ", layer, ": the EP communicator must span ep_size = ", rt.comms.ep_size,
                " ranks");
  if (rt_.report.stats) rt_.report.stats->add_layer(moe_index_, cfg.num_experts);
  if (rt_.planning.pregate) rt_.planning.pregate->set_gate_group(moe_index_, first_group);
  if (cfg.num_shared_experts > 0)
    shared_ = std::make_unique<SharedExperts>(cfg, layer, first_group + 1 + experts_.count());
  if (rt_.options.moe.expert_bias_update_rate > 0.0) {
    router_.set_bias(std::vector<float>(static_cast<size_t>(cfg.num_experts), 0.0f));
    load_.assign(static_cast<size_t>(cfg.num_experts), 0.0);
  }
}

void MoeFeedForward::set_expert_bias(std::vector<float> bias) {
  if (rt_.options.moe.expert_bias_update_rate <= 0.0) return;
  if (bias.empty()) bias.assign(static_cast<size_t>(cfg_.num_experts), 0.0f);
  router_.set_bias(std::move(bias));
}

void MoeFeedForward::update_expert_bias() {
  const double rate = rt_.options.moe.expert_bias_update_rate;
  if (rate <= 0.0) return;
  double mean = 0.0;
  for (double l : load_) mean += l;
  mean /= static_cast<double>(load_.size());
  std::vector<float> b = router_.bias();
  for (size_t e = 0; e < b.size(); ++e) {
    const double d = mean - load_[e];
    b[e] = static_cast<float>(b[e] + rate * static_cast<double>((d > 0.0) - (d < 0.0)));
  }
  router_.set_bias(std::move(b));
  std::fill(load_.begin(), load_.end(), 0.0);
}

MoeFeedForward::~MoeFeedForward() = default;

std::vector<GroupSpec> MoeFeedForward::param_groups() const {
  const std::string p = "model.layers." + std::to_string(layer_) + ".";
  const float std_ = static_cast<float>(cfg_.init_std);
  const int64_t C = cfg_.d_model, E = cfg_.num_experts;
  std::vector<GroupSpec> groups;
  GroupSpec g;
  g.name = "layers." + std::to_string(layer_) + ".moe";
  g.kind = GroupKind::Dense;
  g.layer = layer_;
  g.params = {norm_weight(p + "post_attention_layernorm.weight", C),
              linear_weight(p + "block_sparse_moe.gate.weight", E, C, std_)};
  groups.push_back(g);
  for (GroupSpec& eg : experts_.param_groups()) groups.push_back(std::move(eg));
  if (shared_) groups.push_back(shared_->param_group());
  return groups;
}

void MoeFeedForward::prepare(const layers::ModuleContext& ctx, ParamProvider& params,
                             Prepare when) {
  planned_.clear();
  plan_p_.clear();
  if (rt_.options.gather->prefetch_forward(ctx, params, experts_, when) != ExpertPrefetch::Routed)
    return;
  if (!rt_.planning.frequency || !planner_of(rt_).plans_experts()) return;
  const int Epr = experts_.count();
  std::vector<int> candidates(static_cast<size_t>(Epr));
  std::vector<uint64_t> bytes(static_cast<size_t>(Epr));
  for (int j = 0; j < Epr; ++j) {
    candidates[static_cast<size_t>(j)] = experts_.expert(j);
    bytes[static_cast<size_t>(j)] =
        static_cast<uint64_t>(params.layout(experts_.group(j)).numel()) *
        dtype_size_bytes(params.compute_dtype());
  }
  // The previous MoE layer's agreed active set of this micro-batch (co-activation), known only
  // when planning just in time.
  const std::vector<char>* prev = moe_index_ > 0 && when == Prepare::JustInTime
                                      ? &rt_.planning.frequency->last_active(moe_index_ - 1)
                                      : nullptr;
  plan_p_.resize(static_cast<size_t>(cfg_.num_experts));
  for (int64_t e = 0; e < cfg_.num_experts; ++e)
    plan_p_[static_cast<size_t>(e)] =
        rt_.planning.frequency->probability(moe_index_, static_cast<int>(e));
  // prefetch.pregate: the previous MoE layer's lookahead for this micro-batch, calibrated.
  std::vector<double> given;
  const prefetch::PregateModel* pg = rt_.planning.pregate;
  if (pg && when == Prepare::JustInTime && pg->counts(moe_index_, ctx.micro_batch)) {
    for (int64_t e = 0; e < cfg_.num_experts; ++e)
      given.push_back(pg->probability(moe_index_, static_cast<int>(e), ctx.micro_batch));
    plan_p_ = given;
  }
  prefetch::PlanNotes notes;
  planned_ = planner_of(rt_).expert_plan({moe_index_, candidates, bytes, prev, given}, &notes);
  // The speculation window: from this just-in-time plan to the router's output, the time a
  // speculative gather can take without delaying a needed one (prefetch/link_idle.h).
  const bool windowed = when == Prepare::JustInTime && rt_.report.trace != nullptr &&
                        planner_of(rt_).measures_idle_link();
  if (windowed) window_ = rt_.report.trace->begin_window(ctx.s());
  if (rt_.report.stats) rt_.report.stats->speculation_gated += notes.gated;
  std::vector<int> groups;  // in plan order, coalesced
  for (int e : planned_) groups.push_back(experts_.group(e - experts_.expert(0)));
  // Speculative: left out of the windows' busy time (the idle time they would otherwise fill).
  if (windowed) rt_.report.trace->speculative_collectives(true);
  params.prefetch_set(groups, ctx.s());
  if (windowed) rt_.report.trace->speculative_collectives(false);
}

void MoeFeedForward::prepare_backward(const layers::ModuleContext& ctx, ParamProvider& params,
                                      const Saved& saved) {
  const auto* sv = dynamic_cast<const MoeSaved*>(&saved);
  MOEZERO_CHECK(sv != nullptr, "MoeFeedForward::prepare_backward of layer ", layer_,
                ": saved state is not a MoeFeedForward's");
  if (rt_.options.gather->prefetch_backward(ctx, params, experts_) != ExpertPrefetch::Routed)
    return;
  if (!planner_of(rt_).exact_backward()) return;
  std::vector<int> local(static_cast<size_t>(experts_.count()));
  for (int j = 0; j < experts_.count(); ++j) local[static_cast<size_t>(j)] = j;
  std::vector<int> groups;  // in backward order, coalesced
  for (int j : planner_of(rt_).backward_order(local, sv->active))
    groups.push_back(experts_.group(j));
  params.prefetch_set(groups, ctx.s(), ParamProvider::FetchReason::Exact);
}

Router::Routing& MoeFeedForward::route(const layers::ModuleContext& ctx, ParamProvider& params,
                                       const Tensor& h, MoeSaved& sv) {
  const int64_t N = ctx.rows(), C = cfg_.d_model;
  const Tensor flat = params.acquire(first_group_, ctx.s());
  const GroupLayout& lay = params.layout(first_group_);
  sv.rstd = ctx.alloc(DType::F32, Shape{N}, "moe.rstd");
  sv.hn = ctx.alloc_act(Shape{N, C}, "moe.hn");
  ctx.ops().rmsnorm_forward(ctx.s(), h, lay.view(flat, kMoeNorm), static_cast<float>(cfg_.norm_eps),
                            sv.hn, sv.rstd);
  std::span<const int64_t> forced;  // moe.routing_replay: this rank's recorded counts
  if (rt_.routing.replay) forced = rt_.routing.replay->counts(ctx.micro_batch, moe_index_);
  return router_.forward_local(ctx, sv.hn, lay.view(flat, kRouterGate), ctx.token_offset,
                               ctx.micro_batch, RouterMode::Train, forced);
}

void MoeFeedForward::pregate(const layers::ModuleContext& ctx, ParamProvider& params,
                             const Router::Routing& routing, MoeSaved& sv) {
  prefetch::PregateModel* pg = rt_.planning.pregate;
  if (!pg || moe_index_ + 1 >= pg->layers() || !planner_of(rt_).plans_experts()) return;
  const int next = pg->gate_group(moe_index_ + 1);
  if (next < 0) return;
  Stream& s = ctx.s();
  Ops& ops = ctx.ops();
  const int64_t N = ctx.rows(), E = cfg_.num_experts;
  const int64_t S = router_.stats_layout().numel();
  sv.agreement = ctx.alloc(DType::F32, Shape{S + E}, "moe.pregate.agreement");
  s.device().memcpy_async(sv.agreement.view().data(), routing.stats.data(),
                          static_cast<size_t>(S) * 4, s);
  // The next layer's gate (its layer group: an early acquire, the same on every rank) on this
  // layer's router input, in f32 as the router computes its logits; top-k per token; counts.
  const Tensor flat = params.acquire(next, s);
  const Tensor gate = params.layout(next).view(flat, kRouterGate);
  TensorBuffer x32, g32;
  Tensor x = sv.hn, g = gate;
  if (x.dtype() != DType::F32) {
    x32 = ctx.alloc(DType::F32, x.shape(), "moe.pregate.x32");
    ops.cast(s, x, x32);
    x = x32;
  }
  if (g.dtype() != DType::F32) {
    g32 = ctx.alloc(DType::F32, g.shape(), "moe.pregate.gate32");
    ops.cast(s, g, g32);
    g = g32;
  }
  TensorBuffer logits = ctx.alloc(DType::F32, Shape{N, E}, "moe.pregate.logits");
  ops.gemm(s, GemmArgs{x, g, logits, Transpose::No, Transpose::Yes, 1.0f, 0.0f});
  params.release(next, s);
  const int k = static_cast<int>(cfg_.top_k);
  TensorBuffer vals = ctx.alloc(DType::F32, Shape{N, k}, "moe.pregate.vals");
  TensorBuffer ids = ctx.alloc(DType::I32, Shape{N, k}, "moe.pregate.ids");
  ops.topk(s, logits, k, vals, ids);
  TensorBuffer counts = ctx.alloc(DType::I32, Shape{E}, "moe.pregate.counts");
  ops.expert_histogram(s, ids.view().reshape({N * k}), static_cast<int>(E), counts);
  ops.cast(s, counts, sv.agreement.view().view_elems(S, Shape{E}));
}

void MoeFeedForward::agree(const layers::ModuleContext& ctx, ParamProvider& params,
                           const Router::Routing& routing, const MoeSaved& sv) {
  Stream& s = ctx.s();
  const int64_t S = router_.stats_layout().numel();
  if (sv.agreement) {  // the statistics and the lookahead counts in one all-reduce
    if (rt_.comms.router && rt_.comms.router->size() > 1)
      rt_.comms.router->all_reduce(sv.agreement.view().data(), sv.agreement.view().data(),
                                   static_cast<size_t>(sv.agreement.view().numel()), DType::F32,
                                   ReduceOp::Sum, s);
    s.device().memcpy_async(routing.stats.data(), sv.agreement.view().data(),
                            static_cast<size_t>(S) * 4, s);
  } else if (rt_.comms.router && rt_.comms.router->size() > 1) {
    rt_.comms.router->all_reduce(routing.stats.data(), routing.stats.data(), static_cast<size_t>(S),
                                 DType::F32, ReduceOp::Sum, s);
  }
  const int64_t global_tokens = ctx.global_tokens > 0 ? ctx.global_tokens : ctx.rows();
  router_.finish(ctx, global_tokens, rt_.options.loss_weight, ctx.loss_out, ctx.aux_out);
  params.release(first_group_, s);  // the router read the gate weight (forward_local/finish)
}

std::vector<float> MoeFeedForward::synchronize(const layers::ModuleContext& ctx,
                                               DispatchCounts& counts,
                                               const Router::Routing& routing,
                                               const MoeSaved& sv) const {
  Stream& s = ctx.s();
  dispatcher_.download_counts(ctx, counts);
  const size_t S = static_cast<size_t>(router_.stats_layout().numel());
  std::vector<float> h_stats(sv.agreement ? static_cast<size_t>(sv.agreement.view().numel()) : S);
  s.device().memcpy_async(h_stats.data(),
                          sv.agreement ? sv.agreement.view().data() : routing.stats.data(),
                          h_stats.size() * 4, s);
  s.synchronize();     // HOST SYNC: sizes of the token exchange and the agreed active set
  if (sv.agreement) {  // prefetch.pregate: the next MoE layer's agreed lookahead counts
    rt_.planning.pregate->set_counts(moe_index_ + 1, ctx.micro_batch,
                                     std::span<const float>(h_stats).subspan(S));
    h_stats.resize(S);
  }
  if (rt_.routing.source) simulated_counts(ctx, counts, h_stats);
  return h_stats;
}

void MoeFeedForward::simulated_counts(const layers::ModuleContext& ctx, DispatchCounts& counts,
                                      std::vector<float>& h_stats) const {
  const RoutingSource& src = *rt_.routing.source;
  const int64_t E = cfg_.num_experts, mb = ctx.micro_batch;
  const int Epr = experts_.count();
  const int me = rt_.comms.router ? rt_.comms.router->global_rank() : 0;
  const int world = rt_.comms.router ? rt_.comms.router->size() : 1;
  const std::vector<int64_t> mine = src.counts(mb, moe_index_, me);
  MOEZERO_CHECK(static_cast<int64_t>(mine.size()) == E, "routing source: ", mine.size(),
                " counts for ", E, " experts");
  for (int64_t e = 0; e < E; ++e)
    counts.h_local[static_cast<size_t>(e)] = static_cast<int32_t>(mine[static_cast<size_t>(e)]);
  for (int p = 0; p < rt_.comms.ep_size; ++p) {  // what EP peer p routes to this rank's experts
    const int peer = rt_.comms.a2a ? rt_.comms.a2a->group().ranks[static_cast<size_t>(p)] : me;
    const std::vector<int64_t> theirs =
        p == rt_.comms.ep_rank ? mine : src.counts(mb, moe_index_, peer);
    for (int j = 0; j < Epr; ++j)
      counts.h_recv[static_cast<size_t>(p * Epr + j)] =
          static_cast<int32_t>(theirs[static_cast<size_t>(experts_.expert(j))]);
  }
  // The agreed statistics: every rank's selections (dropless: all kept); the probability mass
  // stands in as selections / top_k (a token's probabilities sum to one).
  const std::vector<int64_t> total = src.total(mb, moe_index_, world);
  for (int64_t e = 0; e < E; ++e) {
    const float c = static_cast<float>(total[static_cast<size_t>(e)]);
    h_stats[static_cast<size_t>(e)] = c;
    h_stats[static_cast<size_t>(E + e)] = c;
    h_stats[static_cast<size_t>(2 * E + e)] = c / static_cast<float>(cfg_.top_k);
  }
}

void MoeFeedForward::record_prediction(std::span<const float> kept) {
  if (!rt_.report.stats || plan_p_.empty()) return;
  const size_t m = static_cast<size_t>(moe_index_), nb = MoeStats::kCalibrationBuckets;
  for (size_t e = 0; e < plan_p_.size(); ++e) {
    const double p = plan_p_[e], y = kept[e] > 0.5f ? 1.0 : 0.0;
    rt_.report.stats->brier_sum[m] += (p - y) * (p - y);
    rt_.report.stats->brier_count[m] += 1;
    const size_t b = std::min(nb - 1, static_cast<size_t>(std::max(0.0, p) * double(nb)));
    rt_.report.stats->calibration_count[m][b] += 1;
    rt_.report.stats->calibration_active[m][b] += y > 0.5;
  }
  plan_p_.clear();
}

std::vector<char> MoeFeedForward::apply_agreement(ParamProvider& params,
                                                  std::span<const float> kept) {
  const int64_t E = cfg_.num_experts;
  const int Epr = experts_.count();
  std::vector<char> active(static_cast<size_t>(Epr), 0);
  for (int j = 0; j < Epr; ++j)
    active[static_cast<size_t>(j)] = kept[static_cast<size_t>(experts_.expert(j))] > 0.5f;
  if (rt_.planning.frequency) {  // learn from the agreed counts; identical on every rank
    std::vector<int64_t> counts(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
      counts[static_cast<size_t>(e)] = static_cast<int64_t>(kept[static_cast<size_t>(e)] + 0.5f);
    rt_.planning.frequency->update(moe_index_, counts);
    for (int j = 0; j < Epr; ++j)
      params.set_keep_score(experts_.group(j),
                            rt_.planning.frequency->probability(moe_index_, experts_.expert(j)));
  }
  record_prediction(kept);
  for (int e : planned_)  // predicted but not needed: the provider drops (or caches) them
    if (!active[static_cast<size_t>(e - experts_.expert(0))])
      params.discard_prefetch(experts_.group(e - experts_.expert(0)));
  planned_.clear();
  if (rt_.report.stats) {
    auto& tpe = rt_.report.stats->tokens_per_expert[static_cast<size_t>(moe_index_)];
    int active_count = 0;
    for (int64_t e = 0; e < E; ++e) {
      tpe[static_cast<size_t>(e)] += static_cast<int64_t>(kept[static_cast<size_t>(e)] + 0.5f);
      active_count += kept[static_cast<size_t>(e)] > 0.5f;
    }
    rt_.report.stats->active_experts[static_cast<size_t>(moe_index_)] = active_count;
    rt_.report.stats->active_layer_experts += static_cast<uint64_t>(active_count);
    rt_.report.stats->layer_expert_slots += static_cast<uint64_t>(E);
  }
  return active;
}

std::unique_ptr<layers::FeedForward::Saved> MoeFeedForward::forward(
    const layers::ModuleContext& ctx, ParamProvider& params, const Tensor& h, const Tensor& out) {
  auto sv = std::make_unique<MoeSaved>();
  // 1. route; dispatch preprocess: this rank's kept assignments per expert.
  const Router::Routing& routing = route(ctx, params, h, *sv);
  if (window_ >= 0) rt_.report.trace->end_window(window_);  // the router's output is enqueued
  window_ = -1;
  DispatchCounts counts = dispatcher_.count(ctx, routing.expert_ids);
  // 2. agree: global statistics over the world, per-peer counts over the EP group, host sync.
  pregate(ctx, params, routing, *sv);
  agree(ctx, params, routing, *sv);
  dispatcher_.exchange_counts(ctx, counts);
  const std::vector<float> h_stats = synchronize(ctx, counts, routing, *sv);
  sv->agreement.reset();
  sv->routes = dispatcher_.plan(counts, moe_index_);
  sv->active = apply_agreement(params, router_.stats_layout().kept(h_stats));
  if (rt_.planning.pregate) {  // how this micro-batch's lookahead (if any) came out
    const prefetch::PregateModel::Outcome o = rt_.planning.pregate->observe(
        moe_index_, ctx.micro_batch, router_.stats_layout().kept(h_stats));
    if (rt_.report.stats) {
      rt_.report.stats->pregate_predicted += o.predicted;
      rt_.report.stats->pregate_hits += o.hits;
      rt_.report.stats->pregate_active += o.active;
    }
  }
  if (rt_.report.stats) {  // the step's balance metrics (agreed values)
    const std::span<const float> sel = router_.stats_layout().selected(h_stats);
    auto& out = rt_.report.stats->selected_per_expert[static_cast<size_t>(moe_index_)];
    for (size_t e = 0; e < out.size(); ++e) out[e] += static_cast<int64_t>(sel[e] + 0.5f);
    rt_.report.stats->expert_bias[static_cast<size_t>(moe_index_)] = router_.bias();
    if (rt_.report.stats->record_local_counts)
      rt_.report.stats->local_counts.push_back(counts.h_local);
  }
  if (!load_.empty()) {
    const std::span<const float> sel = router_.stats_layout().selected(h_stats);
    sv->selected.assign(sel.begin(), sel.end());
  }
  // 3. dispatch: rows to the owners of their experts.
  sv->xr = dispatcher_.dispatch(ctx, sv->hn, routing.expert_ids, sv->routes);
  // 4. compute: the active local experts, each over its row blocks (one per source peer).
  TensorBuffer yr =
      experts_.forward(ctx, params, sv->routes, sv->active, sv->xr, sv->gate, sv->up, sv->held);
  // 5. combine: back to the token owners, weighted combine, residual.
  dispatcher_.combine(ctx, yr, routing.weights, sv->routes, out);
  ctx.ops().add(ctx.s(), out, h, out);
  // 6. shared experts: every token, out += shared(xn).
  if (shared_) shared_->forward(ctx, params, sv->hn, out, sv->shared);
  return sv;
}

void MoeFeedForward::drop_for_recompute(Saved& saved) const {
  auto* sv = dynamic_cast<MoeSaved*>(&saved);
  MOEZERO_CHECK(sv != nullptr, "MoeFeedForward::drop_for_recompute of layer ", layer_,
                ": saved state is not a MoeFeedForward's");
  sv->rstd.reset();
  sv->hn.reset();
  sv->xr.reset();
  sv->gate.reset();
  sv->up.reset();
  sv->routes.ys.reset();  // dispatch() rebuilds perm, inv_perm, offsets; combine() ys
  sv->routes.perm.reset();
  sv->routes.inv_perm.reset();
  sv->routes.offsets.reset();
  sv->shared = SharedExperts::Saved();
}

void MoeFeedForward::recompute(const layers::ModuleContext& ctx, ParamProvider& params,
                               Saved& saved, const Tensor& h, const Tensor& out) {
  auto* sv = dynamic_cast<MoeSaved*>(&saved);
  MOEZERO_CHECK(sv != nullptr, "MoeFeedForward::recompute of layer ", layer_,
                ": saved state is not a MoeFeedForward's");
  const int64_t N = ctx.rows(), C = cfg_.d_model;
  // 1. the norm (route() without the router: its state is the forward's).
  const Tensor flat = params.acquire(first_group_, ctx.s());
  const GroupLayout& lay = params.layout(first_group_);
  sv->rstd = ctx.alloc(DType::F32, Shape{N}, "moe.rstd");
  sv->hn = ctx.alloc_act(Shape{N, C}, "moe.hn");
  ctx.ops().rmsnorm_forward(ctx.s(), h, lay.view(flat, kMoeNorm), static_cast<float>(cfg_.norm_eps),
                            sv->hn, sv->rstd);
  params.release(first_group_, ctx.s());
  // 3.-5. dispatch, compute, combine over the kept layout (the residual add is skipped: `out`
  // is scratch); 6. the shared experts.
  const Router::Routing& routing = router_.routing();
  sv->xr = dispatcher_.dispatch(ctx, sv->hn, routing.expert_ids, sv->routes);
  TensorBuffer yr =
      experts_.recompute(ctx, params, sv->routes, sv->active, sv->xr, sv->gate, sv->up, sv->held);
  dispatcher_.combine(ctx, yr, routing.weights, sv->routes, out);
  if (shared_) shared_->forward(ctx, params, sv->hn, out, sv->shared);
}

void MoeFeedForward::backward(const layers::ModuleContext& ctx, ParamProvider& params,
                              std::unique_ptr<Saved> saved, const Tensor& h, const Tensor& dresid) {
  auto* sv = dynamic_cast<MoeSaved*>(saved.get());
  MOEZERO_CHECK(sv != nullptr, "MoeFeedForward::backward of layer ", layer_,
                ": saved state is missing or not a MoeFeedForward's");
  for (size_t e = 0; e < sv->selected.size(); ++e) load_[e] += sv->selected[e];
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t N = ctx.rows(), C = cfg_.d_model;

  // 6'. shared experts (the reverse of forward's order): their dxn part, added below.
  TensorBuffer dhn_shared;
  if (shared_) {
    dhn_shared = ctx.alloc_act(Shape{N, C}, "moe.dhn_shared");
    ops.fill(s, dhn_shared, 0.0);
    shared_->backward(ctx, params, sv->hn, dresid, dhn_shared, sv->shared);
  }

  // 5'. combine backward: dweights (N, k); the output gradient rows to the expert owners.
  TensorBuffer dweights;
  TensorBuffer dyr = dispatcher_.combine_backward(ctx, dresid, sv->routes, dweights);

  // 4'. compute: the experts in the forward order (the agreed active set: every EDP member
  // issues the same gathers and gradient reductions).
  TensorBuffer dxr = experts_.backward(ctx, params, sv->routes, sv->active, sv->xr, sv->gate,
                                       sv->up, dyr, sv->held);
  sv->gate.reset();
  sv->up.reset();
  sv->xr.reset();
  dyr.reset();

  // 3'. dispatch backward: rows back to their tokens.
  TensorBuffer dhn = dispatcher_.dispatch_backward(ctx, dxr, sv->routes);
  if (dhn_shared) {
    ops.add(s, dhn, dhn_shared, dhn);
    dhn_shared.reset();
  }

  // 1'. router and norm: the last writes into the layer group's gradient.
  const Tensor flat = params.acquire(first_group_, s);
  const Tensor gflat = params.grad(first_group_, s);
  const GroupLayout& lay = params.layout(first_group_);
  router_.backward(ctx, dweights, sv->hn, lay.view(flat, kRouterGate), dhn,
                   lay.view(gflat, kRouterGate));
  TensorBuffer dh = ctx.alloc_act(Shape{N, C}, "moe.dh");
  ops.rmsnorm_backward(s, dhn, h, lay.view(flat, kMoeNorm), sv->rstd, dh,
                       lay.view(gflat, kMoeNorm));
  params.grad_ready(first_group_, s);
  params.release(first_group_, s);
  ops.add(s, dresid, dh, dresid);
}

}  // namespace moezero::moe
