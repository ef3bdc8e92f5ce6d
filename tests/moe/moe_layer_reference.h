// tests/moe/moe_layer_reference.h — the float64 reference of the MoE FFN sub-layer
// (moe/moe_layer.h) over the GLOBAL batch of all ranks, for tests/moe/moe_layer_test.cpp.
// Written naively from the definitions in moe/moe_layer.h and moe/router.h:
//   xn = rmsnorm(h) · g;  logits = xn Wg^T;  scores s = probs = softmax (sigmoid: s = sigmoid,
//   probs = s / Σ s);  top-k of s (ties: lower expert index);
//   w = s / Σ_chosen s (normalize_top_k) or s;  capacity per RANK (its own N tokens):
//   cap = max(1, ceil(k·N·f/E · (1 - 1e-6))), per expert keep the cap assignments of highest
//   probability (ties: lower token index kept), dropped: weight 0;
//   out = h + Σ_j w_j · W2 (silu(W1 xn) ⊙ W3 xn) [+ S2 (silu(S1 xn) ⊙ S3 xn): shared experts];
//   L = Σ c·out + aux_coef · E Σ_e F_e P_e + z_coef · (1/N_g) Σ_t lse_t²,
//   F_e = top-k selections of e (before drops) / N_g, P_e = Σ_t probs[t, e] / N_g.
// Gradients: central finite differences with the routing (top-k choices, drops, F) held fixed at
// the base point — the constants of the smooth piece the layer differentiates (router.h: F is a
// constant for the gradient). With F fixed, L = Σ_t ℓ_t is a sum of per-token terms, so the
// difference quotient of one input only re-evaluates the tokens that input reaches.
// route() also reports the routing margins (top-k gap, capacity boundary gap) so that callers
// resample tokens whose choice f32 could make differently.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace moezero::test::moe_ref {

using Vec = std::vector<double>;

struct Spec {
  int ranks = 4;
  int64_t n = 8;  // tokens per rank
  int64_t c = 8, f = 12, e = 8, k = 2;
  int64_t fs = 0;            // shared experts' summed width (0: none)
  bool shared_gate = false;  // model.shared_expert_gate: shared output · sigmoid(xn · sg)
  double norm_eps = 1e-5;
  bool normalize = true;
  bool sigmoid = false;  // moe.score_function = sigmoid
  double aux_coef = 0.0, z_coef = 0.0, capacity_factor = 0.0;
  int64_t tokens() const { return ranks * n; }
};

struct Weights {
  Vec norm, gate;               // (C), (E, C)
  std::vector<Vec> w1, w2, w3;  // per expert: (F, C) gate, (C, F) down, (F, C) up
  Vec s1, s2, s3;               // shared experts: (Fs, C) gate, (C, Fs) down, (Fs, C) up
  Vec sg;                       // (C) the shared experts' sigmoid gate (shared_gate)
};

// y (C) = S2 (silu(S1 x) ⊙ S3 x), the shared experts as one SwiGLU of width Fs.
inline Vec shared_forward(const Spec& s, const Weights& w, const Vec& x) {
  Vec y(static_cast<size_t>(s.c), 0.0);
  for (int64_t o = 0; o < s.fs; ++o) {
    double g = 0.0, u = 0.0;
    for (int64_t i = 0; i < s.c; ++i) {
      g += w.s1[o * s.c + i] * x[i];
      u += w.s3[o * s.c + i] * x[i];
    }
    const double a = g / (1.0 + std::exp(-g)) * u;
    for (int64_t i = 0; i < s.c; ++i) y[i] += w.s2[i * s.fs + o] * a;
  }
  if (s.shared_gate) {
    double l = 0.0;
    for (int64_t i = 0; i < s.c; ++i) l += w.sg[i] * x[i];
    for (double& v : y) v /= 1.0 + std::exp(-l);
  }
  return y;
}

struct Routing {
  std::vector<int> ids, kept;  // (N_g * k): choices before / after capacity (-1 dropped)
  Vec selected, kept_count;    // (E): global selections before drops, kept assignments
  int dropped = 0;
  std::vector<int64_t> bad_tokens;  // tokens whose choice is within `margin` of a tie
};

inline int64_t capacity(const Spec& s) {
  if (s.capacity_factor <= 0.0) return 0;
  const double exact =
      static_cast<double>(s.k * s.n) * s.capacity_factor / static_cast<double>(s.e);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(exact * (1.0 - 1e-6))));
}

struct TokenFwd {
  Vec xn, probs, scores;  // (C), (E), (E): probs = scores for softmax
  double lse = 0.0;
};

