// core/config.cpp — the key table of every section (one visit function per section), and the
// three visitors that walk it: Reader (JSON -> struct, with checks), Writer (struct -> JSON),
// Documenter (the reference table). A key is added in exactly one place: its visit line.
#include "core/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/json_duplicates.h"
#include "core/step_list.h"

namespace moezero {

using nlohmann::json;

namespace {

// ---- value checks (return "" when fine, else the reason) --------------------------------
template <typename T>
std::function<std::string(const T&)> at_least(T lo) {
  return [lo](const T& v) {
    return v >= lo ? std::string() : detail::concat("must be >= ", lo, ", got ", v);
  };
}
template <typename T>
std::function<std::string(const T&)> greater_than(T lo) {
  return [lo](const T& v) {
    return v > lo ? std::string() : detail::concat("must be > ", lo, ", got ", v);
  };
}
template <typename T>
std::function<std::string(const T&)> in_range(T lo, T hi) {
  return [lo, hi](const T& v) {
    return (v >= lo && v <= hi) ? std::string()
                                : detail::concat("must be in [", lo, ", ", hi, "], got ", v);
  };
}
template <typename T>
std::function<std::string(const T&)> below(T lo, T hi) {  // [lo, hi)
  return [lo, hi](const T& v) {
    return (v >= lo && v < hi) ? std::string()
                               : detail::concat("must be in [", lo, ", ", hi, "), got ", v);
  };
}

template <typename E>
using Choices = std::vector<std::pair<const char*, E>>;

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string json_type_name(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a bool";
  if (j.is_number_integer() || j.is_number_unsigned()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

// ---- Reader ----------------------------------------------------------------------------
class Reader {
 public:
  Reader(const json& obj, std::string source, std::string section)
      : obj_(obj), source_(std::move(source)), section_(std::move(section)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    MOEZERO_USER_ERROR(source_, ": ", section_, ".", key, ": ", why);
  }

  template <typename T>
  void field(const char* key, T& value, const char* /*doc*/,
             std::function<std::string(const T&)> check = {}) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end()) return;
    T v = convert<T>(key, *it);
    if (check) {
      std::string why = check(v);
      if (!why.empty()) fail(key, why);
    }
    value = v;
  }

  void bytes(const char* key, uint64_t& value, const char* /*doc*/) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end()) return;
    const std::string what = source_ + ": " + section_ + "." + key;
    if (it->is_string()) {
      value = parse_bytes(it->get<std::string>(), what);
    } else if (it->is_number()) {
      double d = it->get<double>();
      if (!(d >= 0) || d != std::floor(d) || d > 1.8e19)
        fail(key, detail::concat("must be a whole, non-negative byte count, got ", it->dump()));
      value = static_cast<uint64_t>(d);
    } else {
      fail(key,
           "expected a byte count (integer or string like \"64MiB\"), got " + json_type_name(*it));
    }
  }

