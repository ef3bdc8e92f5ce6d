// tests/model/reference_model.h — an independent float64 reference of the transformer's loss,
// written naively (plain loops) straight from the definition in model/transformer.h.
// Weights are looked up by their Hugging Face name; the oracle of the model tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"

namespace moezero::test {

using RefWeights = std::map<std::string, std::vector<double>>;

namespace ref_detail {
using Mat = std::vector<double>;  // row-major

inline const Mat& w(const RefWeights& ws, const std::string& name) {
  auto it = ws.find(name);
  MOEZERO_CHECK(it != ws.end(), "reference: no weight ", name);
  return it->second;
}
// y (R, out) = x (R, in) W^T, W (out, in).
inline Mat linear(const Mat& x, const Mat& wt, int64_t rows, int64_t in, int64_t out) {
  Mat y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0.0;
      for (int64_t i = 0; i < in; ++i) acc += x[r * in + i] * wt[o * in + i];
      y[r * out + o] = acc;
    }
  return y;
}
inline Mat rmsnorm(const Mat& x, const Mat& g, int64_t rows, int64_t c, double eps) {
  Mat y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < c; ++i) ss += x[r * c + i] * x[r * c + i];
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(c) + eps);
    for (int64_t i = 0; i < c; ++i) y[r * c + i] = x[r * c + i] * rstd * g[i];
  }
  return y;
}
// In place on (B*T, H, D), position t within each sequence of length T.
inline void rope(Mat& x, int64_t rows, int64_t seq, int64_t heads, int64_t d, double base) {
  for (int64_t r = 0; r < rows; ++r) {
    const double pos = static_cast<double>(r % seq);
    for (int64_t h = 0; h < heads; ++h) {
      double* u = &x[(r * heads + h) * d];
      for (int64_t i = 0; i < d / 2; ++i) {
        const double th =
            pos * std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
        const double a = u[i], b = u[i + d / 2];
        u[i] = a * std::cos(th) - b * std::sin(th);
        u[i + d / 2] = b * std::cos(th) + a * std::sin(th);
      }
    }
  }
}
}  // namespace ref_detail

// loss_scale * sum over tokens with target != -1 of cross-entropy; tokens/targets (B*T).
inline double reference_loss(const ModelConfig& cfg, const RefWeights& ws,
                             const std::vector<int32_t>& tokens,
                             const std::vector<int32_t>& targets, int64_t batch, int64_t seq,
                             double loss_scale) {
  using namespace ref_detail;
  const int64_t R = batch * seq, C = cfg.d_model, V = cfg.vocab_size, F = cfg.d_ff;
  const int64_t Hq = cfg.n_heads, Hkv = cfg.n_kv_heads, D = C / Hq, group = Hq / Hkv;
  const double eps = cfg.norm_eps;

  Mat x(static_cast<size_t>(R * C));
  const Mat& emb = w(ws, "model.embed_tokens.weight");
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) x[r * C + c] = emb[tokens[r] * C + c];

  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    // Attention half.
    const Mat xn = rmsnorm(x, w(ws, p + "input_layernorm.weight"), R, C, eps);
    Mat q = linear(xn, w(ws, p + "self_attn.q_proj.weight"), R, C, Hq * D);
    Mat k = linear(xn, w(ws, p + "self_attn.k_proj.weight"), R, C, Hkv * D);
    Mat v = linear(xn, w(ws, p + "self_attn.v_proj.weight"), R, C, Hkv * D);
    if (cfg.qkv_bias) {  // Qwen2: q/k/v biases, before RoPE
      auto add_bias = [&](Mat& y, const std::string& name, int64_t out) {
        const Mat& b = w(ws, p + name);
        for (int64_t r = 0; r < R; ++r)
          for (int64_t o = 0; o < out; ++o) y[r * out + o] += b[o];
      };
      add_bias(q, "self_attn.q_proj.bias", Hq * D);
      add_bias(k, "self_attn.k_proj.bias", Hkv * D);
      add_bias(v, "self_attn.v_proj.bias", Hkv * D);
    }
    rope(q, R, seq, Hq, D, cfg.rope_theta);
    rope(k, R, seq, Hkv, D, cfg.rope_theta);
    Mat att(static_cast<size_t>(R * Hq * D), 0.0);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kh = h / group;
        for (int64_t t = 0; t < seq; ++t) {
          const double* qi = &q[((b * seq + t) * Hq + h) * D];
          std::vector<double> sc(static_cast<size_t>(t + 1));
          double mx = -1e300;
          for (int64_t j = 0; j <= t; ++j) {
            const double* kj = &k[((b * seq + j) * Hkv + kh) * D];
            double dot = 0.0;
            for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
            sc[j] = dot / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, sc[j]);
          }
          double z = 0.0;
          for (double& e : sc) z += (e = std::exp(e - mx));
          double* o = &att[((b * seq + t) * Hq + h) * D];
          for (int64_t j = 0; j <= t; ++j) {
            const double* vj = &v[((b * seq + j) * Hkv + kh) * D];
            for (int64_t d = 0; d < D; ++d) o[d] += sc[j] / z * vj[d];
          }
        }
      }
    const Mat o = linear(att, w(ws, p + "self_attn.o_proj.weight"), R, Hq * D, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    // FFN half (dense SwiGLU).
    const Mat hn = rmsnorm(x, w(ws, p + "post_attention_layernorm.weight"), R, C, eps);
    const Mat g = linear(hn, w(ws, p + "mlp.gate_proj.weight"), R, C, F);
    const Mat u = linear(hn, w(ws, p + "mlp.up_proj.weight"), R, C, F);
    Mat a(g.size());
    for (size_t i = 0; i < g.size(); ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    const Mat y = linear(a, w(ws, p + "mlp.down_proj.weight"), R, F, C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }

  const Mat xn = rmsnorm(x, w(ws, "model.norm.weight"), R, C, eps);
  const Mat logits = linear(xn, w(ws, "lm_head.weight"), R, C, V);
  double loss = 0.0;
  for (int64_t r = 0; r < R; ++r) {
    if (targets[r] == -1) continue;
    double mx = -1e300;
    for (int64_t j = 0; j < V; ++j) mx = std::max(mx, logits[r * V + j]);
    double z = 0.0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(logits[r * V + j] - mx);
    loss += (mx + std::log(z) - logits[r * V + targets[r]]) * loss_scale;
  }
  return loss;
}

}  // namespace moezero::test
