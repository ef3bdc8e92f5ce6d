// hf/hf_export.cpp — config.json and model.safetensors of an exported model, and reading
// them back (see hf_export.h).
#include "hf/hf_export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/output_file.h"
#include "hf/hf_config_reader.h"
#include "hf/hf_qwen2_moe.h"
#include "model/transformer.h"
#include "moe/moe_runtime.h"

namespace moezero::hf {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

void require_finite_params(const std::vector<GroupValues>& groups, const std::string& who,
                           const std::string& source) {
  for (const GroupValues& g : groups) {
    int64_t bad = 0, first = -1;
    for (size_t i = 0; i < g.data.size(); ++i)
      if (!std::isfinite(g.data[i]) && bad++ == 0) first = static_cast<int64_t>(i);
    if (bad > 0)
      MOEZERO_USER_ERROR(who, ": the parameters of ", source, " are not finite: group '", g.name,
                         "' holds ", bad, " NaN or infinite value(s) (the first at element ", first,
                         "); the weights are broken (a run that diverged?)");
  }
}

const char* hf_architecture_name(HfArchitecture a) {
  switch (a) {
    case HfArchitecture::Mixtral: return "MixtralForCausalLM";
    case HfArchitecture::Llama: return "LlamaForCausalLM";
    case HfArchitecture::Qwen2Moe: return "Qwen2MoeForCausalLM";
  }
  return "?";
}

namespace {
const char* hf_model_type(HfArchitecture a) {
  switch (a) {
    case HfArchitecture::Mixtral: return "mixtral";
    case HfArchitecture::Llama: return "llama";
    case HfArchitecture::Qwen2Moe: return "qwen2_moe";
  }
  return "?";
}
}  // namespace

std::string hf_tensor_name(HfArchitecture a, const std::string& ours) {
  return a == HfArchitecture::Qwen2Moe ? qwen2_moe_tensor_name(ours) : ours;
}

HfArchitecture hf_architecture(const Config& cfg) {
  const ModelConfig& m = cfg.model;
  // Shared experts or q/k/v biases: Qwen2-MoE (the only one of the three that has them).
  if (m.num_shared_experts > 0 || (m.num_experts == 0 && m.qkv_bias)) {
    check_qwen2_moe_export(cfg);
    return HfArchitecture::Qwen2Moe;
  }
  if (m.num_experts == 0) return HfArchitecture::Llama;
  if (m.moe_every != 1)
    MOEZERO_THROW("model.moe_every = ", m.moe_every,
                  ": this model has dense FFN layers between its MoE layers, which "
                  "MixtralForCausalLM cannot express (every Mixtral layer is a sparse MoE block). "
                  "Export models with moe_every = 1 (Mixtral), num_experts = 0 (Llama) or gated "
                  "shared experts (Qwen2MoeForCausalLM)");
  if (!cfg.moe.normalize_top_k)
    MOEZERO_THROW(
        "moe.normalize_top_k = false: the model weights experts by their raw top-k "
        "probabilities, but MixtralForCausalLM always renormalises the top-k weights "
        "to sum to 1; the exported model would compute another function (Qwen2MoeForCausalLM "
        "has norm_topk_prob = false, but needs gated shared experts)");
  if (m.qkv_bias)
    MOEZERO_THROW(
        "model.qkv_bias = true: MixtralForCausalLM has no q/k/v biases (Qwen2MoeForCausalLM has "
        "them, but always with a gated shared expert: model.num_shared_experts > 0 and "
        "model.shared_expert_gate = true)");
  if (cfg.moe.score_function != ScoreFunction::Softmax)
    MOEZERO_THROW(
        "moe.score_function = sigmoid: MixtralForCausalLM routes with softmax probabilities; "
        "the exported model would compute another function");
  if (cfg.moe.expert_bias_update_rate > 0.0)
    MOEZERO_THROW(
        "moe.expert_bias_update_rate > 0: the experts' selection bias has no place in "
        "MixtralForCausalLM; the exported model would route differently");
  return HfArchitecture::Mixtral;
}

std::vector<GroupSpec> full_param_groups(const ModelConfig& model) {
  moe::MoeRuntime rt;  // one rank, every expert local
  return model::Transformer(model, &rt).param_groups();
}

std::string hf_config_json(const Config& cfg, SafetensorsDType dtype) {
  const HfArchitecture arch = hf_architecture(cfg);
  const ModelConfig& m = cfg.model;
  ordered_json j;
  j["architectures"] = {hf_architecture_name(arch)};
  j["model_type"] = hf_model_type(arch);
  j["vocab_size"] = m.vocab_size;
  j["hidden_size"] = m.d_model;
  // Mixtral: every layer is MoE (moe_every = 1), so its one width is the experts'; Qwen2-MoE:
  // the dense layers' (its experts have moe_intermediate_size).
  j["intermediate_size"] = arch == HfArchitecture::Mixtral ? m.expert_width() : m.d_ff;
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = m.n_kv_heads;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = m.seq_len;
  j["initializer_range"] = m.init_std;
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = m.rope_theta;
  j["rope_scaling"] = nullptr;
  j["attention_dropout"] = 0.0;
  j["tie_word_embeddings"] = false;
  j["use_cache"] = true;
  j["bos_token_id"] = nullptr;  // byte-level tokens: no special tokens
  j["eos_token_id"] = nullptr;
  j["pad_token_id"] = nullptr;
  if (arch == HfArchitecture::Mixtral) {
    j["num_local_experts"] = m.num_experts;
    j["num_experts_per_tok"] = m.top_k;
    j["sliding_window"] = nullptr;
    j["output_router_logits"] = false;
    j["router_aux_loss_coef"] = cfg.moe.aux_loss_coef;
    j["router_jitter_noise"] = cfg.moe.router_jitter;
  } else if (arch == HfArchitecture::Qwen2Moe) {
    add_qwen2_moe_config_keys(cfg, j);
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
  }
  j["torch_dtype"] = dtype == SafetensorsDType::F32 ? "float32" : "bfloat16";
  return j.dump(2) + "\n";
}

namespace {

void write_text_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  write_output_file(tmp.string(), text, "export");
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) MOEZERO_USER_ERROR(path.string(), ": cannot rename into place: ", ec.message());
}

}  // namespace

