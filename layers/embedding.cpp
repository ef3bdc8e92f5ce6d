// layers/embedding.cpp — the token embedding module (see embedding.h).
#include "layers/embedding.h"

namespace moezero::layers {

Embedding::Embedding(const ModelConfig& cfg, int group)
    : vocab_size_(cfg.vocab_size),
      d_model_(cfg.d_model),
      init_std_(static_cast<float>(cfg.init_std)),
      group_(group) {}

GroupSpec Embedding::param_group() const {
  GroupSpec g;
  g.name = "embed";
  g.kind = GroupKind::Dense;
  g.layer = -1;
  // (V, C), initialised and decayed like a linear layer's weight.
  g.params.push_back(linear_weight("model.embed_tokens.weight", vocab_size_, d_model_, init_std_));
  return g;
}

void Embedding::forward(const ModuleContext& ctx, ParamProvider& params, const Tensor& tokens,
                        const Tensor& x) const {
  const Tensor flat = params.acquire(group_, ctx.s());
  const Tensor table = params.layout(group_).view(flat, 0);  // (V, C)
  ctx.ops().embedding_forward(ctx.s(), tokens, table, x);
  params.release(group_, ctx.s());
}

void Embedding::backward(const ModuleContext& ctx, ParamProvider& params, const Tensor& tokens,
                         const Tensor& dx) const {
  const Tensor dtable = params.layout(group_).view(params.grad(group_, ctx.s()), 0);  // f32 (V, C)
  ctx.ops().embedding_backward(ctx.s(), tokens, dx, dtable);
  params.grad_ready(group_, ctx.s());
}

}  // namespace moezero::layers