  template <typename E>
  void choice(const char* key, E& value, const Choices<E>& choices, const char* /*doc*/) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end()) return;
    if (!it->is_string()) fail(key, "expected a string, got " + json_type_name(*it));
    const std::string s = it->get<std::string>();
    std::string names;
    for (auto& [name, e] : choices) {
      if (s == name) {
        value = e;
        return;
      }
      names += (names.empty() ? "" : ", ") + std::string(name);
    }
    fail(key, "must be one of " + names + ", got \"" + s + "\"");
  }

  void dtype(const char* key, DType& value, const char* doc) {
    choice<DType>(key, value, {{"fp32", DType::F32}, {"bf16", DType::BF16}, {"f32", DType::F32}},
                  doc);
  }

  // Unknown keys are errors, with the nearest known key as a hint.
  void finish() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (seen_.count(it.key())) continue;
      std::string best;
      size_t best_d = 3;  // suggest only near misses
      for (const auto& k : seen_) {
        size_t d = edit_distance(it.key(), k);
        if (d < best_d) best_d = d, best = k;
      }
      std::string known;
      for (const auto& k : seen_) known += (known.empty() ? "" : ", ") + k;
      MOEZERO_USER_ERROR(source_, ": unknown key '", section_, ".", it.key(), "'",
                         best.empty() ? "" : " (did you mean '" + section_ + "." + best + "'?)",
                         "; known keys of '", section_, "': ", known);
    }
  }

 private:
  template <typename T>
  T convert(const char* key, const json& j) const {
    if constexpr (std::is_same_v<T, bool>) {
      if (!j.is_boolean()) fail(key, "expected true or false, got " + json_type_name(j));
      return j.get<bool>();
    } else if constexpr (std::is_same_v<T, int64_t>) {
      if (j.is_number_integer() || j.is_number_unsigned()) {
        if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX))
          fail(key, "integer too large: " + j.dump());
        return j.get<int64_t>();
      }
      if (j.is_number_float()) {
        double d = j.get<double>();
        if (d == std::floor(d) && std::abs(d) < 9.0e15) return static_cast<int64_t>(d);
      }
      fail(key, "expected an integer, got " + json_type_name(j) + " " + j.dump());
    } else if constexpr (std::is_same_v<T, double>) {
      if (!j.is_number()) fail(key, "expected a number, got " + json_type_name(j) + " " + j.dump());
      double d = j.get<double>();
      if (!std::isfinite(d)) fail(key, "must be finite");
      return d;
    } else {
      static_assert(std::is_same_v<T, std::string>);
      // A step list may be written as one whole number: "steps": 5 means "5". Any other string
      // key refuses a number (`"metrics_file": 42` is a mistake, not a file named 42); --set
      // gives string keys their text (apply_override).
      if (j.is_number_integer() && section_ == "profile" && std::string(key) == "steps")
        return j.dump();
      if (!j.is_string()) fail(key, "expected a string, got " + json_type_name(j));
      return j.get<std::string>();
    }
  }

  const json& obj_;
  std::string source_;
  std::string section_;
  std::set<std::string> seen_;
};

// ---- Writer ----------------------------------------------------------------------------
class Writer {
 public:
  json out = json::object();
  template <typename T, typename... Rest>
  void field(const char* key, const T& value, const char*, Rest&&...) {
    out[key] = value;
  }
  void bytes(const char* key, const uint64_t& value, const char*) { out[key] = value; }
  template <typename E>
  void choice(const char* key, const E& value, const Choices<E>& choices, const char*) {
    for (auto& [name, e] : choices)
      if (e == value) out[key] = name;
  }
  void dtype(const char* key, const DType& value, const char*) {
    out[key] = value == DType::F32 ? "fp32" : std::string(dtype_name(value));
  }
};

// ---- Documenter ------------------------------------------------------------------------
class Documenter {
 public:
  explicit Documenter(std::string section) : section_(std::move(section)) {}
  std::vector<ConfigKeyDoc> keys;
  template <typename T, typename... Rest>
  void field(const char* key, const T& value, const char* doc, Rest&&...) {
    std::string type, def;
    if constexpr (std::is_same_v<T, bool>) {
      type = "bool", def = value ? "true" : "false";
    } else if constexpr (std::is_same_v<T, int64_t>) {
      type = "integer", def = std::to_string(value);
    } else if constexpr (std::is_same_v<T, double>) {
      type = "number", def = json(value).dump();
    } else {
      type = "string", def = "\"" + value + "\"";
    }
    keys.push_back({section_ + "." + key, type, def, doc});
  }
  void bytes(const char* key, const uint64_t& value, const char* doc) {
    keys.push_back({section_ + "." + key, "bytes", std::to_string(value), doc});
  }
  template <typename E>
  void choice(const char* key, const E& value, const Choices<E>& choices, const char* doc) {
    std::string type = "one of ", def;
    for (auto& [name, e] : choices) {
      type += std::string(type.size() > 7 ? "\\|" : "") + name;
      if (e == value) def = name;
    }
    keys.push_back({section_ + "." + key, type, def, doc});
  }
  void dtype(const char* key, const DType& value, const char* doc) {
    keys.push_back({section_ + "." + key, "one of fp32\\|bf16",
                    value == DType::F32 ? "fp32" : std::string(dtype_name(value)), doc});
  }

