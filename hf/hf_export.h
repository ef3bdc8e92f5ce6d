// hf/hf_export.h — Hugging Face export and import: a model's full parameters as a directory
// that `transformers` loads (config.json + model.safetensors), and back.
//
// The model of model/transformer.h is Mixtral's math exactly (checked term by term in
// docs/hf.md): RMSNorm x * rsqrt(mean(x^2) + eps) * w, RoPE in the rotate-half convention with
// inv_freq = theta^(-2i/D), grouped-query attention scaled by 1/sqrt(D), SwiGLU experts
// w2(silu(w1 x) * w3 x), a softmax router whose top-k weights are renormalised, an untied
// head. Our parameters already carry Mixtral's names and PyTorch's (out, in) orientation, so
// the export is a copy of every parameter into one tensor of the same name and shape: no
// permutation is needed. Training-only settings (router jitter, aux and z losses, capacity
// drops) do not change the inference function and are not part of it.
//
// What maps to what:
//   num_experts > 0, moe_every == 1, normalize_top_k  -> MixtralForCausalLM ("mixtral")
//   num_experts == 0 (dense)                           -> LlamaForCausalLM ("llama"; our dense
//                                                         FFN uses Llama's mlp.{gate,up,down}_proj)
//   num_shared_experts > 0 (gated), or a dense
//   model with qkv_bias                                -> Qwen2MoeForCausalLM ("qwen2_moe"; the
//                                                         rules and names: hf/hf_qwen2_moe.h)
//   without shared experts: num_experts > 0 with moe_every > 1 (dense layers between MoE
//   layers), moe.normalize_top_k = false (raw top-k probabilities) or qkv_bias; and anywhere:
//   an ungated shared expert, sigmoid scores, the selection bias: refused, naming the setting —
//   no Hugging Face class we write computes those functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/param_group.h"
#include "hf/safetensors.h"

namespace moezero::hf {

// One parameter group's full fp32 parameters, laid out as GroupLayout(spec) of the group of
// the same name in full_param_groups(model) (alignment gaps included, no padding).
struct GroupValues {
  std::string name;  // "embed", "layers.0.attn", "layers.0.experts.3", "head", ...
  std::vector<float> data;
};

// Refuses parameters that hold a NaN or an infinity (a run that diverged, a damaged file):
// inference from them gives no text and no loss, only nonsense. `who` starts the message
// ("generate", "score"), `source` names where the parameters came from.
void require_finite_params(const std::vector<GroupValues>& groups, const std::string& who,
                           const std::string& source);

enum class HfArchitecture : uint8_t { Mixtral, Llama, Qwen2Moe };
// "MixtralForCausalLM", "LlamaForCausalLM", "Qwen2MoeForCausalLM"
const char* hf_architecture_name(HfArchitecture a);

// The name of our parameter `ours` in a file of architecture `a` (ours are Mixtral's names;
// Qwen2-MoE names its MoE block differently).
std::string hf_tensor_name(HfArchitecture a, const std::string& ours);

// The Hugging Face class that computes the model `cfg` describes; throws naming the setting
// (model.moe_every, moe.normalize_top_k, model.shared_expert_gate, moe.score_function, ...)
// when none does.
HfArchitecture hf_architecture(const Config& cfg);

// Every parameter group of the model on one rank with all experts (expert parallelism 1), in
// execution order: what an exported directory holds.
std::vector<GroupSpec> full_param_groups(const ModelConfig& model);

struct HfExportOptions {
  SafetensorsDType dtype =
      SafetensorsDType::F32;  // fp32 masters are the truth; bf16 halves the file
};

// The config.json text for `cfg` (MixtralConfig, LlamaConfig or Qwen2MoeConfig fields).
std::string hf_config_json(const Config& cfg, SafetensorsDType dtype);

// Writes out_dir/config.json and out_dir/model.safetensors (creating out_dir); Qwen2-MoE files
// get zero q/k/v biases when the model has none. `groups` must
// hold every group of full_param_groups(cfg.model) by name, each with exactly its layout's
// numel values (extra or missing groups are errors naming them). Throws moezero::Error.
void export_hf(const Config& cfg, const std::vector<GroupValues>& groups,
               const std::string& out_dir, const HfExportOptions& options = {});

// An exported directory, read back.
struct HfModel {
  std::string dir;
  HfArchitecture arch = HfArchitecture::Mixtral;
  ModelConfig model;  // seq_len = max_position_embeddings; init_std = initializer_range
  MoeConfig moe;      // aux_loss_coef = router_aux_loss_coef, router_jitter = router_jitter_noise
  SafetensorsFile weights;
};

// Reads dir/config.json and dir/model.safetensors. Refuses (naming the file and key) what our
// model cannot compute: another architecture, hidden_act other than silu, tied embeddings,
// rope_scaling, a sliding window shorter than max_position_embeddings, attention or MLP
// biases (Llama), a head_dim other than hidden_size / num_attention_heads, Qwen2-MoE's
// mlp_only_layers. A Qwen2-MoE reads back with model.qkv_bias = true and one gated shared
// expert of width shared_expert_intermediate_size.
HfModel read_hf_dir(const std::string& dir);

// Every group of full_param_groups(*target) (null: hf.model), assembled from the weights by
// parameter name (shapes checked; a tensor the model does not use is an error naming it, except
// Qwen2-MoE's q/k/v biases for a target without model.qkv_bias when they are all zero).
std::vector<GroupValues> hf_group_values(const HfModel& hf, const ModelConfig* target = nullptr);

// Throws naming the first field (ours and config.json's key) where the model shapes differ:
// vocab_size, d_model, d_ff, expert width, n_layers, n_heads, n_kv_heads, shared experts (count
// or Qwen2-MoE's summed width and its gate), num_experts, top_k, moe_every, qkv_bias (ours on,
// the file's class without), rope_theta, norm_eps. `what` prefixes the message (e.g.
// "train.init_from").
void check_same_shape(const ModelConfig& ours, const HfModel& hf, const std::string& what);

// Throws naming moe.normalize_top_k or moe.score_function when our router would weight the
// experts of `hf` (an MoE model) differently from the function its weights were trained for.
void check_same_routing(const MoeConfig& ours, const HfModel& hf, const std::string& what);

}  // namespace moezero::hf