inline TokenFwd token_forward(const Spec& s, const Weights& w, const double* h) {
  TokenFwd r;
  double ss = 0.0;
  for (int64_t i = 0; i < s.c; ++i) ss += h[i] * h[i];
  const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(s.c) + s.norm_eps);
  r.xn.resize(static_cast<size_t>(s.c));
  for (int64_t i = 0; i < s.c; ++i) r.xn[i] = h[i] * rstd * w.norm[i];
  Vec l(static_cast<size_t>(s.e), 0.0);
  for (int64_t e = 0; e < s.e; ++e)
    for (int64_t i = 0; i < s.c; ++i) l[e] += r.xn[i] * w.gate[e * s.c + i];
  const double m = *std::max_element(l.begin(), l.end());
  double sum = 0.0;
  for (double v : l) sum += std::exp(v - m);
  r.lse = m + std::log(sum);
  r.probs.resize(static_cast<size_t>(s.e));
  for (int64_t e = 0; e < s.e; ++e) r.probs[e] = std::exp(l[e] - r.lse);
  r.scores = r.probs;
  if (s.sigmoid) {
    double ssum = 0.0;
    for (int64_t e = 0; e < s.e; ++e) ssum += r.scores[e] = 1.0 / (1.0 + std::exp(-l[e]));
    for (int64_t e = 0; e < s.e; ++e) r.probs[e] = r.scores[e] / ssum;
  }
  return r;
}

// y (C) = W2 (silu(W1 x) ⊙ W3 x).
inline Vec expert_forward(const Spec& s, const Weights& w, int e, const Vec& x) {
  Vec y(static_cast<size_t>(s.c), 0.0);
  for (int64_t o = 0; o < s.f; ++o) {
    double g = 0.0, u = 0.0;
    for (int64_t i = 0; i < s.c; ++i) {
      g += w.w1[e][o * s.c + i] * x[i];
      u += w.w3[e][o * s.c + i] * x[i];
    }
    const double a = g / (1.0 + std::exp(-g)) * u;
    for (int64_t i = 0; i < s.c; ++i) y[i] += w.w2[e][i * s.f + o] * a;
  }
  return y;
}

// The routing of all N_g tokens (h: (N_g, C)); tokens within `margin` (probability) of a top-k
// tie or of a capacity boundary tie are listed in bad_tokens.
inline Routing route(const Spec& s, const Weights& w, const Vec& h, double margin) {
  const int64_t Ng = s.tokens(), k = s.k, E = s.e;
  Routing r;
  r.selected.assign(static_cast<size_t>(E), 0.0);
  r.kept_count.assign(static_cast<size_t>(E), 0.0);
  std::vector<double> p_of(static_cast<size_t>(Ng * k));
  for (int64_t t = 0; t < Ng; ++t) {
    const TokenFwd f = token_forward(s, w, &h[t * s.c]);
    std::vector<int> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return f.scores[a] > f.scores[b]; });
    for (int64_t j = 0; j < k; ++j) {
      r.ids.push_back(order[j]);
      p_of[t * k + j] = f.scores[order[j]];
      r.selected[order[j]] += 1.0;
    }
    bool bad = false;
    for (int64_t j = 0; j + 1 < E && j < k; ++j)  // gaps inside the top-k and at its boundary
      bad |= f.scores[order[j]] - f.scores[order[j + 1]] < margin;
    if (bad) r.bad_tokens.push_back(t);
  }
  r.kept = r.ids;
  const int64_t cap = capacity(s);
  if (cap > 0) {
    for (int rank = 0; rank < s.ranks; ++rank) {
      const int64_t a0 = rank * s.n * k, a1 = (rank + 1) * s.n * k;
      for (int64_t e = 0; e < E; ++e) {
        std::vector<int64_t> as;
        for (int64_t a = a0; a < a1; ++a)
          if (r.ids[a] == e) as.push_back(a);
        std::stable_sort(as.begin(), as.end(),
                         [&](int64_t a, int64_t b) { return p_of[a] > p_of[b]; });
        if (static_cast<int64_t>(as.size()) <= cap) continue;
        if (p_of[as[cap - 1]] - p_of[as[cap]] < margin) r.bad_tokens.push_back(as[cap] / k);
        for (size_t i = static_cast<size_t>(cap); i < as.size(); ++i) {
          r.kept[as[i]] = -1;
          ++r.dropped;
        }
      }
    }
  }
  for (int a : r.kept)
    if (a >= 0) r.kept_count[a] += 1.0;
  std::sort(r.bad_tokens.begin(), r.bad_tokens.end());
  r.bad_tokens.erase(std::unique(r.bad_tokens.begin(), r.bad_tokens.end()), r.bad_tokens.end());
  return r;
}

