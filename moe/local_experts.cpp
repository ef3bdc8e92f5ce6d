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
      experts_per_rank_(static_cast<int>(cfg.num_experts / rt.ep_size)) {}

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

int LocalExperts::span(const ModuleContext& ctx, const DispatchState& rows, int j,
                       TracePass pass) const {
  if (!rt_.trace || !rt_.trace->tracing()) return -1;
  return rt_.trace->begin_expert(ctx.s(), layer_, expert(j), rows.rows_of(j), pass);
}

std::vector<int> LocalExperts::block_groups() const {
  std::vector<int> groups;
  for (int j = 0; j < experts_per_rank_; ++j) groups.push_back(group(j));
  return groups;
}

std::vector<Tensor> LocalExperts::acquire_block(const ModuleContext& ctx,
                                                ParamProvider& params) const {
  params.prefetch_block(block_groups(), ctx.s(), ParamProvider::FetchReason::Needed);
  std::vector<Tensor> w;
  for (int j = 0; j < experts_per_rank_; ++j) w.push_back(params.acquire(group(j), ctx.s()));
  return w;
}

void LocalExperts::release_block(const ModuleContext& ctx, ParamProvider& params) const {
  for (int j = 0; j < experts_per_rank_; ++j) params.release(group(j), ctx.s());
}

void LocalExperts::forward_expert(const ModuleContext& ctx, const DispatchState& rows, int j,
                                  const GroupLayout& el, const Tensor& w, const Tensor& x,
                                  const Tensor& gate, const Tensor& up, const Tensor& act,
                                  const Tensor& y) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int sp = span(ctx, rows, j, TracePass::Forward);
  rows.for_each_block(j, [&](int64_t row, int64_t n) {
    auto block = [&](const Tensor& t) { return t.slice_rows(row, row + n); };
    linear_forward(ctx, block(x), el.view(w, kW1), block(gate));
    linear_forward(ctx, block(x), el.view(w, kW3), block(up));
    ops.swiglu_forward(s, block(gate), block(up), block(act));
    linear_forward(ctx, block(act), el.view(w, kW2), block(y));
  });
  if (rt_.trace) rt_.trace->end_span(sp);
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

void LocalExperts::forward_experts(const ModuleContext& ctx, const DispatchState& rows,
                                   const std::vector<ExpertParams>& ex, const Tensor& x,
                                   const Tensor& gate, const Tensor& up, const Tensor& act,
                                   const Tensor& y) const {
  if (rt_.trace && rt_.trace->tracing()) {  // one span per expert
    for (const ExpertParams& e : ex)
      forward_expert(ctx, rows, e.j, *e.layout, e.w, x, gate, up, act, y);
    return;
  }
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
  ops.grouped_gemm(s, gate_up, Transpose::No, Transpose::Yes, 1.0f, 0.0f);
  for (const auto& [row, n] : merged_ranges(blocks)) {
    auto r = [&](const Tensor& t) { return t.slice_rows(row, row + n); };
    ops.swiglu_forward(s, r(gate), r(up), r(act));
  }
  ops.grouped_gemm(s, down, Transpose::No, Transpose::Yes, 1.0f, 0.0f);
}

void LocalExperts::backward_experts(const ModuleContext& ctx, const DispatchState& rows,
                                    const std::vector<ExpertParams>& ex, const Tensor& x,
                                    const Tensor& gate, const Tensor& up, const Tensor& dy,
                                    const Tensor& act, const Tensor& dact, const Tensor& dgate,
                                    const Tensor& dup, const Tensor& dx) const {
  if (rt_.trace && rt_.trace->tracing()) {  // one span per expert
    for (const ExpertParams& e : ex)
      backward_expert(ctx, rows, e.j, *e.layout, e.w, e.gw, x, gate, up, dy, act, dact, dgate, dup,
                      dx);
    return;
  }
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  std::vector<GemmProblem> dact_p, dx1, dx3;
  // Weight gradients accumulate (`+=`) over an expert's blocks: round r holds every expert's
  // r-th block, so each expert's blocks are added in the same order as backward_expert's.
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
}

TensorBuffer LocalExperts::forward(const ModuleContext& ctx, ParamProvider& params,
                                   const DispatchState& rows, const std::vector<char>& active,
                                   const Tensor& x, TensorBuffer& gate, TensorBuffer& up,
                                   std::vector<Tensor>& held) const {
  const int64_t R = rows.received, C = cfg_.d_model, F = cfg_.expert_width();
  gate = ctx.alloc_act(Shape{R, F}, "moe.gate");
  up = ctx.alloc_act(Shape{R, F}, "moe.up");
  TensorBuffer act = ctx.alloc_act(Shape{R, F}, "moe.act");
  TensorBuffer y = ctx.alloc_act(Shape{R, C}, "moe.yr");
  rt_.gather->forward(ctx, params, *this, active, held, [&](const std::vector<ExpertParams>& ex) {
    forward_experts(ctx, rows, ex, x, gate, up, act, y);
  });
  act.reset();
  return y;
}

void LocalExperts::backward_expert(const ModuleContext& ctx, const DispatchState& rows, int j,
                                   const GroupLayout& el, const Tensor& w, const Tensor& gw,
                                   const Tensor& x, const Tensor& gate, const Tensor& up,
                                   const Tensor& dy, const Tensor& act, const Tensor& dact,
                                   const Tensor& dgate, const Tensor& dup, const Tensor& dx) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int sp = span(ctx, rows, j, TracePass::Backward);
  rows.for_each_block(j, [&](int64_t row, int64_t n) {
    auto block = [&](const Tensor& t) { return t.slice_rows(row, row + n); };
    ops.swiglu_forward(s, block(gate), block(up), block(act));  // recompute
    linear_backward_data(ctx, block(dy), el.view(w, kW2), block(dact), Accumulate::No);
    linear_backward_weight(ctx, block(dy), block(act), el.view(gw, kW2));
    ops.swiglu_backward(s, block(gate), block(up), block(dact), block(dgate), block(dup));
    linear_backward_weight(ctx, block(dgate), block(x), el.view(gw, kW1));
    linear_backward_weight(ctx, block(dup), block(x), el.view(gw, kW3));
    linear_backward_data(ctx, block(dgate), el.view(w, kW1), block(dx), Accumulate::No);
    linear_backward_data(ctx, block(dup), el.view(w, kW3), block(dx), Accumulate::Yes);
  });
  if (rt_.trace) rt_.trace->end_span(sp);
}

TensorBuffer LocalExperts::backward(const ModuleContext& ctx, ParamProvider& params,
                                    const DispatchState& rows, const std::vector<char>& active,
                                    const Tensor& x, const Tensor& gate, const Tensor& up,
                                    const Tensor& dy, std::vector<Tensor>& held) const {
  const int64_t R = rows.received, C = cfg_.d_model, F = cfg_.expert_width();
  TensorBuffer dx = ctx.alloc_act(Shape{R, C}, "moe.dxr");
  TensorBuffer act = ctx.alloc_act(Shape{R, F}, "moe.act");
  TensorBuffer dact = ctx.alloc_act(Shape{R, F}, "moe.dact");
  TensorBuffer dgate = ctx.alloc_act(Shape{R, F}, "moe.dgate");
  TensorBuffer dup = ctx.alloc_act(Shape{R, F}, "moe.dup");
  rt_.gather->backward(ctx, params, *this, active, held, [&](const std::vector<ExpertParams>& ex) {
    backward_experts(ctx, rows, ex, x, gate, up, dy, act, dact, dgate, dup, dx);
  });
  return dx;
}

}  // namespace moezero::moe
