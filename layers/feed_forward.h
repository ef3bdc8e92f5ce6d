// layers/feed_forward.h — the replaceable FFN half of a decoder layer: out = h + ffn(rmsnorm(h)).
//
// A FeedForward owns the whole sub-layer (its norm, its FFN and the residual add) and its own
// parameter groups, so that a MoE FFN (router group + one group per expert, with its own
// acquire/release order) replaces the dense one without touching the rest of the model.
// The Transformer asks make_feed_forward() (model/transformer.h) for one per layer; that factory
// is the only place that decides dense or MoE.
#pragma once

#include <memory>
#include <vector>

#include "core/config.h"
#include "core/param_group.h"
#include "layers/module.h"

namespace moezero::layers {

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

  // How far ahead prepare() is called: JustInTime before this layer's own attention block
  // (the previous layer's routing of this micro-batch is known), Ahead from an earlier layer
  // (prefetch.lookahead_layers > 1: only marginal statistics can be used).
  enum class Prepare : uint8_t { JustInTime, Ahead };
  // Called at most once per micro-batch, before the layer's attention block runs (or earlier,
  // Ahead), so that work started here overlaps it: a MoE layer starts the gathers of the
  // experts it predicts. Default: nothing.
  virtual void prepare(const ModuleContext& ctx, ParamProvider& params, Prepare when) {}

  // Called in backward before the attention block of the layer above runs, so that work
  // started here overlaps it: a MoE layer starts the gathers of exactly the experts its
  // backward needs (its forward's routing is known). [in] saved: this layer's forward state.
  virtual void prepare_backward(const ModuleContext& ctx, ParamProvider& params,
                                const Saved& saved) {}

  // [in] h (B*T, C) compute dtype; [out] out (B*T, C) `=` h + ffn(rmsnorm(h)).
  virtual std::unique_ptr<Saved> forward(const ModuleContext& ctx, ParamProvider& params,
                                         const Tensor& h, const Tensor& out) = 0;
  // Full activation checkpointing (model/transformer.h), two steps:
  // drop_for_recompute, right after forward: frees every activation recompute() rebuilds and
  // keeps only what must not be computed twice (a MoE layer's agreed routing: recomputing the
  // router would repeat its agreement and update learned state again).
  virtual void drop_for_recompute(Saved& saved) const = 0;
  // recompute, in backward before backward(): rebuilds `saved` from h with the forward's own
  // ops (the same bits), acquiring parameters like forward; updates no learned state or
  // statistics. [out] out (B*T, C): scratch (written or not; its value is not used).
  virtual void recompute(const ModuleContext& ctx, ParamProvider& params, Saved& saved,
                         const Tensor& h, const Tensor& out) = 0;

  // [in] saved: forward's (consumed); [in] h: forward's input;
  // [in,out] dresid (B*T, C): dL/dout on entry, dL/dh on return (`+=` the FFN path).
  // Gradients of its groups `+=`.
  virtual void backward(const ModuleContext& ctx, ParamProvider& params,
                        std::unique_ptr<Saved> saved, const Tensor& h, const Tensor& dresid) = 0;
};

}  // namespace moezero::layers