 private:
  std::string section_;
};

// ---- the key tables --------------------------------------------------------------------
constexpr int64_t kMaxI = std::numeric_limits<int32_t>::max();

template <class V>
void visit_model(V& v, auto& c) {
  v.field("vocab_size", c.vocab_size, "vocabulary size (256: bytes are tokens)",
          in_range<int64_t>(1, kMaxI));
  v.field("d_model", c.d_model, "model width (HF hidden_size)", in_range<int64_t>(1, 1 << 20));
  v.field("d_ff", c.d_ff,
          "SwiGLU hidden width of the dense FFN, and of each expert unless expert_d_ff is set "
          "(HF intermediate_size)",
          in_range<int64_t>(1, 1 << 22));
  v.field("expert_d_ff", c.expert_d_ff,
          "SwiGLU hidden width of each routed expert (fine-grained experts; HF "
          "moe_intermediate_size); 0: d_ff",
          in_range<int64_t>(0, 1 << 22));
  v.field("n_layers", c.n_layers, "decoder layers", in_range<int64_t>(1, 4096));
  v.field("n_heads", c.n_heads, "query heads", in_range<int64_t>(1, 4096));
  v.field("n_kv_heads", c.n_kv_heads, "key/value heads (grouped-query attention); divides n_heads",
          in_range<int64_t>(1, 4096));
  v.field("seq_len", c.seq_len,
          "training context length, also the longest sequence the model accepts",
          in_range<int64_t>(1, 1 << 24));
  v.field("rope_theta", c.rope_theta, "RoPE base", greater_than(0.0));
  v.field("norm_eps", c.norm_eps, "RMSNorm epsilon", greater_than(0.0));
  v.field("init_std", c.init_std, "std of the normal initialisation of weights", greater_than(0.0));
  v.field("num_experts", c.num_experts, "experts per MoE layer (0: dense model)",
          in_range<int64_t>(0, 65536));
  v.field("top_k", c.top_k, "experts per token", in_range<int64_t>(1, 65536));
  v.field("moe_every", c.moe_every, "every n-th layer is MoE (1: all layers)",
          in_range<int64_t>(1, 4096));
  v.field("num_shared_experts", c.num_shared_experts,
          "shared SwiGLU experts that every token of a MoE layer goes through (DeepSeek-MoE, "
          "Qwen-MoE), stored as one of the summed width; 0: none",
          in_range<int64_t>(0, 4096));
  v.field("shared_expert_d_ff", c.shared_expert_d_ff,
          "width of each shared expert; 0: the routed experts' width (expert_d_ff or d_ff)",
          in_range<int64_t>(0, 1 << 22));
  v.field("shared_expert_gate", c.shared_expert_gate,
          "Qwen2-MoE: scale the shared experts' output per token by sigmoid(xn . w) (a learned "
          "(1, d_model) gate)");
  v.field("qkv_bias", c.qkv_bias,
          "Qwen2 / Qwen2-MoE: learned biases on the attention's q, k and v projections (zero "
          "init, no weight decay)");
}

