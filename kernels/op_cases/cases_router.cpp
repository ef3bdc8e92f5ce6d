// kernels/op_cases/cases_router.cpp — cases of the row ops of the router and the loss: softmax
// forward/backward, logsumexp, topk, cross-entropy forward/backward, gather_cols and
// scatter_add_cols, sigmoid_forward and normalize_rows.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/op_cases/families.h"

namespace moezero::cases {
namespace {

// Stable softmax / log-sum-exp of row [p, p + c).
double row_lse(const double* p, int64_t c) {
  double mx = -INFINITY, sum = 0.0;
  for (int64_t j = 0; j < c; ++j) mx = std::max(mx, p[j]);
  for (int64_t j = 0; j < c; ++j) sum += std::exp(p[j] - mx);
  return mx + std::log(sum);
}

std::string rc_name(const std::string& op, DType t, int64_t r, int64_t c) {
  return op + " " + dt(t) + " " + shape_text({r, c});
}

// Forward: x -> out. Backward: y (a softmax output, rounded to t), dy -> dx.
OpCase softmax_case(SizeClass size, DType t, int64_t r, int64_t c, bool backward) {
  OpCase k;
  k.op = backward ? "softmax_backward" : "softmax_forward";
  k.size = size;
  k.name = rc_name(k.op, t, r, c);
  const Shape sh{r, c};
  k.tensors = {{backward ? "y" : "x", t, sh}};
  if (backward) k.tensors.push_back({"dy", t, sh});
  k.tensors.push_back({backward ? "dx" : "out", t, sh, Role::Out});
  // Probabilities <= 1: f32 error ~ C fp32 terms of the denominator, relative.
  const Tol st = sum_tol(t, c);
  k.tol = {st.rtol, st.atol / std::sqrt(double(c)), st.why};
  k.flops = (backward ? 4.0 : 5.0) * r * c;
  k.inputs = [=](uint64_t seed) {
    Gen g(seed);
    HostValues v{g.uniform(t, r * c, -5, 5)};
    if (backward) {
      for (int64_t i = 0; i < r; ++i) {
        const double lse = row_lse(&v[0][i * c], c);
        for (int64_t j = 0; j < c; ++j)
          v[0][i * c + j] = round_to(t, std::exp(v[0][i * c + j] - lse));
      }
      v.push_back(g.uniform(t, r * c));
    }
    v.resize(backward ? 3 : 2);
    return v;
  };
  k.reference = [=](HostValues& v) {
    HostValues::value_type& out = v.back();
    out.resize(size_t(r * c));
    for (int64_t i = 0; i < r; ++i) {
      const double* x = &v[0][i * c];
      if (!backward) {
        const double lse = row_lse(x, c);
        for (int64_t j = 0; j < c; ++j) out[i * c + j] = std::exp(x[j] - lse);
        continue;
      }
      const double* dy = &v[1][i * c];
      double dot = 0;
      for (int64_t j = 0; j < c; ++j) dot += dy[j] * x[j];
      for (int64_t j = 0; j < c; ++j) out[i * c + j] = x[j] * (dy[j] - dot);
    }
  };
  k.run = [backward](Ops& ops, Stream& s, std::span<const Tensor> x) {
    if (backward) {
      ops.softmax_backward(s, x[0], x[1], x[2]);
    } else {
      ops.softmax_forward(s, x[0], x[1]);
    }
  };
  return k;
}

// One row shifted by +500 (exp would overflow unshifted).
OpCase logsumexp_case(SizeClass size, int64_t r, int64_t c) {
  OpCase k;
  k.op = "logsumexp";
  k.size = size;
  k.name = rc_name(k.op, DType::F32, r, c);
  k.tensors = {{"x", DType::F32, Shape{r, c}}, {"out", DType::F32, Shape{r}, Role::Out}};
  k.tol = {1e-6 * std::sqrt(double(c)) + 1e-6, 1e-6, "fp32 exp/log of C terms: a few ulps"};
  k.flops = 3.0 * r * c;
  k.inputs = [=](uint64_t seed) {
    HostValues v{Gen(seed).uniform(DType::F32, r * c, -4, 4), {}};
    for (int64_t j = 0; j < c; ++j) v[0][(r - 1) * c + j] += 500.0;
    return v;
  };
  k.reference = [=](HostValues& v) {
    v[1].resize(size_t(r));
    for (int64_t i = 0; i < r; ++i) v[1][i] = row_lse(&v[0][i * c], c);
  };
  k.run = [](Ops& ops, Stream& s, std::span<const Tensor> x) { ops.logsumexp(s, x[0], x[1]); };
  return k;
}

// sigmoid_forward (elementwise) or normalize_rows (one row of zeros: out 0, not NaN).
OpCase sigmoid_case(SizeClass size, int64_t r, int64_t c, bool normalize) {
  OpCase k;
  k.op = normalize ? "normalize_rows" : "sigmoid_forward";
  k.size = size;
  k.name = rc_name(k.op, DType::F32, r, c);
  k.tensors = {{"x", DType::F32, Shape{r, c}}, {"out", DType::F32, Shape{r, c}, Role::Out}};
  k.tol = normalize ? Tol{1e-6 * std::sqrt(double(c)) + 1e-6, 1e-7, "fp32 row sum of C terms"}
                    : Tol{1e-6, 1e-7, "fp32 exp: a few ulps"};
  k.flops = (normalize ? 2.0 : 4.0) * r * c;
  k.inputs = [=](uint64_t seed) {
    HostValues v{Gen(seed).uniform(DType::F32, r * c, normalize ? 0 : -20, normalize ? 1 : 20), {}};
    if (normalize)
      for (int64_t j = 0; j < c; ++j) v[0][j] = 0.0;
    return v;
  };
  k.reference = [=](HostValues& v) {
    v[1].resize(size_t(r * c));
    for (int64_t i = 0; i < r; ++i) {
      const double* x = &v[0][i * c];
      double sum = 0;
      for (int64_t j = 0; j < c; ++j) sum += x[j];
      for (int64_t j = 0; j < c; ++j)
        v[1][i * c + j] = normalize ? (sum != 0 ? x[j] / sum : 0.0) : 1.0 / (1.0 + std::exp(-x[j]));
    }
  };
  k.run = [normalize](Ops& ops, Stream& s, std::span<const Tensor> x) {
    if (normalize) {
      ops.normalize_rows(s, x[0], x[1]);
    } else {
      ops.sigmoid_forward(s, x[0], x[1]);
    }
  };
  return k;
}

// Test size: small integer values, many ties (broken by the lower index).
OpCase topk_case(SizeClass size, int64_t r, int64_t c, int kk) {
  OpCase k;
  k.op = "topk";
  k.size = size;
  k.name = rc_name(k.op, DType::F32, r, c) + " k" + std::to_string(kk);
  k.tensors = {{"x", DType::F32, Shape{r, c}},
               {"values", DType::F32, Shape{r, kk}, Role::Out},
               {"indices", DType::I32, Shape{r, kk}, Role::Out}};
  k.tol = {0.0, 0.0, "a selection: exact"};
  k.inputs = [=](uint64_t seed) {
    Gen g(seed);
    return HostValues{size == kT ? g.ints(r * c, -4, 4) : g.uniform(DType::F32, r * c), {}, {}};
  };
  k.reference = [=](HostValues& v) {
    v[1].resize(size_t(r * kk)), v[2].resize(size_t(r * kk));
    for (int64_t i = 0; i < r; ++i) {
      std::vector<int64_t> order(static_cast<size_t>(c));
      std::iota(order.begin(), order.end(), 0);
      const double* x = &v[0][i * c];
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t a, int64_t b) { return x[a] > x[b]; });
      for (int j = 0; j < kk; ++j)
        v[1][i * kk + j] = x[order[j]], v[2][i * kk + j] = double(order[j]);
    }
  };
  k.run = [kk](Ops& ops, Stream& s, std::span<const Tensor> x) {
    ops.topk(s, x[0], kk, x[1], x[2]);
  };
  return k;
}

