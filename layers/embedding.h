// layers/embedding.h — the token embedding: x[t] = table[tokens[t]], table (V, C).
//
// Parameter group "embed" = {model.embed_tokens.weight (V, C), Normal(init_std)}.
// The backward needs no parameters (dtable[tokens[t]] += dx[t]), so it does not acquire the
// group: it only calls grad(g) and grad_ready(g). A provider must therefore accept grad()
// of a group that is not acquired (ZeRO-3 then never re-gathers the embedding in backward).
#pragma once

#include "core/config.h"
#include "core/param_group.h"
#include "layers/module.h"

namespace moezero::layers {

class Embedding {
 public:
  // [in] group: the provider index of this module's group.
  Embedding(const ModelConfig& cfg, int group);

  GroupSpec param_group() const;
  int group() const { return group_; }

  // [in] tokens i32 (B*T) in [0, V); [out] x (B*T, C) compute dtype `=`.
  void forward(const ModuleContext& ctx, ParamProvider& params, const Tensor& tokens,
               const Tensor& x) const;
  // [in] tokens: the forward's; [in] dx (B*T, C): dL/dx. grad(group) `+=`.
  void backward(const ModuleContext& ctx, ParamProvider& params, const Tensor& tokens,
                const Tensor& dx) const;

 private:
  int64_t vocab_size_;
  int64_t d_model_;
  float init_std_;
  int group_;
};

}  // namespace moezero::layers
