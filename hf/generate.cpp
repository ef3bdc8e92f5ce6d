// hf/generate.cpp — KV-cache forward and sampling (generate.h).
#include "hf/generate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "core/error.h"
#include "core/param_group.h"
#include "model/transformer.h"

namespace moezero::moe {

namespace {

using Vec = std::vector<float>;

// y (out) = W (out, in) x (in).
void matvec(const float* W, const float* x, int64_t out, int64_t in, float* y) {
  for (int64_t o = 0; o < out; ++o) {
    const float* row = W + o * in;
    float acc = 0.0f;
    for (int64_t i = 0; i < in; ++i) acc += row[i] * x[i];
    y[o] = acc;
  }
}

Vec rmsnorm(const Vec& x, const float* w, double eps) {
  double ss = 0.0;
  for (float v : x) ss += double(v) * v;
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / double(x.size()) + eps));
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

float silu(float z) { return z / (1.0f + std::exp(-z)); }

// HF rotate-half RoPE of `heads` heads of size D at position pos, in place.
void rope(float* u, int64_t heads, int64_t D, int64_t pos, double theta) {
  for (int64_t h = 0; h < heads; ++h) {
    float* v = u + h * D;
    for (int64_t i = 0; i < D / 2; ++i) {
      const double ang = double(pos) * std::pow(theta, -2.0 * double(i) / double(D));
      const float c = static_cast<float>(std::cos(ang)), s = static_cast<float>(std::sin(ang));
      const float a = v[i], b = v[i + D / 2];
      v[i] = a * c - b * s;
      v[i + D / 2] = b * c + a * s;
    }
  }
}

}  // namespace

// Every parameter by its Hugging Face name, pointing into the groups' values.
struct KvGenerator::Weights {
  std::vector<Vec> storage;
  std::map<std::string, const float*> by_name;
  const float* at(const std::string& name) const {
    auto it = by_name.find(name);
    MOEZERO_CHECK(it != by_name.end(), "generate: no parameter ", name);
    return it->second;
  }
};

KvGenerator::KvGenerator(const ModelConfig& model, bool normalize_top_k,
                         const std::vector<GroupValues>& groups)
    : model_(model), normalize_top_k_(normalize_top_k), w_(std::make_unique<Weights>()) {
  std::map<std::string, const GroupValues*> values;
  for (const GroupValues& g : groups) values[g.name] = &g;
  w_->storage.reserve(groups.size());
  for (const GroupSpec& spec : full_param_groups(model)) {
    auto it = values.find(spec.name);
    MOEZERO_REQUIRE(it != values.end(), "generate: parameter group '", spec.name, "' is missing");
    const GroupLayout layout(spec);
    MOEZERO_REQUIRE(int64_t(it->second->data.size()) == layout.numel(), "generate: group '",
                    spec.name, "' has ", it->second->data.size(), " values, expected ",
                    layout.numel());
    w_->storage.push_back(it->second->data);
    for (size_t i = 0; i < spec.params.size(); ++i)
      w_->by_name[spec.params[i].name] = w_->storage.back().data() + layout.offset(i);
  }
  reset();
}

KvGenerator::~KvGenerator() = default;

void KvGenerator::reset() {
  const int64_t kv = model_.n_kv_heads * (model_.d_model / model_.n_heads);
  k_cache_.assign(size_t(model_.n_layers), Vec(size_t(model_.seq_len * kv)));
  v_cache_.assign(size_t(model_.n_layers), Vec(size_t(model_.seq_len * kv)));
  pos_ = 0;
}

