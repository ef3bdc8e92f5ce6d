// moe/gather_block.h — what the incumbents' gather strategies share (moe/gather_leaf.cpp,
// moe/gather_fsdp.cpp): every local expert, active or not, gathered as one coalesced collective
// (ParamProvider::prefetch_block) and acquired in id order; only the active ones are computed,
// in one wave. They differ in what forward does with the block afterwards.
#pragma once

#include "moe/gather_strategy.h"

namespace moezero::moe {

class BlockGather : public GatherStrategy {
 public:
  // After forward: Release the block (gathered again in backward), or Hold it in `held` until
  // the backward of the same micro-batch.
  enum class AfterForward : uint8_t { Release, Hold };
  explicit BlockGather(AfterForward after) : after_(after) {}

  bool uses_shard_cache() const override { return false; }  // nothing kept beyond its use
  bool holds_after_forward(bool) const override { return after_ == AfterForward::Hold; }
  // The block, one module ahead (the previous layer's prepare), just in time only.
  ExpertPrefetch prefetch_forward(const layers::ModuleContext& ctx, ParamProvider& params,
                                  const LocalExperts& experts,
                                  layers::FeedForward::Prepare when) const override;
  void forward(const layers::ModuleContext& ctx, ParamProvider& params, const LocalExperts& experts,
               const std::vector<char>& active, std::vector<Tensor>& held,
               const ExpertWave& run) const override;
  // Hold: forward's parameters; Release: the block gathered again (prefetch_backward's).
  void backward(const layers::ModuleContext& ctx, ParamProvider& params,
                const LocalExperts& experts, const std::vector<char>& active,
                std::vector<Tensor>& held, const ExpertWave& run) const override;

 private:
  AfterForward after_;
};

}  // namespace moezero::moe