// ℓ_t with the routing fixed: c_t·out_t + aux_coef·E·Σ_e F_e probs_te / N_g + z_coef·lse²/N_g.
// [out] out (C) when non-null; [out] aux_part: E Σ_e F_e probs_te / N_g (Σ_t = aux).
inline double token_loss(const Spec& s, const Weights& w, const Routing& r, int64_t t,
                         const double* h, const double* c, double* out = nullptr,
                         double* aux_part = nullptr, double* z_part = nullptr) {
  const double Ng = static_cast<double>(s.tokens());
  const TokenFwd f = token_forward(s, w, h);
  double chosen = 0.0;
  for (int64_t j = 0; j < s.k; ++j) chosen += f.scores[r.ids[t * s.k + j]];
  Vec o(h, h + s.c);
  for (int64_t j = 0; j < s.k; ++j) {
    const int e = r.kept[t * s.k + j];
    if (e < 0) continue;
    const double wj = s.normalize ? f.scores[e] / chosen : f.scores[e];
    const Vec y = expert_forward(s, w, e, f.xn);
    for (int64_t i = 0; i < s.c; ++i) o[i] += wj * y[i];
  }
  if (s.fs > 0) {
    const Vec y = shared_forward(s, w, f.xn);
    for (int64_t i = 0; i < s.c; ++i) o[i] += y[i];
  }
  double l = 0.0, aux = 0.0;
  for (int64_t i = 0; i < s.c; ++i) l += c[i] * o[i];
  for (int64_t e = 0; e < s.e; ++e)
    aux += static_cast<double>(s.e) * (r.selected[e] / Ng) * f.probs[e] / Ng;
  const double z = f.lse * f.lse / Ng;
  if (out) std::copy(o.begin(), o.end(), out);
  if (aux_part) *aux_part = aux;
  if (z_part) *z_part = z;
  return l + s.aux_coef * aux + s.z_coef * z;
}

struct Result {
  Vec out;  // (N_g, C)
  double aux = 0.0, z = 0.0, loss = 0.0;
  Vec dh;            // (N_g, C)
  Vec dnorm, dgate;  // (C), (E, C)
  std::vector<Vec> dw1, dw2, dw3;
  Vec ds1, ds2, ds3, dsg;  // shared experts
};

// Forward values and finite-difference gradients of L at (w, h) with the routing r.
inline Result evaluate(const Spec& s, Weights w, Vec h, const Vec& c, const Routing& r,
                       double eps = 1e-6) {
  const int64_t Ng = s.tokens(), C = s.c;
  Result res;
  res.out.assign(static_cast<size_t>(Ng * C), 0.0);
  for (int64_t t = 0; t < Ng; ++t) {
    double a = 0.0, z = 0.0;
    res.loss += token_loss(s, w, r, t, &h[t * C], &c[t * C], &res.out[t * C], &a, &z);
    res.aux += a;
    res.z += z;
  }
  auto sum_loss = [&](const std::vector<int64_t>& tokens) {
    double l = 0.0;
    for (int64_t t : tokens) l += token_loss(s, w, r, t, &h[t * C], &c[t * C]);
    return l;
  };
  auto fd = [&](double& x, const std::vector<int64_t>& tokens) {
    const double x0 = x;
    x = x0 + eps;
    const double lp = sum_loss(tokens);
    x = x0 - eps;
    const double lm = sum_loss(tokens);
    x = x0;
    return (lp - lm) / (2.0 * eps);
  };
  std::vector<int64_t> all(static_cast<size_t>(Ng));
  std::iota(all.begin(), all.end(), int64_t{0});
  res.dh.assign(h.size(), 0.0);
  for (int64_t t = 0; t < Ng; ++t)
    for (int64_t i = 0; i < C; ++i) res.dh[t * C + i] = fd(h[t * C + i], {t});
  for (double& x : w.norm) res.dnorm.push_back(fd(x, all));
  for (double& x : w.gate) res.dgate.push_back(fd(x, all));
  for (double& x : w.s1) res.ds1.push_back(fd(x, all));
  for (double& x : w.s2) res.ds2.push_back(fd(x, all));
  for (double& x : w.s3) res.ds3.push_back(fd(x, all));
  for (double& x : w.sg) res.dsg.push_back(fd(x, all));
  for (int e = 0; e < static_cast<int>(s.e); ++e) {
    std::vector<int64_t> users;  // only the tokens that kept e depend on its weights
    for (int64_t t = 0; t < Ng; ++t)
      for (int64_t j = 0; j < s.k; ++j)
        if (r.kept[t * s.k + j] == e) users.push_back(t);
    res.dw1.emplace_back();
    res.dw2.emplace_back();
    res.dw3.emplace_back();
    for (double& x : w.w1[e]) res.dw1.back().push_back(fd(x, users));
    for (double& x : w.w2[e]) res.dw2.back().push_back(fd(x, users));
    for (double& x : w.w3[e]) res.dw3.back().push_back(fd(x, users));
  }
  return res;
}

}  // namespace moezero::test::moe_ref