namespace {
// Qwen2MoeForCausalLM always has q/k/v biases: a model without model.qkv_bias gets zero ones
// (`zeros` keeps their values alive until the file is written).
void add_required_zero_tensors(const ModelConfig& m, HfArchitecture arch,
                               std::vector<SafetensorsTensor>& tensors,
                               std::vector<std::vector<float>>& zeros) {
  if (arch != HfArchitecture::Qwen2Moe || m.qkv_bias) return;
  const auto biases = qwen2_moe_qkv_bias_tensors(m);
  zeros.reserve(biases.size());
  for (const auto& [name, shape] : biases) {
    zeros.emplace_back(static_cast<size_t>(shape[0]), 0.0f);
    tensors.push_back(SafetensorsTensor{name, shape, zeros.back().data()});
  }
}
}  // namespace

void export_hf(const Config& cfg, const std::vector<GroupValues>& groups,
               const std::string& out_dir, const HfExportOptions& options) {
  const std::string config_text = hf_config_json(cfg, options.dtype);  // refuses first
  const HfArchitecture arch = hf_architecture(cfg);
  const std::vector<GroupSpec> specs = full_param_groups(cfg.model);
  std::map<std::string, const GroupValues*> by_name;
  for (const GroupValues& g : groups)
    if (!by_name.emplace(g.name, &g).second)
      MOEZERO_THROW("export: parameter group '", g.name, "' given twice");
  std::vector<SafetensorsTensor> tensors;
  std::set<std::string> used;
  for (const GroupSpec& spec : specs) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end())
      MOEZERO_THROW("export: parameter group '", spec.name, "' of the model is missing");
    const GroupLayout layout(spec);
    const std::vector<float>& data = it->second->data;
    if (static_cast<int64_t>(data.size()) != layout.numel())
      MOEZERO_THROW("export: parameter group '", spec.name, "' has ", data.size(),
                    " values but its layout holds ", layout.numel());
    used.insert(spec.name);
    for (size_t i = 0; i < spec.params.size(); ++i) {
      const ParamSpec& p = spec.params[i];
      tensors.push_back(SafetensorsTensor{hf_tensor_name(arch, p.name), p.shape.dims(),
                                          data.data() + layout.offset(i)});
    }
  }
  std::vector<std::vector<float>> zeros;  // the data of zero tensors the format requires
  add_required_zero_tensors(cfg.model, arch, tensors, zeros);
  for (const GroupValues& g : groups)
    if (!used.count(g.name))
      MOEZERO_THROW("export: parameter group '", g.name,
                    "' is not part of the model of this config");

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) MOEZERO_THROW("export: cannot create '", out_dir, "': ", ec.message());
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}};  // transformers requires it
  write_safetensors((fs::path(out_dir) / "model.safetensors").string(), tensors, options.dtype,
                    metadata);
  write_text_atomic(fs::path(out_dir) / "config.json", config_text);
}

