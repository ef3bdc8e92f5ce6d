// moe/gather_strategy.h — how stage 3 gathers a MoE layer's local experts (zero.moe_gather):
// one object per way, chosen once from the config string, so that no other code asks which one
// runs. The strategies (one file each):
//   experts (moe/gather_experts.cpp): moezero: per-expert groups, only the agreed active ones,
//            the routing-aware prefetch and the shard cache.
//   leaf    (moe/gather_leaf.cpp): DeepSpeed with the MoE block a leaf module: every local
//            expert as one coalesced all-gather whenever the block runs (forward and backward of
//            every micro-batch), prefetched one module ahead, freed after use, nothing cached.
//   fsdp    (moe/gather_fsdp.cpp): FSDP2 with the block not resharded after forward: the same
//            gather in forward, kept until the block's backward of that micro-batch; then kept
//            across the step's micro-batches within shard_cache.capacity_bytes (FSDP2's
//            set_reshard_after_backward(False)), or freed when that budget is 0.
// Routing, compute and reductions are the same for all of them: a strategy decides only which
// parameter groups are gathered, when, and when they are released.
//
// Adding a strategy: a new file with its class and a `make_*` factory, and one line in the
// registry (moe/gather_strategy.cpp); the config key's choices (core/config_keys_runtime.cpp) name
// it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "core/param_group.h"
#include "layers/feed_forward.h"
#include "layers/module.h"

namespace moezero::moe {

class LocalExperts;

// Local expert j's parameters for one compute pass: its layout, full parameters w and, in
// backward, its full gradient gw (`+=`).
struct ExpertWeights {
  int j = 0;
  const GroupLayout* layout = nullptr;
  Tensor w, gw;  // gw: backward only
};
// The compute of one wave of local experts whose parameters are ready together (LocalExperts:
// grouped GEMMs over their row blocks). A strategy calls it once per wave, in its run order.
using ExpertWave = std::function<void(const std::vector<ExpertWeights>&)>;

// Who starts the gathers of a layer's experts ahead of their use.
enum class ExpertPrefetch : uint8_t {
  Routed,  // the routing-aware plan before routing, the exact order in backward (MoeFeedForward)
  Own,     // the strategy itself (the whole block, or nothing when it is held since forward)
};

class GatherStrategy {
 public:
  virtual ~GatherStrategy() = default;
  // Its config string (zero.moe_gather).
  virtual std::string_view name() const = 0;
  // Whether the shard cache (shard_cache.capacity_bytes) can keep this strategy's gathers across
  // passes and micro-batches: per-expert groups only. Otherwise the engine has no cache and the
  // memory estimate counts none.
  virtual bool uses_shard_cache() const = 0;
  // Whether forward's experts stay gathered until the backward of the micro-batch, without a
  // byte limit (fsdp's block; experts with [in] reshard_after_forward false, FSDP2's
  // reshard_after_forward=False): the memory estimate counts them beyond the live limit.
  virtual bool holds_after_forward(bool reshard_after_forward) const = 0;
  // The strategy of the forward-only evaluation model (no backward to hold parameters for).
  virtual std::string_view evaluation_strategy() const { return name(); }

  // Before the layer's forward (MoeFeedForward::prepare, at `when`): starts what the strategy
  // prefetches itself; Routed: the routing-aware plan applies.
  virtual ExpertPrefetch prefetch_forward(const layers::ModuleContext& ctx, ParamProvider& params,
                                          const LocalExperts& experts,
                                          layers::FeedForward::Prepare when) const = 0;
  // Before the layer's backward (MoeFeedForward::prepare_backward), likewise; Routed: the exact
  // backward prefetch of the forward's active experts applies.
  virtual ExpertPrefetch prefetch_backward(const layers::ModuleContext& ctx, ParamProvider& params,
                                           const LocalExperts& experts) const = 0;

  // Forward of the local experts: acquires the parameters of at least the active ones
  // ([in] active (Epr): agreed), calls run() once per wave of active experts, releases them or
  // keeps them in held (Epr or empty; see LocalExperts::forward). Every rank of an EDP group
  // issues the same gathers in the same order.
  virtual void forward(const layers::ModuleContext& ctx, ParamProvider& params,
                       const LocalExperts& experts, const std::vector<char>& active,
                       std::vector<Tensor>& held, const ExpertWave& run) const = 0;
  // Backward: the same for the active experts' parameters and gradients (ExpertWeights::gw);
  // marks each active expert's gradient ready (grad_ready) before releasing it; held: forward's
  // (consumed, left empty).
  virtual void backward(const layers::ModuleContext& ctx, ParamProvider& params,
                        const LocalExperts& experts, const std::vector<char>& active,
                        std::vector<Tensor>& held, const ExpertWave& run) const = 0;
};

// The registry (moe/gather_strategy.cpp): the strategy named by a zero.moe_gather string, or an
// error naming the string and the known names. Strategies hold no state; one object each, for
// the life of the program.
const GatherStrategy& gather_strategy(std::string_view name);
// The strategy of a parsed config value.
const GatherStrategy& gather_strategy(MoeGather gather);
// The registered names, in registration order.
std::vector<std::string> gather_strategy_names();

// The factories, one per strategy file.
std::unique_ptr<GatherStrategy> make_experts_gather();
std::unique_ptr<GatherStrategy> make_leaf_gather();
std::unique_ptr<GatherStrategy> make_fsdp_gather();

}  // namespace moezero::moe
