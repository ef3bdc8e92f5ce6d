// moe/gather_block.cpp — the coalesced block gather of leaf and fsdp (moe/gather_block.h).
#include "moe/gather_block.h"

#include <utility>

#include "core/error.h"
#include "moe/local_experts.h"

namespace moezero::moe {

ExpertPrefetch BlockGather::prefetch_forward(const layers::ModuleContext& ctx,
                                             ParamProvider& params, const LocalExperts& experts,
                                             layers::FeedForward::Prepare when) const {
  if (when == layers::FeedForward::Prepare::JustInTime)
    params.prefetch_block(experts.block_groups(), ctx.s(), ParamProvider::FetchReason::Predicted);
  return ExpertPrefetch::Own;
}

void BlockGather::forward(const layers::ModuleContext& ctx, ParamProvider& params,
                          const LocalExperts& experts, const std::vector<char>& active,
                          std::vector<Tensor>& held, const ExpertWave& run) const {
  std::vector<Tensor> w = experts.acquire_block(ctx, params);
  std::vector<ExpertWeights> ex;
  for (int j = 0; j < experts.count(); ++j)
    if (active[static_cast<size_t>(j)])
      ex.push_back({j, &params.layout(experts.group(j)), w[static_cast<size_t>(j)], Tensor()});
  run(ex);
  if (after_ == AfterForward::Hold)
    held = std::move(w);  // not resharded after forward
  else
    experts.release_block(ctx, params);
}

void BlockGather::backward(const layers::ModuleContext& ctx, ParamProvider& params,
                           const LocalExperts& experts, const std::vector<char>& active,
                           std::vector<Tensor>& held, const ExpertWave& run) const {
  Stream& s = ctx.s();
  std::vector<Tensor> w =
      after_ == AfterForward::Hold ? std::move(held) : experts.acquire_block(ctx, params);
  held.clear();
  MOEZERO_CHECK(w.size() == static_cast<size_t>(experts.count()), "layer ", experts.layer(),
                ": backward without the experts held since forward");
  std::vector<ExpertWeights> ex;
  for (int j = 0; j < experts.count(); ++j)
    if (active[static_cast<size_t>(j)])
      ex.push_back({j, &params.layout(experts.group(j)), w[static_cast<size_t>(j)],
                    params.grad(experts.group(j), s)});
  run(ex);
  for (int j = 0; j < experts.count(); ++j)  // id order, as the per-expert path
    if (active[static_cast<size_t>(j)]) params.grad_ready(experts.group(j), s);
  experts.release_block(ctx, params);
}

}  // namespace moezero::moe