template <class V>
void visit_train(V& v, auto& c) {
  v.field("steps", c.steps, "optimizer steps", at_least<int64_t>(0));
  v.field("micro_batch_size", c.micro_batch_size,
          "sequences per micro-batch over all ranks together (each rank takes micro_batch_size / "
          "world_size), so the math does not depend on the world size",
          in_range<int64_t>(1, kMaxI));
  v.field("grad_accum_steps", c.grad_accum_steps, "micro-batches per optimizer step",
          in_range<int64_t>(1, kMaxI));
  v.field("lr", c.lr, "peak learning rate", greater_than(0.0));
  v.field("min_lr", c.min_lr, "learning rate at the end of the cosine decay", at_least(0.0));
  v.field("warmup_steps", c.warmup_steps, "linear warmup steps", at_least<int64_t>(0));
  v.field("weight_decay", c.weight_decay, "AdamW decoupled weight decay (not applied to norms)",
          at_least(0.0));
  v.field("beta1", c.beta1, "AdamW beta1", below(0.0, 1.0));
  v.field("beta2", c.beta2, "AdamW beta2", below(0.0, 1.0));
  v.field("eps", c.eps, "AdamW epsilon", greater_than(0.0));
  v.field("grad_clip", c.grad_clip, "max global gradient L2 norm (0: no clipping)", at_least(0.0));
  v.dtype("dtype", c.dtype, "compute dtype (masters and optimizer moments stay f32)");
  v.field("seed", c.seed, "seed of initialisation, data order and router jitter",
          at_least<int64_t>(0));
  v.field("log_every", c.log_every, "print a line every n steps", in_range<int64_t>(1, kMaxI));
  v.field("metrics_file", c.metrics_file, "JSON-lines metrics, one object per step (empty: none)");
  v.field("save_dir", c.save_dir, "checkpoint directory (empty: none)");
  v.field("save_every", c.save_every,
          "checkpoint every n steps (0: only at the end if save_dir is set)", at_least<int64_t>(0));
  v.field("keep_checkpoints", c.keep_checkpoints,
          "complete checkpoints kept in save_dir, newest first (0: all)", at_least<int64_t>(0));
  v.choice(
      "on_nonfinite", c.on_nonfinite,
      Choices<NonFinitePolicy>{{"stop", NonFinitePolicy::Stop}, {"skip", NonFinitePolicy::Skip}},
      "what a non-finite gradient does: stop the run or skip the step");
  v.bytes("memory_limit", c.memory_limit,
          "bytes each rank may allocate on its device (0: no limit); past it an allocation fails "
          "with an out-of-memory error naming the tag, the buffer and the bytes in use by tag");
  v.field("init_from", c.init_from,
          "Hugging Face style directory to initialise from (empty: random)");
  v.field("eval_every", c.eval_every,
          "validation loss and perplexity on the held-out data every n steps and after the last "
          "(0: off)",
          at_least<int64_t>(0));
  v.field("eval_batches", c.eval_batches,
          "micro-batches of micro_batch_size held-out sequences per evaluation",
          in_range<int64_t>(1, kMaxI));
}

template <class V>
void visit_data(V& v, auto& c) {
  v.field("path", c.path,
          "training data: bytes: a text file, bytes are tokens (empty: the built-in corpus); "
          "tokens: an llm.c token shard or a glob of shards");
  v.choice("format", c.format,
           Choices<DataFormat>{{"bytes", DataFormat::Bytes}, {"tokens", DataFormat::Tokens}},
           "bytes: bytes are tokens; tokens: llm.c shards (256 int32 header, uint16 or uint32 "
           "token ids), memory-mapped");
  v.field("val_path", c.val_path,
          "held-out data in data.format (file or glob); empty: data.val_fraction of data.path");
  v.field("val_fraction", c.val_fraction,
          "fraction of data.path held out for validation when data.val_path is empty",
          below(0.0, 1.0));
  v.field("tokenizer", c.tokenizer,
          "tokenizer.json (byte-level BPE, scripts/prepare_data.py) of the tokens: checked against "
          "model.vocab_size, copied into train.save_dir, used by moezero generate (empty: bytes)");
}

template <class V>
void visit_parallel(V& v, auto& c) {
  v.field("world_size", c.world_size, "ranks (threads of one process on one machine)",
          in_range<int64_t>(1, 1024));
  v.field("ep_size", c.ep_size, "expert-parallel width; divides world_size and model.num_experts",
          in_range<int64_t>(1, 1024));
  v.choice("backend", c.backend,
           Choices<BackendKind>{{"cpu", BackendKind::Cpu}, {"cuda", BackendKind::Cuda}},
           "compute backend");
}