// ---- reading ----------------------------------------------------------------------------------

namespace {

// Reads `dir`/config.json (`file`) as a JSON object.
json load_config_json(const std::string& dir, const std::string& file) {
  if (!fs::is_directory(dir))
    MOEZERO_USER_ERROR(dir, ": not a directory (expected an exported model directory)");
  std::ifstream in(file);
  if (!in) MOEZERO_USER_ERROR(file, ": cannot read (is '", dir, "' an exported model directory?)");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    MOEZERO_USER_ERROR(file, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) MOEZERO_USER_ERROR(file, ": not a JSON object");
  return j;
}

// Mixtral, Llama or Qwen2-MoE: `architectures` decides when present (it names the class
// from_pretrained builds), else model_type.
HfArchitecture read_architecture(const ConfigReader& r) {
  const json* archs = r.find("architectures");
  const json* type = r.find("model_type");
  auto has_arch = [&](const char* name) {
    return archs && archs->is_array() &&
           std::find(archs->begin(), archs->end(), json(name)) != archs->end();
  };
  if (archs ? has_arch("MixtralForCausalLM") : (type && *type == "mixtral"))
    return HfArchitecture::Mixtral;
  if (archs ? has_arch("LlamaForCausalLM") : (type && *type == "llama"))
    return HfArchitecture::Llama;
  if (archs ? has_arch("Qwen2MoeForCausalLM") : (type && *type == "qwen2_moe"))
    return HfArchitecture::Qwen2Moe;
  r.fail("architectures", (archs ? archs->dump() : std::string("missing")) +
                              ": only MixtralForCausalLM, LlamaForCausalLM and "
                              "Qwen2MoeForCausalLM can be loaded");
}

// The keys every architecture shares: sizes, RoPE, norm and init.
void read_common_keys(const ConfigReader& r, HfArchitecture arch, ModelConfig& m) {
  m.vocab_size = r.integer("vocab_size", 1);
  m.d_model = r.integer("hidden_size", 1);
  const bool qwen = arch == HfArchitecture::Qwen2Moe;
  m.d_ff = qwen ? r.integer_or("intermediate_size", 1, 5632) : r.integer("intermediate_size", 1);
  m.n_layers = r.integer("num_hidden_layers", 1);
  m.n_heads = r.integer("num_attention_heads", 1);
  // A key config.json leaves out takes the default of the transformers class it names
  // (MixtralConfig: 8 key/value heads, rope_theta 1e6; LlamaConfig: every head, 1e4;
  // Qwen2MoeConfig: 16 key/value heads, 1e4).
  const bool mixtral = arch == HfArchitecture::Mixtral;
  m.n_kv_heads = r.find("num_key_value_heads") ? r.integer("num_key_value_heads", 1)
                 : mixtral                     ? 8
                 : qwen                        ? 16
                                               : m.n_heads;
  m.seq_len = r.integer("max_position_embeddings", 1);
  // Positions are int32; a larger context overflowed the KV cache's size (seq_len * kv width
  // wrapped past 2^63) and `generate --model` wrote outside it.
  if (m.seq_len > std::numeric_limits<int32_t>::max())
    r.fail("max_position_embeddings", std::to_string(m.seq_len) + ": must be <= " +
                                          std::to_string(std::numeric_limits<int32_t>::max()) +
                                          " (token positions are 32-bit)");
  m.rope_theta = r.number("rope_theta", mixtral ? 1e6 : 10000.0);
  m.norm_eps = r.number("rms_norm_eps", arch == HfArchitecture::Mixtral ? 1e-5 : 1e-6);
  m.init_std = r.number("initializer_range", 0.02);
}

// MixtralConfig's expert and router keys; rejects a short sliding window.
void read_mixtral_keys(const ConfigReader& r, ModelConfig& m, MoeConfig& moe) {
  m.num_experts = r.integer("num_local_experts", 1);
  m.top_k = r.integer("num_experts_per_tok", 1);
  m.moe_every = 1;
  moe.aux_loss_coef = r.number("router_aux_loss_coef", 0.0);
  moe.router_jitter = r.number("router_jitter_noise", 0.0);
  moe.normalize_top_k = true;
  if (m.top_k > m.num_experts)
    r.fail("num_experts_per_tok", std::to_string(m.top_k) + " exceeds num_local_experts = " +
                                      std::to_string(m.num_experts));
  const json* sw = r.find("sliding_window");
  if (sw && !sw->is_null() && (!sw->is_number_integer() || sw->get<int64_t>() < m.seq_len))
    r.fail("sliding_window", sw->dump() +
                                 ": sliding-window attention shorter than "
                                 "max_position_embeddings is not supported (use null)");
}

// LlamaConfig: a dense model; rejects biases and tensor-parallel slicing.
void read_llama_keys(const ConfigReader& r, ModelConfig& m) {
  m.num_experts = 0;
  r.absent_or("attention_bias", false, "attention biases are not supported");
  r.absent_or("mlp_bias", false, "MLP biases are not supported");
  r.absent_or("pretraining_tp", 1, "tensor-parallel slicing of the MLP is not supported");
}

// Rejects the features both architectures may turn on that our model lacks.
void check_unsupported_keys(const ConfigReader& r, const ModelConfig& m) {
  r.absent_or("hidden_act", "silu", "only silu (SwiGLU) is supported");
  r.absent_or("tie_word_embeddings", false,
              "tied embeddings are not supported (our lm_head is untied)");
  r.absent_or("rope_scaling", nullptr, "RoPE scaling is not supported");
  if (const json* hd = r.find("head_dim");
      hd && !hd->is_null() && m.n_heads > 0 && *hd != json(m.d_model / m.n_heads))
    r.fail("head_dim", hd->dump() + ": must be hidden_size / num_attention_heads = " +
                           std::to_string(m.d_model / m.n_heads));
}

// A config.json whose sizes the weights cannot hold is refused before anything is sized from
// it: the model's embedding, attention and MLP matrices alone (a lower bound of its parameters,
// in double so that hostile sizes cannot overflow) must fit in the values of model.safetensors,
// and each layer needs tensors of its own. Otherwise hidden_size 2^40 or num_hidden_layers 10^12
// would allocate (or list) a model of that size before the first missing tensor is named
// (fuzz/corpus/hf_config/huge_hidden.json, many_layers.json).
void check_weights_can_hold(const HfModel& hf, const std::string& file) {
  const ModelConfig& m = hf.model;
  double values = 0;
  for (const SafetensorsEntry& e : hf.weights.entries()) values += static_cast<double>(e.numel());
  const double d = static_cast<double>(m.d_model);
  const double experts = static_cast<double>(std::max<int64_t>(m.num_experts, 1));
  const double needed = static_cast<double>(m.vocab_size) * d +
                        static_cast<double>(m.n_layers) *
                            (2 * d * d + experts * 3 * d * static_cast<double>(m.expert_width()));
  if (m.n_layers > static_cast<int64_t>(hf.weights.entries().size()))
    MOEZERO_USER_ERROR(file, ": num_hidden_layers = ", m.n_layers, " but ", hf.weights.path(),
                       " has only ", hf.weights.entries().size(), " tensors");
  if (needed > values)
    MOEZERO_USER_ERROR(file, ": describes a model of at least ", needed, " parameters but ",
                       hf.weights.path(), " holds only ", values, " values");
}

}  // namespace

