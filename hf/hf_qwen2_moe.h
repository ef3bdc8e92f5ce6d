// hf/hf_qwen2_moe.h — (internal to hf/) the Qwen2-MoE form of a model (transformers'
// Qwen2MoeForCausalLM, model_type "qwen2_moe", as in the pinned transformers 4.40.2): what
// hf_export.cpp calls for that architecture.
//
// Qwen2MoeForCausalLM is our model with:
//   - q/k/v projection biases in every layer (always present: a model without model.qkv_bias is
//     written with zero biases, which adds nothing);
//   - layer l sparse when (l + 1) % decoder_sparse_step == 0 (our model.moe_every: the same
//     rule), the other layers dense SwiGLU MLPs of width intermediate_size (our model.d_ff);
//   - routed experts of width moe_intermediate_size (our model.expert_d_ff), softmax router,
//     top-k weights renormalised when norm_topk_prob (our moe.normalize_top_k);
//   - ONE shared expert of width shared_expert_intermediate_size, always gated per token by
//     sigmoid(x · shared_expert_gate): our S shared experts of width Fs are stored as one SwiGLU
//     of width S·Fs already (moe/shared_experts.h), which is exactly that expert.
// Tensor names differ from ours (Mixtral's) in the MoE block only (ours -> Qwen2-MoE):
//   model.layers.l.block_sparse_moe.gate.weight -> model.layers.l.mlp.gate.weight
//   ...block_sparse_moe.experts.e.w1.weight -> ...mlp.experts.e.gate_proj.weight
//   ...block_sparse_moe.experts.e.w2.weight -> ...mlp.experts.e.down_proj.weight
//   ...block_sparse_moe.experts.e.w3.weight -> ...mlp.experts.e.up_proj.weight
//   ...block_sparse_moe.shared_expert.* -> ...mlp.shared_expert.*
//   ...block_sparse_moe.shared_expert_gate.weight -> ...mlp.shared_expert_gate.weight
// A dense model with model.qkv_bias is written as Qwen2-MoE with num_experts = 0 (every layer
// a dense MLP: transformers' own rule), since Llama has no q/k/v-only biases.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "hf/hf_config_reader.h"

namespace moezero::hf {

// Throws naming the setting (model.shared_expert_gate, moe.score_function,
// moe.expert_bias_update_rate) when `cfg` has no Qwen2MoeForCausalLM form.
void check_qwen2_moe_export(const Config& cfg);

// Adds Qwen2MoeConfig's own keys (experts, shared expert, sparse step, norm_topk_prob, sliding
// window off) for `cfg` to `j`, which holds the keys every architecture shares.
void add_qwen2_moe_config_keys(const Config& cfg, nlohmann::ordered_json& j);

// Reads Qwen2MoeConfig's own keys (absent keys take the class defaults of transformers 4.40.2)
// into `m` and `moe`; refuses what our model cannot compute (mlp_only_layers, a sliding window
// shorter than the context, a shared expert of width 0), naming the file and key.
void read_qwen2_moe_keys(const ConfigReader& r, ModelConfig& m, MoeConfig& moe);

// Our parameter name -> its Qwen2-MoE tensor name (the table above; other names unchanged).
std::string qwen2_moe_tensor_name(const std::string& ours);

// The q/k/v bias tensors (Qwen2-MoE names and shapes) of every layer of `m`: what an export of
// a model without model.qkv_bias writes as zeros.
std::vector<std::pair<std::string, std::vector<int64_t>>> qwen2_moe_qkv_bias_tensors(
    const ModelConfig& m);

// The total width of the shared experts, S · Fs (0 without them).
int64_t shared_experts_width(const ModelConfig& m);

}  // namespace moezero::hf
