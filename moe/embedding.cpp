// moe/embedding.cpp — the token embedding module (see embedding.h).
#include "moe/embedding.h"

namespace moezero::moe {

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
  g.params.push_back(ParamSpec{.name = "model.embed_tokens.weight",
                               .shape = Shape{vocab_size_, d_model_},
                               .init = ParamInit::Normal,
                               .init_std = init_std_,
                               .weight_decay = true});
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

}  // namespace moezero::moe
