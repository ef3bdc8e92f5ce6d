// hf/generate.cpp — KV-cache forward and sampling (generate.h).
#include "hf/generate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/ops.h"
#include "core/param_group.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/transformer.h"

namespace moezero::hf {

namespace {

using Vec = std::vector<float>;

TensorBuffer scratch(Device& dev, Shape shape, const char* what) {
  return TensorBuffer(dev, DType::F32, shape, MemTag::Activation, dev.default_stream(), what);
}

// c (m, n) = a (m, k) @ b (n, k)^T: activations times a PyTorch-oriented (out, in) weight.
void linear(Ops& ops, Stream& s, const Tensor& a, const Tensor& w, const Tensor& c) {
  GemmArgs g;
  g.a = a;
  g.b = w;
  g.c = c;
  g.trans_b = Transpose::Yes;
  ops.gemm(s, g);
}

}  // namespace

// The weights (one device buffer per group, views by Hugging Face name), the KV cache and the
// scratch tensors of one token's forward; all f32 on the generator's device.
struct KvGenerator::State {
  std::vector<TensorBuffer> storage;
  std::map<std::string, Tensor> by_name;
  std::vector<TensorBuffer> k_cache, v_cache;  // per layer (Hkv, seq_len, D)
  TensorBuffer token, position;                // i32 (1): this step's id and position
  TensorBuffer x, xn, rstd, q, k, v, att, o, y, scores, probs, logits;
  TensorBuffer shared_gate;                   // (1, 1): the shared experts' gate (Qwen2-MoE)
  TensorBuffer gate, up, hidden;              // (1, widest FFN)
  int32_t host_token = 0, host_position = 0;  // the sources of the uploads (alive until sync)
  const Tensor& at(const std::string& name) const {
    auto it = by_name.find(name);
    MOEZERO_CHECK(it != by_name.end(), "generate: no parameter ", name);
    return it->second;
  }
};

KvGenerator::KvGenerator(const ModelConfig& model, bool normalize_top_k,
                         const std::vector<GroupValues>& groups, Device* device)
    : model_(model), normalize_top_k_(normalize_top_k), st_(std::make_unique<State>()) {
  if (!device) {
    own_device_ = make_cpu_device();
    device = own_device_.get();
  }
  device_ = device;
  Device& dev = *device_;
  Stream& s = dev.default_stream();
  std::map<std::string, const GroupValues*> values;
  for (const GroupValues& g : groups) values[g.name] = &g;
  int64_t widest_ffn = 0;
  for (const GroupSpec& spec : full_param_groups(model)) {
    auto it = values.find(spec.name);
    MOEZERO_REQUIRE(it != values.end(), "generate: parameter group '", spec.name, "' is missing");
    const GroupLayout layout(spec);
    MOEZERO_REQUIRE(int64_t(it->second->data.size()) == layout.numel(), "generate: group '",
                    spec.name, "' has ", it->second->data.size(), " values, expected ",
                    layout.numel());
    st_->storage.emplace_back(dev, DType::F32, Shape{layout.numel()}, MemTag::FullParam, s,
                              "generate weights");
    const Tensor all = st_->storage.back().view();
    dev.memcpy_async(all.data(), it->second->data.data(), all.size_bytes(), s);
    for (size_t i = 0; i < spec.params.size(); ++i) {
      const ParamSpec& p = spec.params[i];
      st_->by_name[p.name] = all.view_elems(layout.offset(i), p.shape);
      if (p.name.find("gate_proj") != std::string::npos || p.name.find(".w1.") != std::string::npos)
        widest_ffn = std::max(widest_ffn, p.shape[0]);
    }
  }
  s.synchronize();  // the host groups may go away after the constructor
  const int64_t C = model.d_model, Hq = model.n_heads, D = C / Hq, KV = model.n_kv_heads * D;
  for (int64_t l = 0; l < model.n_layers; ++l) {
    st_->k_cache.push_back(scratch(dev, {model.n_kv_heads, model.seq_len, D}, "k cache"));
    st_->v_cache.push_back(scratch(dev, {model.n_kv_heads, model.seq_len, D}, "v cache"));
  }
  st_->token = TensorBuffer(dev, DType::I32, {1}, MemTag::Activation, s, "token");
  st_->position = TensorBuffer(dev, DType::I32, {1}, MemTag::Activation, s, "position");
  st_->x = scratch(dev, {1, C}, "x");
  st_->xn = scratch(dev, {1, C}, "xn");
  st_->rstd = scratch(dev, {1}, "rstd");
  st_->q = scratch(dev, {1, Hq * D}, "q");
  st_->k = scratch(dev, {1, KV}, "k");
  st_->v = scratch(dev, {1, KV}, "v");
  st_->att = scratch(dev, {1, Hq * D}, "att");
  st_->o = scratch(dev, {1, C}, "o");
  st_->y = scratch(dev, {1, C}, "y");
  st_->scores = scratch(dev, {Hq * model.seq_len}, "scores");
  st_->probs = scratch(dev, {1, std::max<int64_t>(model.num_experts, 1)}, "router probs");
  st_->logits = scratch(dev, {1, model.vocab_size}, "logits");
  st_->shared_gate = scratch(dev, {1, 1}, "shared expert gate");
  st_->gate = scratch(dev, {1, widest_ffn}, "gate");
  st_->up = scratch(dev, {1, widest_ffn}, "up");
  st_->hidden = scratch(dev, {1, widest_ffn}, "hidden");
  reset();
}

KvGenerator::~KvGenerator() {
  try {  // the buffers go back to the allocator after the stream's last use of them
    if (device_) device_->default_stream().synchronize();
  } catch (const std::exception&) {  // a failed op was reported by the feed that enqueued it
  }
}

void KvGenerator::reset() { pos_ = 0; }  // positions >= pos_ of the cache are never read

void KvGenerator::attention(int64_t l) {
  const ModelConfig& m = model_;
  Ops& ops = device_->ops();
  Stream& s = device_->default_stream();
  State& st = *st_;
  const int64_t C = m.d_model, Hq = m.n_heads, Hkv = m.n_kv_heads, D = C / Hq, G = Hq / Hkv;
  const int64_t L = pos_ + 1;  // positions attended to
  const std::string p = "model.layers." + std::to_string(l) + ".";
  ops.rmsnorm_forward(s, st.x, st.at(p + "input_layernorm.weight"), float(m.norm_eps), st.xn,
                      st.rstd);
  linear(ops, s, st.xn, st.at(p + "self_attn.q_proj.weight"), st.q);
  linear(ops, s, st.xn, st.at(p + "self_attn.k_proj.weight"), st.k);
  linear(ops, s, st.xn, st.at(p + "self_attn.v_proj.weight"), st.v);
  if (m.qkv_bias) {  // Qwen2: before RoPE
    ops.add(s, st.q, st.at(p + "self_attn.q_proj.bias").reshape({1, Hq * D}), st.q);
    ops.add(s, st.k, st.at(p + "self_attn.k_proj.bias").reshape({1, Hkv * D}), st.k);
    ops.add(s, st.v, st.at(p + "self_attn.v_proj.bias").reshape({1, Hkv * D}), st.v);
  }
  const auto theta = float(m.rope_theta);
  const Tensor q3 = st.q.view().reshape({1, Hq, D}), k3 = st.k.view().reshape({1, Hkv, D});
  ops.rope(s, q3, st.position, theta, RopeDirection::Forward, q3);
  ops.rope(s, k3, st.position, theta, RopeDirection::Forward, k3);
  const Tensor kc = st.k_cache[size_t(l)], vc = st.v_cache[size_t(l)];
  std::vector<GemmProblem> qk, pv;
  for (int64_t h = 0; h < Hkv; ++h) {  // this position's row of each kv head's cache
    const int64_t row = (h * m.seq_len + pos_) * D;
    ops.cast(s, st.k.view().view_elems(h * D, {D}), kc.view_elems(row, {D}));
    ops.cast(s, st.v.view().view_elems(h * D, {D}), vc.view_elems(row, {D}));
    // Query heads h*G .. h*G+G-1 share kv head h: scores (G, L) = q (G, D) @ K[0:L]^T.
    const Tensor scores_h = st.scores.view().view_elems(h * G * L, {G, L});
    qk.push_back({st.q.view().view_elems(h * G * D, {G, D}),
                  kc.view_elems(h * m.seq_len * D, {L, D}), scores_h});
    pv.push_back({scores_h, vc.view_elems(h * m.seq_len * D, {L, D}),
                  st.att.view().view_elems(h * G * D, {G, D})});
  }
  ops.grouped_gemm(s, qk, Transpose::No, Transpose::Yes, 1.0f / std::sqrt(float(D)), 0.0f);
  const Tensor scores = st.scores.view().view_elems(0, {Hq, L});
  ops.softmax_forward(s, scores, scores);
  ops.grouped_gemm(s, pv, Transpose::No, Transpose::No, 1.0f, 0.0f);
  linear(ops, s, st.att, st.at(p + "self_attn.o_proj.weight"), st.o);
  ops.add(s, st.x, st.o, st.x);
}

void KvGenerator::expert(const std::string& prefix, float weight) {
  swiglu(prefix);
  device_->ops().axpy(device_->default_stream(), weight, st_->y, st_->x);
}

void KvGenerator::swiglu(const std::string& prefix) {
  Ops& ops = device_->ops();
  Stream& s = device_->default_stream();
  State& st = *st_;
  // Dense FFNs and the shared experts use Llama's names, routed experts Mixtral's.
  const bool llama = prefix.ends_with("mlp.") || prefix.ends_with("shared_expert.");
  const Tensor& w1 = st.at(prefix + (llama ? "gate_proj.weight" : "w1.weight"));
  const Tensor& w3 = st.at(prefix + (llama ? "up_proj.weight" : "w3.weight"));
  const Tensor& w2 = st.at(prefix + (llama ? "down_proj.weight" : "w2.weight"));
  const int64_t F = w1.dim(0);
  const Tensor gate = st.gate.view().view_elems(0, {1, F}), up = st.up.view().view_elems(0, {1, F});
  const Tensor hidden = st.hidden.view().view_elems(0, {1, F});
  linear(ops, s, st.xn, w1, gate);
  linear(ops, s, st.xn, w3, up);
  ops.swiglu_forward(s, gate, up, hidden);
  linear(ops, s, hidden, w2, st.y);
}

void KvGenerator::shared_experts(int64_t l) {
  Ops& ops = device_->ops();
  Stream& s = device_->default_stream();
  State& st = *st_;
  const std::string p = "model.layers." + std::to_string(l) + ".block_sparse_moe.shared_expert";
  swiglu(p + ".");
  if (!model_.shared_expert_gate) return ops.axpy(s, 1.0f, st.y, st.x);
  // x += sigmoid(xn . wg) * y, the scalar gate applied on the device: (1,1) @ (1,C).
  linear(ops, s, st.xn, st.at(p + "_gate.weight"), st.shared_gate);
  ops.sigmoid_forward(s, st.shared_gate, st.shared_gate);
  ops.gemm(s, GemmArgs{st.shared_gate, st.y, st.x, Transpose::No, Transpose::No, 1.0f, 1.0f});
}

void KvGenerator::feed_forward(int64_t l) {
  const ModelConfig& m = model_;
  Ops& ops = device_->ops();
  Stream& s = device_->default_stream();
  State& st = *st_;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  ops.rmsnorm_forward(s, st.x, st.at(p + "post_attention_layernorm.weight"), float(m.norm_eps),
                      st.xn, st.rstd);
  if (!model::is_moe_layer(m, int(l))) return expert(p + "mlp.", 1.0f);
  if (m.num_shared_experts > 0) shared_experts(l);
  // The router on the device; the top-k choice on the host (E values), as the Transformer's:
  // softmax, top-k descending with ties to the lower expert, renormalised when normalize_top_k.
  const int64_t E = m.num_experts;
  ops.gemm(s, GemmArgs{st.xn, st.at(p + "block_sparse_moe.gate.weight"), st.probs, Transpose::No,
                       Transpose::Yes, 1.0f, 0.0f});
  ops.softmax_forward(s, st.probs, st.probs);
  Vec probs(size_t(E), 0.0f);
  device_->memcpy_async(probs.data(), st.probs.view().data(), size_t(E) * sizeof(float), s);
  s.synchronize();  // host sync: the experts to run depend on the probabilities
  std::vector<int64_t> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return probs[size_t(a)] > probs[size_t(b)]; });
  float chosen = 0.0f;
  for (int64_t j = 0; j < m.top_k; ++j) chosen += probs[size_t(order[size_t(j)])];
  for (int64_t j = 0; j < m.top_k; ++j) {
    const int64_t e = order[size_t(j)];
    expert(p + "block_sparse_moe.experts." + std::to_string(e) + ".",
           probs[size_t(e)] / (normalize_top_k_ ? chosen : 1.0f));
  }
}

