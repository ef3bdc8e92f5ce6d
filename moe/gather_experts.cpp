// moe/gather_experts.cpp — zero.moe_gather=experts (moe/gather_strategy.h): moezero's own way.
// Only the ACTIVE local experts (the globally agreed set) are gathered, each its own group, in an
// order that keeps the collectives of all ranks matched and the shard cache in agreement
// (RunOrder). The routing-aware prefetch plans them before routing; backward's prefetch is exact.
//
// With zero.reshard_after_forward=false, forward keeps each active expert it acquired (`held`,
// slot j) instead of releasing it, without a byte limit, as FSDP2's reshard_after_forward=False
// keeps a module (ParamProvider::hold: its bytes leave the live-parameter count, which bounds
// what is gathered ahead); backward runs the held ones without a gather
// (ParamProvider::use_held), among the first ones, and releases every expert after its
// gradient, in the same order as before.
#include <algorithm>
#include <utility>

#include "core/error.h"
#include "moe/gather_strategy.h"
#include "moe/local_experts.h"

namespace moezero::moe {

namespace {

// The active local experts in the order to run them, in two phases. Gathers are started for all
// of them in id order (the agreed order). Phase 1 (`first`): those whose gather was started or
// that are resident: cached ones first in id order (acquiring them updates the cache's recency,
// which must agree across ranks), then the others in the order their gathers were issued
// (= complete: ParamProvider::fetch_ticket); all are then released (and, in backward, reduced) in
// id order, so the shard cache and the gradient buckets see the same sequence on every rank.
// Phase 2 (`then`): those the live-parameter limit kept from prefetching; each is acquired (an
// on-demand gather, a collective), run and released in id order, one at a time, so the limit
// holds.
struct RunOrder {
  std::vector<int> first, then;
};

// [in] reason: Needed in forward (after the router: on demand), Exact in backward (the exact
// backward prefetch: the routing is known when the layer's backward starts).
RunOrder run_order(const layers::ModuleContext& ctx, ParamProvider& params,
                   const LocalExperts& experts, const std::vector<char>& active,
                   ParamProvider::FetchReason reason) {
  std::vector<int> ids;
  for (int j = 0; j < experts.count(); ++j)
    if (active[static_cast<size_t>(j)]) ids.push_back(j);
  std::vector<int> groups;  // agreed order; resident or in flight (predicted) ones are left out
  for (int j : ids) groups.push_back(experts.group(j));
  params.prefetch_set(groups, ctx.s(), reason);  // coalesced
  // Cached experts first, in id order: acquiring them updates the shard cache's recency, which
  // must advance identically on every rank. Then the rest in the order their gathers were
  // issued, which is the order they complete in (one FIFO gather stream): compute never waits
  // for an expert whose gather queues behind one it could run now (a predicted prefetch of
  // expert 5 before the on-demand gather of expert 0 runs 5 first). Ties (one coalesced
  // gather) in id order. Known without a host query, and the same on every rank.
  RunOrder order;
  std::vector<std::pair<uint64_t, int>> in_flight;
  for (int j : ids) {
    const int g = experts.group(j);
    if (params.needs_fetch(g))
      order.then.push_back(j);  // over the live limit: id order
    else if (params.cached(g))
      order.first.push_back(j);
    else
      in_flight.emplace_back(params.fetch_ticket(g), j);
  }
  std::sort(in_flight.begin(), in_flight.end());
  for (const auto& [ticket, j] : in_flight) order.first.push_back(j);
  return order;
}

// run(wave) for phase 1 in run order, one wave per run of consecutive experts with equal keys
// (first_keys[i] for order.first[i]: experts ready at the same time, e.g. resident ones or one
// coalesced gather), then finish(j) in id order; then run({j}), finish(j) for each of phase 2.
template <typename Run, typename Finish>
void execute(const RunOrder& order, const std::vector<uint64_t>& first_keys, Run&& run,
             Finish&& finish) {
  for (size_t i = 0; i < order.first.size();) {  // in the order parameters are ready
    size_t end = i + 1;
    while (end < order.first.size() && first_keys[end] == first_keys[i]) ++end;
    run(std::vector<int>(order.first.begin() + static_cast<std::ptrdiff_t>(i),
                         order.first.begin() + static_cast<std::ptrdiff_t>(end)));
    i = end;
  }
  std::vector<int> first_ids = order.first;
  std::sort(first_ids.begin(), first_ids.end());
  for (int j : first_ids) finish(j);  // id order: the cache and the gradient buckets agree
  for (int j : order.then) {          // on-demand gathers, one at a time, id order
    run(std::vector<int>{j});
    finish(j);
  }
}

// The wave keys of order.first: 0 for experts resident now (or held: is_held), else their
// gather's ticket (ParamProvider::fetch_ticket), read before any of them is acquired.
template <typename Held>
std::vector<uint64_t> wave_keys(const RunOrder& order, const ParamProvider& params,
                                const LocalExperts& experts, Held&& is_held) {
  std::vector<uint64_t> keys;
  for (int j : order.first) keys.push_back(is_held(j) ? 0 : params.fetch_ticket(experts.group(j)));
  return keys;
}

class ExpertsGather final : public GatherStrategy {
 public:
  std::string_view name() const override { return "experts"; }
  bool uses_shard_cache() const override { return true; }
  bool holds_after_forward(bool reshard_after_forward) const override {
    return !reshard_after_forward;
  }
  ExpertPrefetch prefetch_forward(const layers::ModuleContext&, ParamProvider&, const LocalExperts&,
                                  layers::FeedForward::Prepare) const override {
    return ExpertPrefetch::Routed;
  }
  ExpertPrefetch prefetch_backward(const layers::ModuleContext&, ParamProvider&,
                                   const LocalExperts&) const override {
    return ExpertPrefetch::Routed;
  }
  void forward(const layers::ModuleContext& ctx, ParamProvider& params, const LocalExperts& experts,
               const std::vector<char>& active, std::vector<Tensor>& held,
               const ExpertWave& run) const override;
  void backward(const layers::ModuleContext& ctx, ParamProvider& params,
                const LocalExperts& experts, const std::vector<char>& active,
                std::vector<Tensor>& held, const ExpertWave& run) const override;
};

void ExpertsGather::forward(const layers::ModuleContext& ctx, ParamProvider& params,
                            const LocalExperts& experts, const std::vector<char>& active,
                            std::vector<Tensor>& held, const ExpertWave& run) const {
  Stream& s = ctx.s();
  const RunOrder order =
      run_order(ctx, params, experts, active, ParamProvider::FetchReason::Needed);
  const bool keep = !experts.reshard_after_forward();
  held.assign(keep ? static_cast<size_t>(experts.count()) : 0, Tensor());
  auto wave = [&](const std::vector<int>& ids) {
    std::vector<ExpertWeights> ex;
    for (int j : ids) {
      const Tensor w = params.acquire(experts.group(j), s);  // waits for this wave's gathers only
      ex.push_back({j, &params.layout(experts.group(j)), w, Tensor()});
      if (keep) held[static_cast<size_t>(j)] = w;
    }
    run(ex);
  };
  // Finished in an order that is the same on every rank.
  execute(order, wave_keys(order, params, experts, [](int) { return false; }), wave, [&](int j) {
    if (keep)
      params.hold(experts.group(j));  // kept until this expert's backward
    else
      params.release(experts.group(j), s);
  });
}

void ExpertsGather::backward(const layers::ModuleContext& ctx, ParamProvider& params,
                             const LocalExperts& experts, const std::vector<char>& active,
                             std::vector<Tensor>& held, const ExpertWave& run) const {
  Stream& s = ctx.s();
  // Backward prefetch is exact: the routing is known, so every needed expert's gather starts
  // now, in the order they will run (cached ones are resident already; the provider keeps
  // within its live-parameter limit).
  const auto is_held = [&](int j) {
    return static_cast<size_t>(j) < held.size() && held[static_cast<size_t>(j)].defined();
  };
  std::vector<char> rest = active;  // the active experts not held since forward
  std::vector<int> kept;
  for (int j = 0; j < experts.count(); ++j)
    if (active[static_cast<size_t>(j)] && is_held(j)) {
      rest[static_cast<size_t>(j)] = 0;
      kept.push_back(j);
    }
  RunOrder order = run_order(ctx, params, experts, rest, ParamProvider::FetchReason::Exact);
  order.first.insert(order.first.begin(), kept.begin(), kept.end());  // ready now, id order
  execute(
      order, wave_keys(order, params, experts, is_held),
      [&](const std::vector<int>& ids) {
        std::vector<ExpertWeights> ex;
        for (int j : ids) {
          const int g = experts.group(j);
          Tensor w;
          if (is_held(j)) {
            params.use_held(g);  // no gather, no cache lookup
            w = held[static_cast<size_t>(j)];
          } else {
            w = params.acquire(g, s);
          }
          ex.push_back({j, &params.layout(g), w, params.grad(g, s)});
        }
        run(ex);
      },
      [&](int j) {
        params.grad_ready(experts.group(j), s);
        params.release(experts.group(j), s);
      });
  held.clear();
}

}  // namespace

std::unique_ptr<GatherStrategy> make_experts_gather() { return std::make_unique<ExpertsGather>(); }

}  // namespace moezero::moe
