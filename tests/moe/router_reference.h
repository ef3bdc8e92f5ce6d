// tests/moe/router_reference.h — the float64 reference of the router (moe/router.h) for
// tests/moe/router_test.cpp: a loop over tokens, the definitions of router.h written out.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "moe/router.h"

namespace moezero::test {

using Vec = std::vector<double>;

struct Ref {
  std::vector<int> ids, kept_ids;  // (N*k): choices before dropping; after (-1 = dropped)
  Vec probs, scores, w, stats;     // (N, E), (N, E), (N, k) after dropping, (3E)
  double aux = 0.0, z = 0.0;
};

struct Problem {
  int64_t n = 0, c = 0;
  moe::RouterConfig cfg;
  Vec noise;  // (N, C) jitter factors, empty: none
  Vec bias;   // (E) selection bias, empty: none
};

inline Ref reference(const Problem& p, const Vec& x, const Vec& wg, const Ref* fixed, int64_t cap) {
  const int64_t E = p.cfg.num_experts, k = p.cfg.top_k, N = p.n, C = p.c;
  Ref r;
  const bool sigmoid = p.cfg.score == ScoreFunction::Sigmoid;
  r.probs.assign(static_cast<size_t>(N * E), 0.0);
  r.scores.assign(static_cast<size_t>(N * E), 0.0);
  r.stats.assign(static_cast<size_t>(3 * E), 0.0);
  Vec w_pre(static_cast<size_t>(N * k));
  for (int64_t t = 0; t < N; ++t) {
    Vec l(static_cast<size_t>(E), 0.0);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t ch = 0; ch < C; ++ch) {
        const size_t i = static_cast<size_t>(t * C + ch);
        l[e] += x[i] * (p.noise.empty() ? 1.0 : p.noise[i]) * wg[static_cast<size_t>(e * C + ch)];
      }
    const double m = *std::max_element(l.begin(), l.end());
    double sum = 0.0;
    for (double v : l) sum += std::exp(v - m);
    const double lse = m + std::log(sum);
    r.z += lse * lse;
    double* sc = &r.scores[t * E];  // softmax: the probabilities; sigmoid: sigmoid(l)
    double ssum = 0.0;
    for (int64_t e = 0; e < E; ++e) {
      sc[e] = sigmoid ? 1.0 / (1.0 + std::exp(-l[e])) : std::exp(l[e] - lse);
      ssum += sc[e];
    }
    for (int64_t e = 0; e < E; ++e) r.probs[t * E + e] = sigmoid ? sc[e] / ssum : sc[e];
    auto biased = [&](int e) { return sc[e] + (p.bias.empty() ? 0.0 : p.bias[e]); };
    std::vector<int> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return biased(a) > biased(b); });
    double chosen = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      const int e = fixed ? fixed->ids[t * k + j] : order[j];
      r.ids.push_back(e);
      chosen += sc[e];
    }
    for (int64_t j = 0; j < k; ++j) {
      const double pj = sc[r.ids[t * k + j]];
      w_pre[t * k + j] = p.cfg.normalize_top_k ? pj / chosen : pj;
    }
  }
  r.kept_ids = r.ids;
  if (fixed) {
    r.kept_ids = fixed->kept_ids;
  } else if (cap > 0) {
    for (int64_t e = 0; e < E; ++e) {
      std::vector<int64_t> as;
      for (int64_t a = 0; a < N * k; ++a)
        if (r.ids[a] == e) as.push_back(a);
      std::stable_sort(as.begin(), as.end(), [&](int64_t a, int64_t b) {
        return r.scores[(a / k) * E + e] > r.scores[(b / k) * E + e];
      });
      for (size_t i = static_cast<size_t>(cap); i < as.size(); ++i) r.kept_ids[as[i]] = -1;
    }
  }
  for (int64_t a = 0; a < N * k; ++a) {
    r.w.push_back(r.kept_ids[a] == -1 ? 0.0 : w_pre[a]);
    r.stats[r.ids[a]] += 1.0;
    if (r.kept_ids[a] != -1) r.stats[E + r.kept_ids[a]] += 1.0;
  }
  for (int64_t t = 0; t < N; ++t)
    for (int64_t e = 0; e < E; ++e) r.stats[2 * E + e] += r.probs[t * E + e];
  for (int64_t e = 0; e < E; ++e) r.aux += E * (r.stats[e] / N) * (r.stats[2 * E + e] / N);
  r.z /= static_cast<double>(N);
  return r;
}

inline double ref_loss(const Problem& p, const Vec& x, const Vec& wg, const Ref& fixed,
                       const Vec& c, double scale) {
  const Ref r = reference(p, x, wg, &fixed, 0);
  double l = 0.0;
  for (size_t a = 0; a < c.size(); ++a) l += c[a] * r.w[a];
  return l + scale * (p.cfg.aux_coef * r.aux + p.cfg.z_coef * r.z);
}

}  // namespace moezero::test
