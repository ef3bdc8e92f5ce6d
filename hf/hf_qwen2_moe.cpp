// hf/hf_qwen2_moe.cpp — the Qwen2-MoE form of a model (hf_qwen2_moe.h).
#include "hf/hf_qwen2_moe.h"

#include "core/error.h"

namespace moezero::hf {

using nlohmann::json;

int64_t shared_experts_width(const ModelConfig& m) {
  return m.num_shared_experts *
         (m.shared_expert_d_ff > 0 ? m.shared_expert_d_ff : m.expert_width());
}

void check_qwen2_moe_export(const Config& cfg) {
  if (cfg.model.num_shared_experts > 0 && !cfg.model.shared_expert_gate)
    MOEZERO_THROW(
        "model.shared_expert_gate = false: Qwen2MoeForCausalLM always scales its shared expert "
        "per token by sigmoid(x . w); an ungated shared expert has no place in it (set "
        "model.shared_expert_gate = true to train the exportable form)");
  if (cfg.model.num_experts == 0) return;  // dense: no router
  if (cfg.moe.score_function != ScoreFunction::Softmax)
    MOEZERO_THROW(
        "moe.score_function = sigmoid: Qwen2MoeForCausalLM routes with softmax probabilities; "
        "the exported model would compute another function");
  if (cfg.moe.expert_bias_update_rate > 0.0)
    MOEZERO_THROW(
        "moe.expert_bias_update_rate > 0: the experts' selection bias has no place in "
        "Qwen2MoeForCausalLM; the exported model would route differently");
}

void add_qwen2_moe_config_keys(const Config& cfg, nlohmann::ordered_json& j) {
  const ModelConfig& m = cfg.model;
  j["num_experts"] = m.num_experts;
  j["num_experts_per_tok"] = m.num_experts > 0 ? m.top_k : 1;
  j["moe_intermediate_size"] = m.num_experts > 0 ? m.expert_width() : m.d_ff;
  j["shared_expert_intermediate_size"] = shared_experts_width(m);
  j["decoder_sparse_step"] = m.moe_every;
  j["norm_topk_prob"] = cfg.moe.normalize_top_k;
  j["output_router_logits"] = false;
  j["router_aux_loss_coef"] = cfg.moe.aux_loss_coef;
  // transformers 4.40.2 applies config.sliding_window to the eager and SDPA masks whatever
  // use_sliding_window says: null keeps full causal attention.
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  j["max_window_layers"] = m.n_layers;
}

void read_qwen2_moe_keys(const ConfigReader& r, ModelConfig& m, MoeConfig& moe) {
  m.qkv_bias = true;  // Qwen2MoeAttention always has them
  r.absent_or("mlp_only_layers", json::array(),
              "dense layers listed by index are not supported (our dense layers follow "
              "decoder_sparse_step only)");
  const json* sw = r.find("sliding_window");
  if (sw && !sw->is_null() && (!sw->is_number_integer() || sw->get<int64_t>() < m.seq_len))
    r.fail("sliding_window", sw->dump() +
                                 ": sliding-window attention shorter than "
                                 "max_position_embeddings is not supported (use null)");
  m.num_experts = r.integer_or("num_experts", 0, 60);
  m.moe_every = r.integer_or("decoder_sparse_step", 1, 1);
  m.num_shared_experts = 0;
  if (m.num_experts == 0) return;  // every layer a dense MLP of intermediate_size
  m.top_k = r.integer_or("num_experts_per_tok", 1, 4);
  if (m.top_k > m.num_experts)
    r.fail("num_experts_per_tok",
           std::to_string(m.top_k) + " exceeds num_experts = " + std::to_string(m.num_experts));
  m.expert_d_ff = r.integer_or("moe_intermediate_size", 1, 1408);
  m.num_shared_experts = 1;
  m.shared_expert_d_ff = r.integer_or("shared_expert_intermediate_size", 1, 5632);
  m.shared_expert_gate = true;
  moe.normalize_top_k = r.boolean("norm_topk_prob", false);
  moe.aux_loss_coef = r.number("router_aux_loss_coef", 0.001);
  moe.router_jitter = 0.0;
}

namespace {
// Replaces the first `from` in `s` by `to`; returns whether it was there.
bool replace_once(std::string& s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  if (at == std::string::npos) return false;
  s.replace(at, from.size(), to);
  return true;
}
}  // namespace

std::string qwen2_moe_tensor_name(const std::string& ours) {
  std::string n = ours;
  if (!replace_once(n, ".block_sparse_moe.", ".mlp.")) return n;
  if (n.find(".mlp.experts.") == std::string::npos) return n;
  if (!replace_once(n, ".w1.weight", ".gate_proj.weight") &&
      !replace_once(n, ".w2.weight", ".down_proj.weight"))
    replace_once(n, ".w3.weight", ".up_proj.weight");
  return n;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> qwen2_moe_qkv_bias_tensors(
    const ModelConfig& m) {
  const int64_t D = m.d_model / m.n_heads;
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    out.push_back({p + "q_proj.bias", {m.n_heads * D}});
    out.push_back({p + "k_proj.bias", {m.n_kv_heads * D}});
    out.push_back({p + "v_proj.bias", {m.n_kv_heads * D}});
  }
  return out;
}

}  // namespace moezero::hf
