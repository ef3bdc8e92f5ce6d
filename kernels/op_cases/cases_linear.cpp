// kernels/op_cases/cases_linear.cpp — cases of gemm, grouped_gemm and causal GQA attention
// forward/backward: float64 references, tolerances, FLOP counts.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/op_cases/families.h"

namespace moezero::cases {
namespace {

using DVec = std::vector<double>;

// c (m, n) = alpha op(a) op(b) + beta c, in double; a, b row-major as stored.
void ref_gemm(const double* a, const double* b, double* c, int64_t m, int64_t n, int64_t k, bool ta,
              bool tb, double alpha, double beta) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        acc += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      }
      c[i * n + j] = alpha * acc + (beta == 0.0 ? 0.0 : beta * c[i * n + j]);
    }
  }
}

struct GemmShape {
  DType at, ct;
  int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
};

OpCase gemm_case(SizeClass size, const GemmShape& g) {
  OpCase c;
  c.op = "gemm";
  c.size = size;
  c.name = "gemm " + dt(g.at) + "->" + dt(g.ct) + " " + std::to_string(g.m) + "x" +
           std::to_string(g.n) + "x" + std::to_string(g.k) + (g.ta ? " aT" : "") +
           (g.tb ? " bT" : "") + (g.beta != 0.0f ? " beta" : "");
  c.tensors = {{"a", g.at, g.ta ? Shape{g.k, g.m} : Shape{g.m, g.k}},
               {"b", g.at, g.tb ? Shape{g.n, g.k} : Shape{g.k, g.n}},
               {"c", g.ct, Shape{g.m, g.n}, g.beta == 0.0f ? Role::Out : Role::InOut}};
  // Outputs ~ sqrt(k) / 3 for U(-1, 1) inputs; C's dtype sets the error.
  c.tol = sum_tol(g.ct, g.k, 1.0 + std::sqrt(double(g.k)));
  c.flops = 2.0 * g.m * g.n * g.k;
  c.bound = Bound::Compute;
  c.inputs = [g](uint64_t seed) {
    Gen r(seed);
    HostValues v{r.uniform(g.at, g.m * g.k), r.uniform(g.at, g.k * g.n), {}};
    if (g.beta != 0.0f) v[2] = r.uniform(g.ct, g.m * g.n);
    return v;
  };
  c.reference = [g](HostValues& v) {
    v[2].resize(size_t(g.m * g.n));
    ref_gemm(v[0].data(), v[1].data(), v[2].data(), g.m, g.n, g.k, g.ta, g.tb, g.alpha, g.beta);
  };
  c.run = [g](Ops& ops, Stream& s, std::span<const Tensor> t) {
    ops.gemm(s, GemmArgs{t[0], t[1], t[2], g.ta ? Transpose::Yes : Transpose::No,
                         g.tb ? Transpose::Yes : Transpose::No, g.alpha, g.beta});
  };
  return c;
}

// Experts as a linear layer: y_e (m_e, F) = x_e (m_e, C) @ W_e^T, W (E, F, C); the rows of x
// and y are the experts' row blocks one after another (some empty).
OpCase grouped_case(SizeClass size, DType t, std::vector<int64_t> rows, int64_t cin, int64_t f) {
  const int64_t m = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  const auto e = static_cast<int64_t>(rows.size());
  OpCase c;
  c.op = "grouped_gemm";
  c.size = size;
  c.name = "grouped_gemm " + dt(t) + " E" + std::to_string(e) + " M" + std::to_string(m) + " " +
           std::to_string(cin) + "->" + std::to_string(f);
  c.tensors = {
      {"x", t, Shape{m, cin}}, {"w", t, Shape{e, f, cin}}, {"y", t, Shape{m, f}, Role::Out}};
  c.tol = sum_tol(t, cin, 1.0 + std::sqrt(double(cin)));
  c.flops = 2.0 * m * f * cin;
  c.bound = Bound::Compute;
  c.inputs = [=](uint64_t seed) {
    Gen r(seed);
    return HostValues{r.uniform(t, m * cin), r.uniform(t, e * f * cin), {}};
  };
  c.reference = [=](HostValues& v) {
    v[2].assign(size_t(m * f), 0.0);
    int64_t r0 = 0;
    for (int64_t i = 0; i < e; ++i) {
      ref_gemm(&v[0][r0 * cin], &v[1][i * f * cin], &v[2][r0 * f], rows[i], f, cin, false, true,
               1.0, 0.0);
      r0 += rows[i];
    }
  };
  c.run = [=](Ops& ops, Stream& s, std::span<const Tensor> tt) {
    std::vector<GemmProblem> probs;
    int64_t r0 = 0;
    for (int64_t i = 0; i < e; ++i) {
      probs.push_back({tt[0].slice_rows(r0, r0 + rows[i]),
                       tt[1].view_elems(i * f * cin, Shape{f, cin}),
                       tt[2].slice_rows(r0, r0 + rows[i])});
      r0 += rows[i];
    }
    ops.grouped_gemm(s, probs, Transpose::No, Transpose::Yes, 1.0f, 0.0f);
  };
  return c;
}