template <class V>
void visit_zero(V& v, auto& c) {
  v.field("stage", c.stage,
          "0 data parallel, 1 shard optimizer states, 2 + gradients, 3 + parameters",
          in_range<int64_t>(0, 3));
  v.field("param_persistence_threshold", c.param_persistence_threshold,
          "parameter groups with fewer elements stay replicated", at_least<int64_t>(0));
  v.bytes("keep_dense_bytes", c.keep_dense_bytes,
          "stage 3: bytes of dense parameter groups kept gathered from one micro-batch to the next "
          "within a step (per gather communicator); 0 regathers them every micro-batch");
  v.field("shard_single_rank", c.shard_single_rank,
          "stage 3: gather groups held by one rank too (by default they stay resident)");
  v.bytes("prefetch_bucket_size", c.prefetch_bucket_size,
          "bytes of parameters fetched ahead of use");
  v.bytes("max_live_parameters", c.max_live_parameters,
          "bytes of gathered parameters alive at once");
  v.bytes("reduce_bucket_size", c.reduce_bucket_size, "bytes per gradient reduce-scatter bucket");
  v.choice(
      "moe_gather", c.moe_gather,
      Choices<MoeGather>{
          {"experts", MoeGather::Experts}, {"leaf", MoeGather::Leaf}, {"fsdp", MoeGather::Fsdp}},
      "stage-3 expert gathers: experts (active ones, prefetch policy, shard cache), leaf "
      "(DeepSpeed leaf module: the block's experts coalesced, every pass, nothing cached), fsdp "
      "(coalesced, kept from forward to backward; across micro-batches within "
      "shard_cache.capacity_bytes)");
  v.field("reshard_after_forward", c.reshard_after_forward,
          "moe_gather=experts: release an active expert after forward (true) or keep it until "
          "its backward in the same micro-batch (false)");
}

template <class V>
void visit_moe(V& v, auto& c) {
  v.field("aux_loss_coef", c.aux_loss_coef, "load-balancing loss coefficient (HF Mixtral form)",
          at_least(0.0));
  v.field("z_loss_coef", c.z_loss_coef, "router z-loss coefficient", at_least(0.0));
  v.field("router_jitter", c.router_jitter, "multiplicative input jitter of the router (0: off)",
          below(0.0, 1.0));
  v.field("capacity_factor", c.capacity_factor, "expert capacity factor (0: dropless)",
          at_least(0.0));
  v.field("normalize_top_k", c.normalize_top_k,
          "renormalise top-k weights (Mixtral); false keeps raw probabilities");
  v.choice("score_function", c.score_function,
           Choices<ScoreFunction>{{"softmax", ScoreFunction::Softmax},
                                  {"sigmoid", ScoreFunction::Sigmoid}},
           "router scores: softmax of the logits (Mixtral) or sigmoid (DeepSeek-V3; README, "
           "MoE layers)");
  v.field("expert_bias_update_rate", c.expert_bias_update_rate,
          "auxiliary-loss-free balancing (DeepSeek-V3): per-expert selection bias += rate * "
          "sign(mean load - load) after each optimizer step; 0: off",
          at_least(0.0));
  v.field("routing_replay", c.routing_replay,
          "a routing trace (profile.routing_trace) whose per-rank per-expert token counts the "
          "training micro-batches are forced to (README, MoE layers of today); empty: off");
}