HfModel read_hf_dir(const std::string& dir) {
  HfModel hf;
  hf.dir = dir;
  const std::string file = (fs::path(dir) / "config.json").string();
  const json j = load_config_json(dir, file);
  const ConfigReader r{j, file};

  hf.arch = read_architecture(r);
  ModelConfig& m = hf.model;
  read_common_keys(r, hf.arch, m);
  if (hf.arch == HfArchitecture::Mixtral)
    read_mixtral_keys(r, m, hf.moe);
  else if (hf.arch == HfArchitecture::Qwen2Moe)
    read_qwen2_moe_keys(r, m, hf.moe);
  else
    read_llama_keys(r, m);
  check_unsupported_keys(r, m);
  try {
    model::validate_model_config(m);
  } catch (const Error& e) {
    MOEZERO_USER_ERROR(file, ": describes a model we cannot build: ", e.message());
  }
  hf.weights = SafetensorsFile::read((fs::path(dir) / "model.safetensors").string());
  check_weights_can_hold(hf, file);
  return hf;
}

namespace {
bool is_qkv_bias_name(const std::string& name) {
  return name.find(".self_attn.") != std::string::npos && name.ends_with("_proj.bias");
}

// A tensor of the file that `model` has no parameter for: Qwen2-MoE's q/k/v biases are dropped
// when they are all zero (a model without model.qkv_bias computes the same), anything else is
// refused naming it.
void check_unused_tensor(const HfModel& hf, const ModelConfig& model, const SafetensorsEntry& e) {
  const SafetensorsFile& w = hf.weights;
  if (hf.arch == HfArchitecture::Qwen2Moe && !model.qkv_bias && is_qkv_bias_name(e.name)) {
    const std::vector<float> v = w.to_f32(e);
    if (std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; })) return;
    MOEZERO_USER_ERROR(w.path(), ": tensor '", e.name,
                       "' holds nonzero q/k/v biases, which a model without them cannot use "
                       "(set model.qkv_bias = true)");
  }
  MOEZERO_USER_ERROR(w.path(), ": tensor '", e.name, "' is not a parameter of the ",
                     hf_architecture_name(hf.arch), " that config.json describes");
}
}  // namespace