const std::vector<float>& KvGenerator::feed(int32_t token) {
  const ModelConfig& m = model_;
  MOEZERO_REQUIRE(pos_ < m.seq_len, "generate: the context is full (model.seq_len = ", m.seq_len,
                  " tokens)");
  MOEZERO_REQUIRE(token >= 0 && token < m.vocab_size, "generate: token ", token,
                  " outside the vocabulary (", m.vocab_size, ")");
  Ops& ops = device_->ops();
  Stream& s = device_->default_stream();
  State& st = *st_;
  st.host_token = token;
  st.host_position = int32_t(pos_);
  device_->memcpy_async(st.token.view().data(), &st.host_token, sizeof(int32_t), s);
  device_->memcpy_async(st.position.view().data(), &st.host_position, sizeof(int32_t), s);
  ops.embedding_forward(s, st.token, st.at("model.embed_tokens.weight"), st.x);
  for (int64_t l = 0; l < m.n_layers; ++l) {
    attention(l);
    feed_forward(l);
  }
  ops.rmsnorm_forward(s, st.x, st.at("model.norm.weight"), float(m.norm_eps), st.xn, st.rstd);
  linear(ops, s, st.xn, st.at("lm_head.weight"), st.logits);
  logits_.resize(size_t(m.vocab_size));
  device_->memcpy_async(logits_.data(), st.logits.view().data(), logits_.size() * sizeof(float), s);
  s.synchronize();  // host sync: the logits are read by the sampler
  ++pos_;
  return logits_;
}