template <class V>
void visit_prefetch(V& v, auto& c) {
  v.choice("policy", c.policy,
           Choices<PrefetchPolicy>{{"none", PrefetchPolicy::None},
                                   {"all", PrefetchPolicy::All},
                                   {"frequency", PrefetchPolicy::Frequency},
                                   {"cost", PrefetchPolicy::Cost}},
           "expert prefetch policy");
  v.field("ema_decay", c.ema_decay, "decay of the per-expert activation frequency average",
          below(0.0, 1.0));
  v.field("min_probability", c.min_probability, "prefetch experts predicted at least this likely",
          in_range(0.0, 1.0));
  v.bytes("budget_bytes", c.budget_bytes, "bytes of expert parameters prefetched per layer");
  v.field("lookahead_layers", c.lookahead_layers,
          "0: no expert prefetch before the router; n >= 1: a MoE layer's experts are planned "
          "while its attention block runs, and those of the next n - 1 layers ahead of time (from "
          "marginal statistics)",
          in_range<int64_t>(0, 64));
  v.field("link_gbps", c.link_gbps,
          "link bandwidth in Gbit/s the cost policy prices a gathered byte at (0: "
          "comm_emulation.link_gbps; both 0: the cost policy is frequency)",
          at_least(0.0));
}

template <class V>
void visit_shard_cache(V& v, auto& c) {
  v.bytes("capacity_bytes", c.capacity_bytes,
          "bytes of gathered expert parameters kept resident (0: off)");
  v.choice("eviction", c.eviction,
           Choices<EvictionPolicy>{{"lfu", EvictionPolicy::Lfu}, {"lru", EvictionPolicy::Lru}},
           "eviction order: frequency model (lfu) or recency (lru)");
}

template <class V>
void visit_comm_emulation(V& v, auto& c) {
  v.field("link_gbps", c.link_gbps,
          "emulated link bandwidth in Gbit/s (10^9 bits/s) for ranks-as-threads (0: off)",
          at_least(0.0));
  v.field("latency_us", c.latency_us,
          "emulated latency per algorithm step over the link, in microseconds", at_least(0.0));
  v.field("ranks_per_node", c.ranks_per_node,
          "ranks per node for a two-tier emulated network (0: one tier, every link the NIC)",
          at_least<int64_t>(0));
  v.field("intra_node_gbps", c.intra_node_gbps,
          "emulated link between ranks of one node in Gbit/s (0: no bandwidth cost)",
          at_least(0.0));
  v.field("intra_node_latency_us", c.intra_node_latency_us,
          "emulated latency per algorithm step inside a node, in microseconds", at_least(0.0));
}

template <class V>
void visit_comm(V& v, auto& c) {
  v.field("timeout_s", c.timeout_s,
          "a collective whose peers do not arrive fails after this many seconds",
          greater_than(0.0));
  v.field("check_divergence", c.check_divergence,
          "check that all ranks of a group issue the same collectives (debug)");
}

template <class V>
void visit_profile(V& v, auto& c) {
  v.field("trace", c.trace, "Chrome trace-event JSON output (empty: none)");
  v.field("steps", c.steps, "steps to trace, e.g. \"3-5,10\" (empty: all)",
          std::function<std::string(const std::string&)>([](const std::string& s) {
            StepList parsed;
            return StepList::parse_into(s, parsed);
          }));
  v.field("routing_trace", c.routing_trace,
          "JSON lines: per step, micro-batch, MoE layer and rank the tokens routed to every "
          "expert (README, MoE layers of today); empty: none");
  v.field("grad_norms", c.grad_norms, "per-shard and per-group gradient norms in the metrics");
  v.field("check_finite", c.check_finite, "check gradients for NaN/Inf every step");
}

// Calls f(section name, visit function, section struct) for every section, in file order.
template <class C, class F>
void for_each_section(C& c, F&& f) {
  f(
      "model", [](auto& v, auto& s) { visit_model(v, s); }, c.model);
  f(
      "train", [](auto& v, auto& s) { visit_train(v, s); }, c.train);
  f(
      "data", [](auto& v, auto& s) { visit_data(v, s); }, c.data);
  f(
      "parallel", [](auto& v, auto& s) { visit_parallel(v, s); }, c.parallel);
  f(
      "zero", [](auto& v, auto& s) { visit_zero(v, s); }, c.zero);
  f(
      "moe", [](auto& v, auto& s) { visit_moe(v, s); }, c.moe);
  f(
      "prefetch", [](auto& v, auto& s) { visit_prefetch(v, s); }, c.prefetch);
  f(
      "shard_cache", [](auto& v, auto& s) { visit_shard_cache(v, s); }, c.shard_cache);
  f(
      "comm_emulation", [](auto& v, auto& s) { visit_comm_emulation(v, s); }, c.comm_emulation);
  f(
      "comm", [](auto& v, auto& s) { visit_comm(v, s); }, c.comm);
  f(
      "profile", [](auto& v, auto& s) { visit_profile(v, s); }, c.profile);
}