std::vector<GroupValues> hf_group_values(const HfModel& hf, const ModelConfig* target) {
  const ModelConfig& model = target ? *target : hf.model;
  const SafetensorsFile& w = hf.weights;
  std::vector<GroupValues> out;
  std::set<std::string> used;
  for (const GroupSpec& spec : full_param_groups(model)) {
    const GroupLayout layout(spec);
    GroupValues g{spec.name, std::vector<float>(static_cast<size_t>(layout.numel()), 0.0f)};
    for (size_t i = 0; i < spec.params.size(); ++i) {
      const ParamSpec& p = spec.params[i];
      const std::string name = hf_tensor_name(hf.arch, p.name);
      const SafetensorsEntry* e = w.find(name);
      if (!e)
        MOEZERO_USER_ERROR(w.path(), ": tensor '", name, "' is missing (the model of ", hf.dir,
                           "/config.json needs it)");
      const std::vector<int64_t> want = p.shape.dims();
      if (e->shape != want)
        MOEZERO_USER_ERROR(w.path(), ": tensor '", name, "' has shape ", json(e->shape).dump(),
                           " but config.json implies ", json(want).dump());
      const std::vector<float> v = w.to_f32(*e);
      std::copy(v.begin(), v.end(), g.data.begin() + layout.offset(i));
      used.insert(name);
    }
    out.push_back(std::move(g));
  }
  for (const SafetensorsEntry& e : w.entries())
    if (!used.count(e.name)) check_unused_tensor(hf, model, e);
  return out;
}