struct AttnDims {
  int64_t b, t, hq, hkv, d;
};

// Forward: out (B, T, Hq, D), lse (B, Hq, T); Backward: dq, dk, dv `=`; Di = dO . out_in (the op
// reads its out input). Naive per query row.
void ref_attention(const AttnDims& m, const HostValues& v, DVec* out, DVec* lse, DVec* dq, DVec* dk,
                   DVec* dv) {
  const DVec &q = v[0], &k = v[1], &vv = v[2];
  const double scale = 1.0 / std::sqrt(double(m.d));
  const int64_t group = m.hq / m.hkv;
  const bool bwd = dq != nullptr;
  if (bwd) {
    dq->assign(q.size(), 0.0), dk->assign(k.size(), 0.0), dv->assign(vv.size(), 0.0);
  } else {
    out->assign(q.size(), 0.0), lse->assign(size_t(m.b * m.hq * m.t), 0.0);
  }
  for (int64_t b = 0; b < m.b; ++b) {
    for (int64_t h = 0; h < m.hq; ++h) {
      for (int64_t t = 0; t < m.t; ++t) {
        const int64_t qo = ((b * m.t + t) * m.hq + h) * m.d;
        DVec p(size_t(t + 1)), dp(size_t(t + 1));
        double mx = -1e300, sum = 0, di = 0;
        for (int64_t j = 0; j <= t; ++j) {
          const int64_t ko = ((b * m.t + j) * m.hkv + h / group) * m.d;
          double dot = 0, dd = 0;
          for (int64_t d = 0; d < m.d; ++d) {
            dot += q[qo + d] * k[ko + d];
            if (bwd) dd += v[5][qo + d] * vv[ko + d];
          }
          p[j] = dot * scale, dp[j] = dd;
          mx = std::max(mx, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (double& x : p) x /= sum;
        if (!bwd) (*lse)[(b * m.hq + h) * m.t + t] = mx + std::log(sum);
        if (bwd) {
          for (int64_t d = 0; d < m.d; ++d) di += v[5][qo + d] * v[3][qo + d];
        }
        for (int64_t j = 0; j <= t; ++j) {
          const int64_t ko = ((b * m.t + j) * m.hkv + h / group) * m.d;
          const double ds = p[j] * (dp[j] - di);
          for (int64_t d = 0; d < m.d; ++d) {
            if (!bwd) {
              (*out)[qo + d] += p[j] * vv[ko + d];
              continue;
            }
            (*dq)[qo + d] += scale * ds * k[ko + d];
            (*dk)[ko + d] += scale * ds * q[qo + d];
            (*dv)[ko + d] += p[j] * v[5][qo + d];
          }
        }
      }
    }
  }
}

// f32: fp32 dot products of D terms and sums over T keys, 1e-5 sqrt(T D) of the output's scale;
// bf16: output rounding 2^-8 of the element or of the tensor's largest.
Tol attention_tol(DType t, const AttnDims& m) {
  const double sq = std::sqrt(double(m.t * m.d));
  if (t == DType::F32) return {1e-5 * sq, 1e-6 * sq, "f32: fp32 sums of T*D terms", 1e-5 * sq};
  return {1.0 / 256, 1e-3, "bf16: output rounding 2^-9 plus fp32 sums", 1.0 / 256};
}

OpCase attention_case(SizeClass size, DType t, AttnDims m, bool backward) {
  const Shape sq{m.b, m.t, m.hq, m.d}, skv{m.b, m.t, m.hkv, m.d}, sl{m.b, m.hq, m.t};
  OpCase c;
  c.op = backward ? "attention_backward" : "attention_forward";
  c.size = size;
  c.name = c.op + " " + dt(t) + " B" + std::to_string(m.b) + " T" + std::to_string(m.t) + " H" +
           std::to_string(m.hq) + "/" + std::to_string(m.hkv) + " D" + std::to_string(m.d);
  const Role fwd_out = backward ? Role::In : Role::Out;
  c.tensors = {{"q", t, sq},
               {"k", t, skv},
               {"v", t, skv},
               {"out", t, sq, fwd_out},
               {"lse", DType::F32, sl, fwd_out, Tol{2e-5, 2e-5, "fp32 log-sum-exp"}}};
  if (backward) {
    c.tensors.push_back({"dout", t, sq});
    c.tensors.push_back({"dq", t, sq, Role::Out});
    c.tensors.push_back({"dk", t, skv, Role::Out});
    c.tensors.push_back({"dv", t, skv, Role::Out});
  }
  c.tol = attention_tol(t, m);
  // Causal: Q K^T and P V over T(T+1)/2 (query, key) pairs; backward ~2.5x the forward.
  const double fwd_flops = 4.0 * m.b * m.hq * (double(m.t) * (m.t + 1) / 2) * m.d;
  c.flops = backward ? 2.5 * fwd_flops : fwd_flops;
  c.bound = Bound::Compute;
  c.inputs = [=](uint64_t seed) {
    Gen r(seed);
    HostValues v{r.uniform(t, sq.numel(), -2, 2),
                 r.uniform(t, skv.numel(), -2, 2),
                 r.uniform(t, skv.numel()),
                 {},
                 {}};
    if (!backward) return v;
    v.push_back(r.uniform(t, sq.numel()));
    v.resize(9);
    if (size == SizeClass::Test) {  // out and lse of the reference forward, as the op gets them
      ref_attention(m, v, &v[3], &v[4], nullptr, nullptr, nullptr);
      for (double& x : v[3]) x = round_to(t, x);
      for (double& x : v[4]) x = round_to(DType::F32, x);
    } else {  // benchmarks: any finite out; lse near its value for small scores
      v[3] = r.uniform(t, sq.numel());
      v[4].assign(size_t(sl.numel()), 0.0);
      for (int64_t i = 0; i < sl.numel(); ++i) v[4][i] = std::log(double(i % m.t + 1));
    }
    return v;
  };
  c.reference = [=](HostValues& v) {
    if (backward) {
      ref_attention(m, v, nullptr, nullptr, &v[6], &v[7], &v[8]);
    } else {
      ref_attention(m, v, &v[3], &v[4], nullptr, nullptr, nullptr);
    }
  };
  c.run = [backward](Ops& ops, Stream& s, std::span<const Tensor> x) {
    if (backward) {
      ops.attention_backward(s, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8]);
    } else {
      ops.attention_forward(s, x[0], x[1], x[2], x[3], x[4]);
    }
  };
  return c;
}

}  // namespace

