// moe/feed_forward.h — the replaceable FFN half of a decoder layer: out = h + ffn(rmsnorm(h)).
//
// A FeedForward owns the whole sub-layer (its norm, its FFN and the residual add) and its own
// parameter groups, so that a MoE FFN (router group + one group per expert, with its own
// acquire/release order) replaces the dense one without touching the rest of the model.
// The Transformer asks make_feed_forward() for one per layer; that factory is the only place
// that decides dense or MoE.
#pragma once

#include <memory>
#include <vector>

#include "core/config.h"
#include "core/param_group.h"
#include "moe/module.h"

namespace moezero::moe {

class FeedForward {
 public:
  // What an implementation saves in forward for its backward (it downcasts its own).
  struct Saved {
    virtual ~Saved() = default;
  };

  virtual ~FeedForward() = default;

  // Its parameter groups in execution order; the provider indices are
  // [first_group, first_group + size) as given to the factory.
  virtual std::vector<GroupSpec> param_groups() const = 0;

  // [in] h (B*T, C) compute dtype; [out] out (B*T, C) `=` h + ffn(rmsnorm(h)).
  virtual std::unique_ptr<Saved> forward(const ModuleContext& ctx, ParamProvider& params,
                                         const Tensor& h, const Tensor& out) = 0;
  // [in] saved: forward's (consumed); [in] h: forward's input;
  // [in,out] dresid (B*T, C): dL/dout on entry, dL/dh on return (`+=` the FFN path).
  // Gradients of its groups `+=`.
  virtual void backward(const ModuleContext& ctx, ParamProvider& params,
                        std::unique_ptr<Saved> saved, const Tensor& h, const Tensor& dresid) = 0;
};

// The FFN of decoder layer `layer` whose first group gets provider index `first_group`:
// a DenseSwiGLU when cfg.num_experts == 0. MoE layers come with the MoE issue: until then
// num_experts > 0 throws moezero::Error.
std::unique_ptr<FeedForward> make_feed_forward(const ModelConfig& cfg, int layer, int first_group);

}  // namespace moezero::moe