int32_t sample_token(const std::vector<float>& logits, const Sampling& s, std::mt19937_64& rng) {
  const int64_t V = int64_t(logits.size());
  if (s.temperature <= 0.0)
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  const double top = logits[size_t(ids[0])];
  std::vector<double> p(static_cast<size_t>(V));
  double sum = 0.0;
  for (int64_t i = 0; i < V; ++i)
    sum += (p[size_t(i)] = std::exp((logits[size_t(ids[size_t(i)])] - top) / s.temperature));
  int64_t keep = s.top_k > 0 ? std::min(s.top_k, V) : V;
  if (s.top_p < 1.0) {  // the smallest prefix (most likely first) reaching top_p
    double cum = 0.0;
    for (int64_t i = 0; i < keep; ++i)
      if ((cum += p[size_t(i)] / sum) >= s.top_p) {
        keep = i + 1;
        break;
      }
  }
  double kept = 0.0;
  for (int64_t i = 0; i < keep; ++i) kept += p[size_t(i)];
  const double u = double(rng() >> 11) * 0x1.0p-53 * kept;  // uniform in [0, kept)
  double cum = 0.0;
  for (int64_t i = 0; i < keep; ++i)
    if ((cum += p[size_t(i)]) > u) return ids[size_t(i)];
  return ids[size_t(keep - 1)];
}