const std::vector<float>& KvGenerator::feed(int32_t token) {
  const ModelConfig& m = model_;
  MOEZERO_REQUIRE(pos_ < m.seq_len, "generate: the context is full (model.seq_len = ", m.seq_len,
                  " tokens)");
  MOEZERO_REQUIRE(token >= 0 && token < m.vocab_size, "generate: token ", token,
                  " outside the vocabulary (", m.vocab_size, ")");
  const int64_t C = m.d_model, Hq = m.n_heads, Hkv = m.n_kv_heads, D = C / Hq;
  const int64_t KV = Hkv * D;
  // SwiGLU widths: dense layers, routed experts, the shared experts as one (their sum).
  const int64_t Fs =
      m.num_shared_experts * (m.shared_expert_d_ff > 0 ? m.shared_expert_d_ff : m.expert_width());
  const int64_t F = std::max({m.d_ff, m.expert_width(), Fs});
  const float* emb = w_->at("model.embed_tokens.weight") + int64_t(token) * C;
  const auto HD = static_cast<size_t>(Hq * D);
  Vec x(emb, emb + C), q(HD), att(HD), o(static_cast<size_t>(C));
  Vec gate(static_cast<size_t>(F)), up(static_cast<size_t>(F)), y(static_cast<size_t>(C));
  for (int64_t l = 0; l < m.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    // Attention at position pos_.
    Vec xn = rmsnorm(x, w_->at(p + "input_layernorm.weight"), m.norm_eps);
    float* k = k_cache_[size_t(l)].data() + pos_ * KV;
    float* v = v_cache_[size_t(l)].data() + pos_ * KV;
    matvec(w_->at(p + "self_attn.q_proj.weight"), xn.data(), Hq * D, C, q.data());
    matvec(w_->at(p + "self_attn.k_proj.weight"), xn.data(), KV, C, k);
    matvec(w_->at(p + "self_attn.v_proj.weight"), xn.data(), KV, C, v);
    if (m.qkv_bias) {  // Qwen2: before RoPE
      auto add = [](float* y, const float* b, int64_t n) {
        for (int64_t i = 0; i < n; ++i) y[i] += b[i];
      };
      add(q.data(), w_->at(p + "self_attn.q_proj.bias"), Hq * D);
      add(k, w_->at(p + "self_attn.k_proj.bias"), KV);
      add(v, w_->at(p + "self_attn.v_proj.bias"), KV);
    }
    rope(q.data(), Hq, D, pos_, m.rope_theta);
    rope(k, Hkv, D, pos_, m.rope_theta);
    const float scale = 1.0f / std::sqrt(float(D));
    Vec score(static_cast<size_t>(pos_ + 1));
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kh = h / (Hq / Hkv);
      const float* qh = q.data() + h * D;
      float mx = -INFINITY;
      for (int64_t t = 0; t <= pos_; ++t) {
        const float* kt = k_cache_[size_t(l)].data() + t * KV + kh * D;
        float s = 0.0f;
        for (int64_t d = 0; d < D; ++d) s += qh[d] * kt[d];
        score[size_t(t)] = s * scale;
        mx = std::max(mx, score[size_t(t)]);
      }
      float sum = 0.0f;
      for (float& s : score) sum += (s = std::exp(s - mx));
      float* ah = att.data() + h * D;
      std::fill(ah, ah + D, 0.0f);
      for (int64_t t = 0; t <= pos_; ++t) {
        const float* vt = v_cache_[size_t(l)].data() + t * KV + kh * D;
        const float a = score[size_t(t)] / sum;
        for (int64_t d = 0; d < D; ++d) ah[d] += a * vt[d];
      }
    }
    matvec(w_->at(p + "self_attn.o_proj.weight"), att.data(), C, Hq * D, o.data());
    for (int64_t c = 0; c < C; ++c) x[size_t(c)] += o[size_t(c)];
    // Feed-forward.
    xn = rmsnorm(x, w_->at(p + "post_attention_layernorm.weight"), m.norm_eps);
    // x += weight * w2 (silu(w1 xn) * w3 xn), a SwiGLU of width `width`.
    auto expert = [&](const float* w1, const float* w3, const float* w2, int64_t width,
                      float weight) {
      matvec(w1, xn.data(), width, C, gate.data());
      matvec(w3, xn.data(), width, C, up.data());
      for (int64_t f = 0; f < width; ++f) gate[size_t(f)] = silu(gate[size_t(f)]) * up[size_t(f)];
      matvec(w2, gate.data(), C, width, y.data());
      for (int64_t c = 0; c < C; ++c) x[size_t(c)] += weight * y[size_t(c)];
    };
    if (!is_moe_layer(m, int(l))) {
      expert(w_->at(p + "mlp.gate_proj.weight"), w_->at(p + "mlp.up_proj.weight"),
             w_->at(p + "mlp.down_proj.weight"), m.d_ff, 1.0f);
      continue;
    }
    if (Fs > 0) {  // shared experts (moe/shared_experts.h), optionally gated per token
      const std::string sp = p + "block_sparse_moe.shared_expert";
      float weight = 1.0f;
      if (m.shared_expert_gate) {
        float logit = 0.0f;
        matvec(w_->at(sp + "_gate.weight"), xn.data(), 1, C, &logit);
        weight = 1.0f / (1.0f + std::exp(-logit));
      }
      expert(w_->at(sp + ".gate_proj.weight"), w_->at(sp + ".up_proj.weight"),
             w_->at(sp + ".down_proj.weight"), Fs, weight);
    }
    const int64_t E = m.num_experts;
    Vec probs(static_cast<size_t>(E));
    matvec(w_->at(p + "block_sparse_moe.gate.weight"), xn.data(), E, C, probs.data());
    const float mx = *std::max_element(probs.begin(), probs.end());
    float sum = 0.0f;
    for (float& v2 : probs) sum += (v2 = std::exp(v2 - mx));
    for (float& v2 : probs) v2 /= sum;
    std::vector<int64_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return probs[size_t(a)] > probs[size_t(b)]; });
    float chosen = 0.0f;
    for (int64_t j = 0; j < m.top_k; ++j) chosen += probs[size_t(order[size_t(j)])];
    for (int64_t j = 0; j < m.top_k; ++j) {
      const int64_t e = order[size_t(j)];
      const std::string ep = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
      const float wgt = probs[size_t(e)] / (normalize_top_k_ ? chosen : 1.0f);
      expert(w_->at(ep + "w1.weight"), w_->at(ep + "w3.weight"), w_->at(ep + "w2.weight"),
             m.expert_width(), wgt);
    }
  }
  const Vec xf = rmsnorm(x, w_->at("model.norm.weight"), m.norm_eps);
  logits_.resize(size_t(m.vocab_size));
  matvec(w_->at("lm_head.weight"), xf.data(), m.vocab_size, C, logits_.data());
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
    const int32_t next = sample_token(*logits, s, rng);
    out.push_back(next);
    if (next == eos || gen.position() >= ctx) break;
    logits = &gen.feed(next);
  }
  return out;
}

}  // namespace moezero::moe