// Rules between keys, checked after every key is valid on its own.
void validate(const Config& c, const std::string& src) {
  const auto& m = c.model;
  auto fail = [&](auto&&... why) { MOEZERO_USER_ERROR(src, ": ", why...); };
  if (m.d_model % m.n_heads != 0)
    fail("model.d_model (", m.d_model, ") must be divisible by model.n_heads (", m.n_heads, ")");
  if ((m.d_model / m.n_heads) % 2 != 0)
    fail("model.d_model / model.n_heads (head dim ", m.d_model / m.n_heads,
         ") must be even for RoPE");
  if (m.n_heads % m.n_kv_heads != 0)
    fail("model.n_heads (", m.n_heads, ") must be divisible by model.n_kv_heads (", m.n_kv_heads,
         ")");
  if (m.num_experts > 0 && m.top_k > m.num_experts)
    fail("model.top_k (", m.top_k, ") must be <= model.num_experts (", m.num_experts, ")");
  if (c.train.min_lr > c.train.lr)
    fail("train.min_lr (", c.train.min_lr, ") must be <= train.lr (", c.train.lr, ")");
  const auto& ce = c.comm_emulation;
  if (ce.ranks_per_node == 0 && (ce.intra_node_gbps > 0.0 || ce.intra_node_latency_us > 0.0))
    fail(
        "comm_emulation.intra_node_gbps / intra_node_latency_us need "
        "comm_emulation.ranks_per_node > 0 (got 0: one tier)");
  const auto& p = c.parallel;
  if (p.world_size % p.ep_size != 0)
    fail("parallel.ep_size (", p.ep_size, ") must divide parallel.world_size (", p.world_size, ")");
  if (m.num_experts > 0 && m.num_experts % p.ep_size != 0)
    fail("model.num_experts (", m.num_experts, ") must be divisible by parallel.ep_size (",
         p.ep_size, ")");
  if (c.train.micro_batch_size % p.world_size != 0)
    fail("train.micro_batch_size (", c.train.micro_batch_size,
         ") must be divisible by parallel.world_size (", p.world_size,
         "): it counts the sequences of all ranks together");
  if (m.num_experts == 0 && p.ep_size != 1)
    fail("parallel.ep_size (", p.ep_size, ") must be 1 for a dense model (model.num_experts = 0)");
  if (c.train.eval_every > 0 && c.data.val_path.empty() && c.data.val_fraction <= 0.0)
    fail("train.eval_every (", c.train.eval_every,
         ") needs held-out data: set data.val_path or data.val_fraction > 0");
  if (c.data.format == DataFormat::Tokens && c.data.path.empty())
    fail("data.format \"tokens\" needs data.path (a token shard or a glob of shards)");
}

void apply_override(json& root, const std::string& item, const std::string& source) {
  auto eq = item.find('=');
  if (eq == std::string::npos || eq == 0)
    MOEZERO_USER_ERROR(source, ": override '", item, "' must look like section.key=value");
  std::string path = item.substr(0, eq), text = item.substr(eq + 1);
  auto dot = path.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == path.size() ||
      path.find('.', dot + 1) != std::string::npos)
    MOEZERO_USER_ERROR(source, ": override '", item, "': key must be section.key, got '", path,
                       "'");
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;  // not JSON: a plain string
  if (!value.is_string())  // a string key takes the text as it is: metrics_file=42 is "42"
    for (const ConfigKeyDoc& k : config_reference())
      if (k.path == path && k.type == "string") value = text;
  std::string section = path.substr(0, dot), key = path.substr(dot + 1);
  if (!root.contains(section)) root[section] = json::object();
  if (!root[section].is_object())
    MOEZERO_USER_ERROR(source, ": override '", item, "': section '", section, "' is not an object");
  root[section][key] = value;
}

}  // namespace