std::vector<int32_t> generate(KvGenerator& gen, const std::vector<int32_t>& prompt,
                              int64_t max_new_tokens, const Sampling& s, int32_t eos) {
  const int64_t ctx = gen.model().seq_len;
  MOEZERO_REQUIRE(!prompt.empty(), "generate: the prompt is empty (it needs at least one token)");
  MOEZERO_REQUIRE(int64_t(prompt.size()) <= ctx, "generate: the prompt has ", prompt.size(),
                  " tokens, longer than the context (model.seq_len = ", ctx, ")");
  gen.reset();
  std::mt19937_64 rng(s.seed);
  const std::vector<float>* logits = nullptr;
  for (int32_t t : prompt) logits = &gen.feed(t);
  std::vector<int32_t> out;
  while (int64_t(out.size()) < max_new_tokens) {
    // A NaN or infinite logit samples nonsense (argmax of NaNs is token 0): refused instead.
    for (size_t v = 0; v < logits->size(); ++v)
      if (!std::isfinite((*logits)[v]))
        MOEZERO_USER_ERROR("generate: the model's output at position ", gen.position(),
                           " is not finite (logit of token ", v, " is ", (*logits)[v],
                           "): the weights or the computation overflow");
    const int32_t next = sample_token(*logits, s, rng);
    out.push_back(next);
    if (next == eos || gen.position() >= ctx) break;
    logits = &gen.feed(next);
  }
  return out;
}

}  // namespace moezero::hf