// Targets include -1 (ignored) and V - 1.
OpCase cross_entropy_case(SizeClass size, DType t, int64_t n, int64_t v, bool backward) {
  OpCase k;
  k.op = backward ? "cross_entropy_backward" : "cross_entropy_forward";
  k.size = size;
  k.name = rc_name(k.op, t, n, v);
  k.tensors = {{"logits", t, Shape{n, v}}, {"targets", DType::I32, Shape{n}}};
  if (backward) {
    k.tensors.push_back({"dlosses", DType::F32, Shape{n}});
    k.tensors.push_back({"dlogits", t, Shape{n, v}, Role::Out});
    const Tol st = sum_tol(t, v);
    k.tol = {st.rtol, st.atol / std::sqrt(double(v)), st.why};
  } else {
    k.tensors.push_back({"losses", DType::F32, Shape{n}, Role::Out});
    k.tol = {1e-5 * std::sqrt(double(v)), 4e-5, "f32 loss: log of a V-term fp32 sum, |x| <= 4"};
  }
  k.flops = (backward ? 5.0 : 3.0) * n * v;
  k.inputs = [=](uint64_t seed) {
    Gen g(seed);
    HostValues x{g.uniform(t, n * v, -4, 4), g.ints(n, -1, v - 1)};
    x[1][0] = double(v - 1);
    if (n > 1) x[1][1] = -1;
    if (backward) x.push_back(g.uniform(DType::F32, n));
    x.resize(backward ? 4 : 3);
    return x;
  };
  k.reference = [=](HostValues& x) {
    HostValues::value_type& out = x.back();
    out.assign(size_t(backward ? n * v : n), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const auto tg = int64_t(x[1][i]);
      if (tg < 0) continue;
      const double* z = &x[0][i * v];
      const double lse = row_lse(z, v);
      if (!backward) {
        out[i] = lse - z[tg];
        continue;
      }
      for (int64_t j = 0; j < v; ++j) out[i * v + j] = (std::exp(z[j] - lse) - (j == tg)) * x[2][i];
    }
  };
  k.run = [backward](Ops& ops, Stream& s, std::span<const Tensor> x) {
    if (backward) {
      ops.cross_entropy_backward(s, x[0], x[1], x[2], x[3]);
    } else {
      ops.cross_entropy_forward(s, x[0], x[1], x[2]);
    }
  };
  return k;
}