uint64_t parse_bytes(const std::string& text, const std::string& what) {
  size_t pos = 0;
  double number = 0;
  try {
    number = std::stod(text, &pos);
  } catch (const std::exception&) {
    MOEZERO_USER_ERROR(what, ": '", text,
                       "' is not a byte count (examples: 4096, \"64MiB\", \"1.5GB\")");
  }
  std::string unit = text.substr(pos);
  unit.erase(0, unit.find_first_not_of(' '));
  static const std::pair<const char*, double> kUnits[] = {{"", 1},
                                                          {"B", 1},
                                                          {"KB", 1e3},
                                                          {"MB", 1e6},
                                                          {"GB", 1e9},
                                                          {"TB", 1e12},
                                                          {"KiB", 1024.0},
                                                          {"MiB", 1048576.0},
                                                          {"GiB", 1073741824.0},
                                                          {"TiB", 1099511627776.0}};
  for (auto& [name, mult] : kUnits) {
    if (unit == name) {
      double bytes = number * mult;
      if (!(bytes >= 0) || bytes > 1.8e19 || bytes != std::floor(bytes))
        MOEZERO_USER_ERROR(what, ": '", text, "' is not a whole, non-negative number of bytes");
      return static_cast<uint64_t>(bytes);
    }
  }
  MOEZERO_USER_ERROR(what, ": unknown unit '", unit, "' in '", text,
                     "' (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
}

Config parse_config(const std::string& json_text, const std::string& source,
                    const std::vector<std::string>& overrides) {
  json root;
  try {
    root = json::parse(json_text, nullptr, true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {  // parse_error, out_of_range (a number like 1e400)
    MOEZERO_USER_ERROR(source, ": not valid JSON: ", e.what());
  }
  if (const auto dup = find_duplicate_key(json_text))  // JSON would keep only the last one
    MOEZERO_USER_ERROR(source, ": key '", dup->path, "' appears twice (lines ", dup->first_line,
                       " and ", dup->second_line, "): merge them into one");
  if (root.is_null()) root = json::object();
  if (!root.is_object()) MOEZERO_USER_ERROR(source, ": the top level must be a JSON object");
  for (const auto& o : overrides) apply_override(root, o, "--set");

  Config c;
  std::set<std::string> sections;
  for_each_section(c, [&](const char* name, auto visit_fn, auto& s) {
    sections.insert(name);
    auto it = root.find(name);
    if (it == root.end()) return;
    if (!it->is_object()) MOEZERO_USER_ERROR(source, ": section '", name, "' must be an object");
    Reader r(*it, source, name);
    visit_fn(r, s);
    r.finish();
  });
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (sections.count(it.key())) continue;
    std::string known;
    for (const auto& s : sections) known += (known.empty() ? "" : ", ") + s;
    MOEZERO_USER_ERROR(source, ": unknown section '", it.key(), "' (sections: ", known, ")");
  }
  validate(c, source);
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) MOEZERO_USER_ERROR("cannot read config file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path, overrides);
}

std::string config_to_json(const Config& c, int indent) {
  json root = json::object();
  Config copy = c;
  for_each_section(copy, [&](const char* name, auto visit_fn, auto& s) {
    Writer w;
    visit_fn(w, s);
    root[name] = w.out;
  });
  return root.dump(indent);
}

std::vector<ConfigKeyDoc> config_reference() {
  std::vector<ConfigKeyDoc> all;
  Config c;
  for_each_section(c, [&](const char* name, auto visit_fn, auto& s) {
    Documenter d(name);
    visit_fn(d, s);
    all.insert(all.end(), d.keys.begin(), d.keys.end());
  });
  return all;
}

}  // namespace moezero
