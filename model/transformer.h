// model/transformer.h — the Mixtral-style decoder-only transformer, with explicit (llm.c style,
// no autograd) forward and backward.
//
// Definition (B sequences of T tokens, C = d_model, V = vocab_size, Hq = n_heads,
// Hkv = n_kv_heads, D = C / Hq, F = d_ff; every weight stored (out, in) as PyTorch's
// nn.Linear, so a linear layer is y = x W^T):
//   x_0 = embed_tokens[tokens]                                          (B*T, C)
//   for each layer l = 0 .. L-1:
//     h_l     = x_l + attn_l(rmsnorm(x_l) * input_layernorm_l)
//     x_{l+1} = h_l + ffn_l(rmsnorm(h_l) * post_attention_layernorm_l)
//   logits = (rmsnorm(x_L) * norm) lm_head^T                            (B*T, V), untied
//   loss   = loss_scale * sum_t [targets_t != -1] (logsumexp(logits_t) - logits_t[targets_t])
// with rmsnorm(x) = x / sqrt(mean_c(x_c^2) + norm_eps), and
//   attn(xn) = o_proj( softmax_causal( rope(q) rope(k)^T / sqrt(D) ) v ),
//     q = xn q_proj^T (Hq*D), k = xn k_proj^T, v = xn v_proj^T (Hkv*D each); query head h uses
//     key/value head h / (Hq / Hkv) (grouped-query attention); token t attends to 0..t of its
//     own sequence; RoPE in the Hugging Face rotate-half convention at positions 0..T-1 of each
//     sequence: for i < D/2, theta_i = t * rope_theta^(-2i/D),
//       rope(u)_i = u_i cos - u_{i+D/2} sin,  rope(u)_{i+D/2} = u_{i+D/2} cos + u_i sin;
//   ffn(xn) = down_proj( silu(xn gate_proj^T) * (xn up_proj^T) )   (dense SwiGLU; silu(z) =
//     z / (1 + e^-z)). A MoE FFN replaces it per layer when model.num_experts > 0 (MoE issue).
// Parameter names follow Hugging Face Mixtral (see param_groups()).
//
// Precision: activations, the residual stream and acquired parameters are in the provider's
// compute dtype (f32 or bf16); norms' 1/rms, attention log-sum-exps, per-token losses and all
// weight gradients are f32; every op accumulates in f32. (The residual stream in bf16 is the
// simple choice; an f32 residual would cost (B*T, C) f32 per layer boundary.)
//
// Parameter groups, in execution order (provider group index = position):
//   0 "embed", then per layer i: "layers.i.attn", "layers.i.ffn" (a MoE layer: its groups),
//   last "head". Forward acquires and releases each group around its use in this order;
//   backward walks them in exact reverse order (head, layers L-1..0 ffn then attn, embed) with
//   acquire, grad, grad_ready (as soon as the group's last gradient write is enqueued),
//   release. The embedding's backward needs no parameters: it calls grad and grad_ready only.
//
// Activation checkpointing (train.activation_checkpointing; set_activation_checkpointing):
//   none:      every module keeps what its backward needs (Saved structs, the residual stream).
//   selective: each attention block drops its core attention's output and log-sum-exp after
//              o_proj; its backward recomputes them from the kept q, k, v (the attention
//              kernel never keeps score or probability matrices: it is flash-style, so the
//              core attention's output is what recomputing "attention's inner products"
//              saves): (B*T, C) + f32 (B, Hq, T) per layer, one attention forward more.
//   full:      only each block's input x_l is kept (and a MoE FFN's agreed routing, see
//              FeedForward::drop_for_recompute). Backward of block l first runs the block's
//              forward again (attention, then FeedForward::recompute), then its backward. The
//              recompute acquires parameters as forward does, through a RecomputeParams
//              (model/recompute_params.h) that keeps them acquired for the block's backward:
//              under ZeRO-3 one gather serves both. Backward's group order becomes, per
//              layer: attn, ffn groups (recompute), ffn groups, attn (backward, held ones
//              without an acquire); every rank recomputes, so collectives stay matched.
// Every mode runs the same ops on the same inputs: losses and gradients are bit-identical.
//
// One Transformer per rank: it holds the activations of the micro-batch between forward and
// backward. Not thread-safe.
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/param_group.h"
#include "layers/attention_block.h"
#include "layers/embedding.h"
#include "layers/feed_forward.h"
#include "layers/head.h"
#include "moe/moe_runtime.h"

