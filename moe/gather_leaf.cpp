// moe/gather_leaf.cpp — zero.moe_gather=leaf (moe/gather_strategy.h): DeepSpeed with the MoE
// block a leaf module. The block is gathered whenever it runs (forward and backward of every
// micro-batch), prefetched one module ahead each time, and freed after use.
#include "moe/gather_block.h"
#include "moe/local_experts.h"

namespace moezero::moe {

namespace {

class LeafGather final : public BlockGather {
 public:
  LeafGather() : BlockGather(AfterForward::Release) {}
  std::string_view name() const override { return "leaf"; }
  // The block again, one module ahead of its backward.
  ExpertPrefetch prefetch_backward(const layers::ModuleContext& ctx, ParamProvider& params,
                                   const LocalExperts& experts) const override {
    params.prefetch_block(experts.block_groups(), ctx.s(), ParamProvider::FetchReason::Predicted);
    return ExpertPrefetch::Own;
  }
};

}  // namespace

std::unique_ptr<GatherStrategy> make_leaf_gather() { return std::make_unique<LeafGather>(); }

}  // namespace moezero::moe