void add_linear_cases(std::vector<OpCase>& out) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  // gemm: a linear layer (x @ w^T), a weight gradient (x^T @ dy, accumulated), bf16 C.
  out.push_back(gemm_case(kT, {f32, f32, 37, 29, 65, false, true, 1.0f, 0.0f}));
  out.push_back(gemm_case(kT, {bf16, f32, 17, 9, 33, true, false, 0.5f, 1.0f}));
  out.push_back(gemm_case(kT, {bf16, bf16, 5, 130, 7, false, false, 1.0f, 0.0f}));
  for (int64_t n : {128, 512, 1024})
    out.push_back(gemm_case(kC, {f32, f32, n, n, n, false, false, 1, 0}));
  out.push_back(gemm_case(kC, {bf16, f32, 512, 512, 512, false, false, 1.0f, 0.0f}));
  out.push_back(gemm_case(kG, {bf16, bf16, 4096, 4096, 4096, false, true, 1.0f, 0.0f}));
  out.push_back(gemm_case(kG, {bf16, bf16, 16384, 5632, 2048, false, true, 1.0f, 0.0f}));
  // grouped_gemm: uneven experts, some empty.
  for (DType t : {f32, bf16}) out.push_back(grouped_case(kT, t, {5, 0, 3, 1}, 17, 9));
  out.push_back(grouped_case(kC, f32, {512, 37, 0, 300, 129, 1000, 64, 5}, 512, 1024));
  out.push_back(
      grouped_case(kG, bf16, {3072, 2560, 2048, 2048, 1792, 1536, 1792, 1536}, 2048, 5632));
  // attention: GQA with T crossing the CPU backend's 64-row query blocks, and MHA.
  for (DType t : {f32, bf16}) {
    for (bool bwd : {false, true}) {
      out.push_back(attention_case(kT, t, {2, 17, 4, 2, 16}, bwd));
      out.push_back(attention_case(kT, t, {1, 65, 3, 3, 8}, bwd));
      out.push_back(attention_case(kC, t, {1, 512, 8, 2, 64}, bwd));
    }
    if (t == bf16) {
      for (bool bwd : {false, true})
        out.push_back(attention_case(kG, t, {1, 2048, 32, 8, 128}, bwd));
    }
  }
}

}  // namespace moezero::cases