// Distinct columns per row (as top-k gives), about one in five absent (-1).
std::vector<double> choice_cols(Gen& g, int64_t r, int64_t c, int64_t kk) {
  std::vector<double> idx(size_t(r * kk));
  std::vector<double> cols(static_cast<size_t>(c));
  for (int64_t i = 0; i < r; ++i) {
    std::iota(cols.begin(), cols.end(), 0.0);
    std::shuffle(cols.begin(), cols.end(), g.rng());
    for (int64_t j = 0; j < kk; ++j) idx[i * kk + j] = g.ints(1, 0, 4)[0] == 0 ? -1.0 : cols[j];
  }
  return idx;
}

// gather_cols: x (R, C), idx (R, k) -> out (R, k). scatter_add_cols: src (R, k), idx -> out += .
OpCase cols_case(SizeClass size, int64_t r, int64_t c, int64_t kk, bool scatter) {
  OpCase k;
  k.op = scatter ? "scatter_add_cols" : "gather_cols";
  k.size = size;
  k.name = rc_name(k.op, DType::F32, r, c) + " k" + std::to_string(kk);
  k.tensors = {
      {scatter ? "src" : "x", DType::F32, scatter ? Shape{r, kk} : Shape{r, c}},
      {"idx", DType::I32, Shape{r, kk}},
      {"out", DType::F32, scatter ? Shape{r, c} : Shape{r, kk}, scatter ? Role::InOut : Role::Out}};
  k.tol = scatter ? Tol{1e-7, 1e-7, "one fp32 addition per touched element"}
                  : Tol{0.0, 0.0, "a copy: exact"};
  k.inputs = [=](uint64_t seed) {
    Gen g(seed);
    HostValues v{g.uniform(DType::F32, scatter ? r * kk : r * c), choice_cols(g, r, c, kk), {}};
    if (scatter) v[2] = g.uniform(DType::F32, r * c);
    return v;
  };
  k.reference = [=](HostValues& v) {
    if (!scatter) v[2].resize(size_t(r * kk));
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < kk; ++j) {
        const auto e = int64_t(v[1][i * kk + j]);
        if (scatter && e >= 0) v[2][i * c + e] += v[0][i * kk + j];
        if (!scatter) v[2][i * kk + j] = e < 0 ? 0.0 : v[0][i * c + e];
      }
    }
  };
  k.run = [scatter](Ops& ops, Stream& s, std::span<const Tensor> x) {
    if (scatter) {
      ops.scatter_add_cols(s, x[0], x[1], x[2]);
    } else {
      ops.gather_cols(s, x[0], x[1], x[2]);
    }
  };
  return k;
}

}  // namespace

void add_router_cases(std::vector<OpCase>& out) {
  for (DType t : {DType::F32, DType::BF16}) {
    for (bool bwd : {false, true}) {
      out.push_back(softmax_case(kT, t, 17, 129, bwd));
      out.push_back(softmax_case(kT, t, 2, 1000, bwd));
      out.push_back(cross_entropy_case(kT, t, 17, 129, bwd));
    }
  }
  out.push_back(logsumexp_case(kT, 5, 1000));
  out.push_back(logsumexp_case(kT, 3, 1));
  out.push_back(topk_case(kT, 5, 129, 7));
  for (bool normalize : {false, true}) {
    out.push_back(sigmoid_case(kT, 17, 129, normalize));
    out.push_back(sigmoid_case(kT, 3, 8, normalize));
  }
  out.push_back(topk_case(kT, 17, 8, 8));
  for (bool scatter : {false, true}) out.push_back(cols_case(kT, 37, 9, 3, scatter));
  // Benchmarks: router rows (tokens, experts) and the loss over a vocabulary.
  for (SizeClass sc : {kC, kG}) {
    const int64_t tok = sc == kC ? 4096 : 16384;
    out.push_back(softmax_case(sc, DType::F32, tok, 64, false));
    out.push_back(topk_case(sc, tok, 64, 2));
    for (bool normalize : {false, true}) out.push_back(sigmoid_case(sc, tok, 64, normalize));
    out.push_back(logsumexp_case(sc, tok, 64));
    for (bool scatter : {false, true}) out.push_back(cols_case(sc, tok, 64, 2, scatter));
    for (bool bwd : {false, true}) {
      out.push_back(cross_entropy_case(sc, DType::BF16, sc == kC ? 512 : 1024, 32000, bwd));
    }
  }
}

}  // namespace moezero::cases