namespace moezero::model {

class RecomputeParams;

// True when decoder layer `layer` has a MoE FFN: model.num_experts > 0 and
// layer % moe_every == moe_every - 1 (moe_every 1: every layer; 2: layers 1, 3, 5, ...).
bool is_moe_layer(const ModelConfig& cfg, int layer);

// The FFN of decoder layer `layer` whose first group gets provider index `first_group`:
// a MoeFeedForward when is_moe_layer (then `rt` is required; `moe_index` counts the MoE layers
// before this one), else a DenseSwiGLU.
std::unique_ptr<layers::FeedForward> make_feed_forward(const ModelConfig& cfg, int layer,
                                                       int first_group,
                                                       const moe::MoeRuntime* rt = nullptr,
                                                       int moe_index = 0);

// Throws moezero::Error naming the model.* key when cfg cannot describe a model
// (heads not dividing d_model, odd head dim, ...). The Transformer constructor calls it.
void validate_model_config(const ModelConfig& cfg);

class Transformer {
 public:
  // [in] rt: the MoE runtime of this rank (EP place, communicators, router options); null
  // means one rank with default router options. Required only when the model has MoE layers.
  explicit Transformer(const ModelConfig& cfg, const moe::MoeRuntime* rt = nullptr);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return cfg_; }
  // The parameter groups in execution order; provider group index = position.
  std::vector<GroupSpec> param_groups() const;
  int group_count() const { return group_count_; }

  // Forward and loss of one micro-batch, enqueued on `s`; no host synchronisation.
  // [in] params: group_count() groups laid out as param_groups() (checked by name);
  // [in] tokens, targets: i32 (B, T) on s.device(), T <= seq_len; targets -1 = ignored
  //      (copied: they may be freed after this call, stream-safely);
  // [in] loss_scale: multiplies each token's loss (the trainer passes 1 / global count of
  //      non-ignored targets, so Sum-reduced gradients give the global mean);
  // [out] loss_out: f32 with one element, `+=` the scaled loss sum.
  // Keeps the activations backward needs; a second forward without backward drops the first's.
  // [in] mb: the micro-batch's place in the global batch (MoE router); default: this rank
  //      alone; [out] aux_out: f32 (1) `+=` the unscaled aux loss of every MoE layer, or
  //      undefined.
  void forward(ParamProvider& params, Stream& s, const Tensor& tokens, const Tensor& targets,
               float loss_scale, const Tensor& loss_out, const moe::MicroBatchInfo& mb = {},
               const Tensor& aux_out = Tensor());
  // Backward of the last forward, on the same stream: every group's gradient `+=` through
  // params.grad(g). Frees the activations.
  void backward(ParamProvider& params, Stream& s);

  // train.activation_checkpointing (see above); only between micro-batches (no activations
  // held). Default: none.
  void set_activation_checkpointing(ActivationCheckpointing mode);
  ActivationCheckpointing activation_checkpointing() const { return checkpointing_; }

  // True between a forward and its backward.
  bool has_activations() const { return state_ != nullptr; }
  // Drops the saved activations (evaluation: forward without backward).
  void discard_activations();
  // Auxiliary-loss-free balancing (moe.expert_bias_update_rate; MoeFeedForward): after an
  // applied optimizer step, every MoE layer moves its selection bias from the step's agreed
  // loads. expert_biases: per MoE layer its bias (E), empty lists when the rate is 0;
  // set_expert_biases restores them (one list per MoE layer; throws on a count mismatch).
  void update_expert_bias();
  std::vector<std::vector<float>> expert_biases() const;
  void set_expert_biases(const std::vector<std::vector<float>>& biases);

  // The logits (B*T, V), compute dtype, of the last forward (valid once its stream has run it,
  // until backward or discard_activations); an undefined tensor without saved activations.
  Tensor last_logits() const;

 private:
  struct State;
  void check_provider(const ParamProvider& params) const;
  std::shared_ptr<const std::vector<int32_t>> host_positions(int64_t batch, int64_t seq);

  ModelConfig cfg_;
  layers::Embedding embed_;
  std::vector<layers::AttentionBlock> attn_;
  std::vector<std::unique_ptr<layers::FeedForward>> ffn_;
  layers::Head head_;
  int group_count_ = 0;
  // A compute span "layers.<layer>.<module> <pass>" (layer -1: "<module> <pass>") while the
  // trace recorder is tracing; -1 otherwise. end_module(-1) does nothing.
  int begin_module(Stream& s, const char* module, int layer, const char* pass) const;
  void end_module(int span) const;
  // Full checkpointing, backward of layer l: its forward again (h_l and every Saved).
  void recompute_layer(size_t l, RecomputeParams& params, State& st);

  ActivationCheckpointing checkpointing_ = ActivationCheckpointing::None;
  int64_t lookahead_ = 1;           // prefetch.lookahead_layers (how many FFNs are prepared ahead)
  TraceRecorder* trace_ = nullptr;  // MoeRuntime::report.trace: module spans while tracing
  // Host positions per (B, T), uploaded each forward; never modified once made. Shared with
  // the stream (a task after each copy holds a reference), so an in-flight copy reads valid
  // memory even when the Transformer is destroyed before its stream has run the copy.
  std::map<std::pair<int64_t, int64_t>, std::shared_ptr<const std::vector<int32_t>>>
      positions_host_;
  std::unique_ptr<State> state_;
};

}  // namespace moezero::model
