// moe/gather_fsdp.cpp — zero.moe_gather=fsdp (moe/gather_strategy.h): FSDP2 with the MoE block
// not resharded after forward. Forward gathers the block (prefetched one module ahead) and keeps
// it until the block's backward of the same micro-batch. With shard_cache.capacity_bytes > 0 the
// block's experts are also kept across the step's micro-batches within that budget (FSDP2's
// set_reshard_after_backward(False)); with 0 the backward frees them.
#include "moe/gather_block.h"

namespace moezero::moe {

namespace {

class FsdpGather final : public BlockGather {
 public:
  FsdpGather() : BlockGather(AfterForward::Hold) {}
  std::string_view name() const override { return "fsdp"; }
  // FSDP2's reshard_after_backward=False, within shard_cache.capacity_bytes.
  bool uses_shard_cache() const override { return true; }
  // Forward only: nothing to hold the block for, so it is gathered and freed as leaf does.
  std::string_view evaluation_strategy() const override { return "leaf"; }
  // Nothing to fetch: the block is still held since forward.
  ExpertPrefetch prefetch_backward(const layers::ModuleContext&, ParamProvider&,
                                   const LocalExperts&) const override {
    return ExpertPrefetch::Own;
  }
};

}  // namespace

std::unique_ptr<GatherStrategy> make_fsdp_gather() { return std::make_unique<FsdpGather>(); }

}  // namespace moezero::moe
