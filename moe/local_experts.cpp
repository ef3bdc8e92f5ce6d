// moe/local_experts.cpp — run order, forward and backward of this rank's experts
// (local_experts.h).
#include "moe/local_experts.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/trace.h"

namespace moezero::moe {

namespace {
constexpr size_t kW1 = 0, kW2 = 1, kW3 = 2;  // expert group: gate, down, up
}  // namespace

LocalExperts::LocalExperts(const ModelConfig& cfg, const MoeRuntime& rt, int layer, int first_group)
    : cfg_(cfg),
      rt_(rt),
      layer_(layer),
      first_group_(first_group),
      experts_per_rank_(static_cast<int>(cfg.num_experts / rt.comms.ep_size)) {}

std::vector<GroupSpec> LocalExperts::param_groups() const {
  const std::string p = "model.layers." + std::to_string(layer_) + ".";
  const float std_ = static_cast<float>(cfg_.init_std);
  const int64_t C = cfg_.d_model, F = cfg_.expert_width();
  std::vector<GroupSpec> groups;
  for (int j = 0; j < experts_per_rank_; ++j) {
    const int e = expert(j);
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

int LocalExperts::experts_span(const layers::ModuleContext& ctx, const DispatchState& rows,
                               const std::vector<ExpertParams>& ex, TracePass pass) const {
  if (!rt_.report.trace || !rt_.report.trace->tracing()) return -1;
  // FLOPs of one row: 3 GEMMs of 2 C F forward; backward 6 (dact, dW2, dW1, dW3, dx twice).
  const uint64_t row_flops = static_cast<uint64_t>(2 * cfg_.d_model * cfg_.expert_width()) *
                             (pass == TracePass::Forward ? 3u : 6u);
  std::vector<TraceRecorder::ExpertShare> shares;
  for (const ExpertParams& e : ex) {
    const int64_t n = rows.rows_of(e.j);
    shares.push_back({expert(e.j), n, static_cast<uint64_t>(n) * row_flops});
  }
  return rt_.report.trace->begin_experts(ctx.s(), layer_, pass, std::move(shares));
}

std::vector<int> LocalExperts::block_groups() const {
  std::vector<int> groups;
  for (int j = 0; j < experts_per_rank_; ++j) groups.push_back(group(j));
  return groups;
}

std::vector<Tensor> LocalExperts::acquire_block(const layers::ModuleContext& ctx,
                                                ParamProvider& params) const {
  params.prefetch_block(block_groups(), ctx.s(), ParamProvider::FetchReason::Needed);
  std::vector<Tensor> w;
  for (int j = 0; j < experts_per_rank_; ++j) w.push_back(params.acquire(group(j), ctx.s()));
  return w;
}

void LocalExperts::release_block(const layers::ModuleContext& ctx, ParamProvider& params) const {
  for (int j = 0; j < experts_per_rank_; ++j) params.release(group(j), ctx.s());
}

namespace {

// The row ranges [row, row + n) of a set of blocks, sorted and with adjacent ones merged
// (elementwise ops give the same bits over a merged range as block by block).
std::vector<std::pair<int64_t, int64_t>> merged_ranges(std::vector<std::pair<int64_t, int64_t>> r) {
  std::sort(r.begin(), r.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& [row, n] : r) {
    if (!out.empty() && out.back().first + out.back().second == row)
      out.back().second += n;
    else
      out.emplace_back(row, n);
  }
  return out;
}

}  // namespace

void LocalExperts::forward_experts(const layers::ModuleContext& ctx, const DispatchState& rows,
                                   const std::vector<ExpertParams>& ex, const Tensor& x,
                                   const Tensor& gate, const Tensor& up, const Tensor& act,
                                   const Tensor& y) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  std::vector<GemmProblem> gate_up, down;
  std::vector<std::pair<int64_t, int64_t>> blocks;
  for (const ExpertParams& e : ex)
    rows.for_each_block(e.j, [&](int64_t row, int64_t n) {
      auto block = [&](const Tensor& t) { return t.slice_rows(row, row + n); };
      gate_up.push_back({block(x), e.layout->view(e.w, kW1), block(gate)});
      gate_up.push_back({block(x), e.layout->view(e.w, kW3), block(up)});
      down.push_back({block(act), e.layout->view(e.w, kW2), block(y)});
      blocks.emplace_back(row, n);
    });
  if (blocks.empty()) return;
  const int span = experts_span(ctx, rows, ex, TracePass::Forward);  // while tracing
  ops.grouped_gemm(s, gate_up, Transpose::No, Transpose::Yes, 1.0f, 0.0f);
  for (const auto& [row, n] : merged_ranges(blocks)) {
    auto r = [&](const Tensor& t) { return t.slice_rows(row, row + n); };
    ops.swiglu_forward(s, r(gate), r(up), r(act));
  }
  ops.grouped_gemm(s, down, Transpose::No, Transpose::Yes, 1.0f, 0.0f);
  if (rt_.report.trace) rt_.report.trace->end_span(span);
}

void LocalExperts::backward_experts(const layers::ModuleContext& ctx, const DispatchState& rows,
                                    const std::vector<ExpertParams>& ex, const Tensor& x,
                                    const Tensor& gate, const Tensor& up, const Tensor& dy,
                                    const Tensor& act, const Tensor& dact, const Tensor& dgate,
                                    const Tensor& dup, const Tensor& dx) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  std::vector<GemmProblem> dact_p, dx1, dx3;
  // Weight gradients accumulate (`+=`) over an expert's blocks: round r holds every expert's
  // r-th block, so each expert's blocks are added in its row-block order.
  std::vector<std::vector<GemmProblem>> gw2_rounds, gw13_rounds;
  std::vector<std::pair<int64_t, int64_t>> blocks;
  for (const ExpertParams& e : ex) {
    size_t r = 0;
    rows.for_each_block(e.j, [&](int64_t row, int64_t n) {
      auto block = [&](const Tensor& t) { return t.slice_rows(row, row + n); };
      if (r == gw2_rounds.size()) {
        gw2_rounds.emplace_back();
        gw13_rounds.emplace_back();
      }
      dact_p.push_back({block(dy), e.layout->view(e.w, kW2), block(dact)});
      gw2_rounds[r].push_back({block(dy), block(act), e.layout->view(e.gw, kW2)});
      gw13_rounds[r].push_back({block(dgate), block(x), e.layout->view(e.gw, kW1)});
      gw13_rounds[r].push_back({block(dup), block(x), e.layout->view(e.gw, kW3)});
      dx1.push_back({block(dgate), e.layout->view(e.w, kW1), block(dx)});
      dx3.push_back({block(dup), e.layout->view(e.w, kW3), block(dx)});
      blocks.emplace_back(row, n);
      ++r;
    });
  }
  if (blocks.empty()) return;
  const int span = experts_span(ctx, rows, ex, TracePass::Backward);  // while tracing
  const auto ranges = merged_ranges(blocks);
  auto each_range = [&](auto&& f) {
    for (const auto& [row, n] : ranges)
      f([&](const Tensor& t) { return t.slice_rows(row, row + n); });
  };
  ops.grouped_gemm(s, dact_p, Transpose::No, Transpose::No, 1.0f, 0.0f);
  // SwiGLU's backward and the recomputed activation (for w2's gradient) in one pass.
  each_range([&](auto r) {
    ops.swiglu_backward_act(s, r(gate), r(up), r(dact), r(act), r(dgate), r(dup));
  });
  for (const auto& round : gw2_rounds)
    ops.grouped_gemm(s, round, Transpose::Yes, Transpose::No, 1.0f, 1.0f);
  for (const auto& round : gw13_rounds)
    ops.grouped_gemm(s, round, Transpose::Yes, Transpose::No, 1.0f, 1.0f);
  ops.grouped_gemm(s, dx1, Transpose::No, Transpose::No, 1.0f, 0.0f);
  ops.grouped_gemm(s, dx3, Transpose::No, Transpose::No, 1.0f, 1.0f);
  if (rt_.report.trace) rt_.report.trace->end_span(span);
}

TensorBuffer LocalExperts::forward(const layers::ModuleContext& ctx, ParamProvider& params,
                                   const DispatchState& rows, const std::vector<char>& active,
                                   const Tensor& x, TensorBuffer& gate, TensorBuffer& up,
                                   std::vector<Tensor>& held) const {
  const int64_t R = rows.received, C = cfg_.d_model, F = cfg_.expert_width();
  gate = ctx.alloc_act(Shape{R, F}, "moe.gate");
  up = ctx.alloc_act(Shape{R, F}, "moe.up");
  TensorBuffer act = ctx.alloc_act(Shape{R, F}, "moe.act");
  TensorBuffer y = ctx.alloc_act(Shape{R, C}, "moe.yr");
  rt_.options.gather->forward(ctx, params, *this, active, held,
                              [&](const std::vector<ExpertParams>& ex) {
                                forward_experts(ctx, rows, ex, x, gate, up, act, y);
                              });
  act.reset();
  return y;
}

TensorBuffer LocalExperts::recompute(const layers::ModuleContext& ctx, ParamProvider& params,
                                     const DispatchState& rows, const std::vector<char>& active,
                                     const Tensor& x, TensorBuffer& gate, TensorBuffer& up,
                                     std::vector<Tensor>& held) const {
  if (held.empty()) return forward(ctx, params, rows, active, x, gate, up, held);
  const int64_t R = rows.received, C = cfg_.d_model, F = cfg_.expert_width();
  gate = ctx.alloc_act(Shape{R, F}, "moe.gate");
  up = ctx.alloc_act(Shape{R, F}, "moe.up");
  TensorBuffer act = ctx.alloc_act(Shape{R, F}, "moe.act");
  TensorBuffer y = ctx.alloc_act(Shape{R, C}, "moe.yr");
  std::vector<ExpertParams> kept;  // held since forward, id order
  std::vector<char> rest = active;
  for (int j = 0; j < experts_per_rank_; ++j) {
    const size_t jj = static_cast<size_t>(j);
    if (!active[jj] || jj >= held.size() || !held[jj].defined()) continue;
    params.use_held(group(j));
    kept.push_back({j, &params.layout(group(j)), held[jj], Tensor()});
    rest[jj] = 0;
  }
  if (!kept.empty()) forward_experts(ctx, rows, kept, x, gate, up, act, y);
  if (std::any_of(rest.begin(), rest.end(), [](char a) { return a != 0; })) {
    std::vector<Tensor> more;
    rt_.options.gather->forward(ctx, params, *this, rest, more,
                                [&](const std::vector<ExpertParams>& ex) {
                                  forward_experts(ctx, rows, ex, x, gate, up, act, y);
                                });
    for (size_t j = 0; j < more.size() && j < held.size(); ++j)
      if (more[j].defined()) held[j] = more[j];
  }
  act.reset();
  return y;
}

TensorBuffer LocalExperts::backward(const layers::ModuleContext& ctx, ParamProvider& params,
                                    const DispatchState& rows, const std::vector<char>& active,
                                    const Tensor& x, const Tensor& gate, const Tensor& up,
                                    const Tensor& dy, std::vector<Tensor>& held) const {
  const int64_t R = rows.received, C = cfg_.d_model, F = cfg_.expert_width();
  TensorBuffer dx = ctx.alloc_act(Shape{R, C}, "moe.dxr");
  TensorBuffer act = ctx.alloc_act(Shape{R, F}, "moe.act");
  TensorBuffer dact = ctx.alloc_act(Shape{R, F}, "moe.dact");
  TensorBuffer dgate = ctx.alloc_act(Shape{R, F}, "moe.dgate");
  TensorBuffer dup = ctx.alloc_act(Shape{R, F}, "moe.dup");
  rt_.options.gather->backward(
      ctx, params, *this, active, held, [&](const std::vector<ExpertParams>& ex) {
        backward_experts(ctx, rows, ex, x, gate, up, dy, act, dact, dgate, dup, dx);
      });
  if (rt_.options.reduce_every_expert) {
    // zero.expert_grads=all (the incumbents' reduction): every inactive expert's gradient, a
    // zero, is reduced as an active one's is; in id order after the active ones, as `active`
    // is agreed, so the buckets match on every rank of the EDP group.
    for (int j = 0; j < count(); ++j) {
      if (active[static_cast<size_t>(j)]) continue;
      params.grad(group(j), ctx.s());  // zero-filled by its first use in this pass
      params.grad_ready(group(j), ctx.s());
    }
  }
  return dx;
}

}  // namespace moezero::moe