void check_same_shape(const ModelConfig& ours, const HfModel& hf, const std::string& what) {
  const ModelConfig& m = hf.model;
  const std::string file = (fs::path(hf.dir) / "config.json").string();
  auto same = [&](int64_t a, int64_t b, const char* key, const char* hf_key) {
    if (a != b)
      MOEZERO_USER_ERROR(what, ": ", file, " describes another model: ", hf_key, " = ", b,
                         " but model.", key, " = ", a);
  };
  const bool qwen = hf.arch == HfArchitecture::Qwen2Moe;
  same(ours.vocab_size, m.vocab_size, "vocab_size", "vocab_size");
  same(ours.d_model, m.d_model, "d_model", "hidden_size");
  if (hf.arch == HfArchitecture::Mixtral)
    same(ours.expert_width(), m.d_ff, "expert_d_ff (or d_ff)", "intermediate_size");
  else if (!qwen || m.num_experts == 0 || m.moe_every > 1)  // it has dense layers
    same(ours.d_ff, m.d_ff, "d_ff", "intermediate_size");
  if (qwen && m.num_experts > 0)
    same(ours.expert_width(), m.expert_width(), "expert_d_ff (or d_ff)", "moe_intermediate_size");
  same(ours.n_layers, m.n_layers, "n_layers", "num_hidden_layers");
  same(ours.n_heads, m.n_heads, "n_heads", "num_attention_heads");
  same(ours.n_kv_heads, m.n_kv_heads, "n_kv_heads", "num_key_value_heads");
  if (qwen)  // one shared expert of the summed width (exact: hf/hf_qwen2_moe.h)
    same(shared_experts_width(ours), shared_experts_width(m),
         "num_shared_experts x shared_expert_d_ff", "shared_expert_intermediate_size");
  else
    same(ours.num_shared_experts, m.num_shared_experts, "num_shared_experts",
         "shared experts (Mixtral and Llama have none)");
  same(ours.num_experts, m.num_experts, "num_experts",
       hf.arch == HfArchitecture::Mixtral ? "num_local_experts"
       : qwen                             ? "num_experts"
                                          : "num_local_experts (Llama: 0)");
  if (m.num_experts > 0) {
    same(ours.top_k, m.top_k, "top_k", "num_experts_per_tok");
    same(ours.moe_every, m.moe_every, "moe_every",
         qwen ? "decoder_sparse_step" : "MoE layers every (Mixtral: 1)");
  }
  if (qwen && ours.num_shared_experts > 0 && !ours.shared_expert_gate)
    MOEZERO_USER_ERROR(what, ": ", file,
                       " gates its shared expert per token (Qwen2-MoE's shared_expert_gate) but "
                       "model.shared_expert_gate = false (set it to true)");
  if (ours.qkv_bias && !m.qkv_bias)
    MOEZERO_USER_ERROR(what, ": ", file, " describes a ", hf_architecture_name(hf.arch),
                       ", which has no q/k/v biases, but model.qkv_bias = true");
  // Not shapes, but the function the weights were trained for: a different RoPE base or norm
  // epsilon would silently train another model from them.
  auto same_number = [&](double a, double b, const char* key, const char* hf_key) {
    if (a != b)
      MOEZERO_USER_ERROR(what, ": ", file, " describes another model: ", hf_key, " = ", b,
                         " but model.", key, " = ", a, " (set model.", key, " to match)");
  };
  same_number(ours.rope_theta, m.rope_theta, "rope_theta", "rope_theta");
  same_number(ours.norm_eps, m.norm_eps, "norm_eps", "rms_norm_eps");
}

void check_same_routing(const MoeConfig& ours, const HfModel& hf, const std::string& what) {
  if (hf.model.num_experts == 0) return;
  const std::string file = (fs::path(hf.dir) / "config.json").string();
  const char* hf_rule =
      hf.arch == HfArchitecture::Qwen2Moe
          ? (hf.moe.normalize_top_k ? "norm_topk_prob = true" : "norm_topk_prob = false")
          : "renormalised top-k weights (Mixtral)";
  if (ours.normalize_top_k != hf.moe.normalize_top_k)
    MOEZERO_USER_ERROR(what, ": ", file, " routes with ", hf_rule,
                       " but moe.normalize_top_k = ", ours.normalize_top_k ? "true" : "false",
                       " (set it to match)");
  if (ours.score_function != ScoreFunction::Softmax)
    MOEZERO_USER_ERROR(what, ": ", file, " routes with softmax probabilities (",
                       hf_architecture_name(hf.arch),
                       ") but moe.score_function = sigmoid (set it to softmax)");
}

}  // namespace moezero::hf
