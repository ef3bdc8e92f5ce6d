// kernels/op_cases/cases_elementwise.cpp — cases of the elementwise ops and reductions (add, mul,
// scale, axpy, fill, cast, sum_squares, find_nonfinite), SwiGLU forward/backward and AdamW.
#include <cmath>
#include <limits>

#include "kernels/op_cases/families.h"

namespace moezero::cases {
namespace {

// One rounding of an exact double result to the output dtype (and a floor near 0).
Tol one_rounding(DType t) {
  if (t == DType::F32) return {1e-6, 1e-7, "f32: one rounding of each result (2^-24)"};
  return {1.0 / 256, 1e-5, "bf16: one RNE rounding of each result (2^-9)"};
}
const Tol kExact{0.0, 0.0, "exact: conversion or copy, RNE as core/dtype.h"};

OpCase base(const char* op, SizeClass size, DType t, int64_t n, const char* extra = "") {
  OpCase c;
  c.op = op;
  c.size = size;
  c.name = std::string(op) + " " + dt(t) + " " + shape_text({n}) + extra;
  c.bound = Bound::Memory;
  return c;
}

// add / mul: out = a (+|*) b.
OpCase binary_case(const char* op, SizeClass size, DType t, int64_t n) {
  const bool is_add = std::string(op) == "add";
  OpCase c = base(op, size, t, n);
  c.tensors = {{"a", t, Shape{n}}, {"b", t, Shape{n}}, {"out", t, Shape{n}, Role::Out}};
  c.tol = one_rounding(t);
  c.flops = double(n);
  c.inputs = [=](uint64_t seed) {
    Gen r(seed);
    return HostValues{r.uniform(t, n), r.uniform(t, n), {}};
  };
  c.reference = [=](HostValues& v) {
    v[2].resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) v[2][i] = is_add ? v[0][i] + v[1][i] : v[0][i] * v[1][i];
  };
  c.run = [=](Ops& ops, Stream& s, std::span<const Tensor> x) {
    if (is_add) {
      ops.add(s, x[0], x[1], x[2]);
    } else {
      ops.mul(s, x[0], x[1], x[2]);
    }
  };
  return c;
}

OpCase scale_case(SizeClass size, DType t, int64_t n) {
  OpCase c = base("scale", size, t, n);
  c.tensors = {{"x", t, Shape{n}, Role::InOut}};
  c.tol = one_rounding(t);
  c.flops = double(n);
  c.inputs = [=](uint64_t seed) { return HostValues{Gen(seed).uniform(t, n)}; };
  c.reference = [](HostValues& v) {
    for (double& x : v[0]) x *= -0.75;
  };
  c.run = [](Ops& ops, Stream& s, std::span<const Tensor> x) { ops.scale(s, x[0], -0.75f); };
  return c;
}

// The gradient-accumulation form: y (f32) += alpha * x (dtype t).
OpCase axpy_case(SizeClass size, DType t, int64_t n) {
  OpCase c = base("axpy", size, t, n, " into f32");
  c.tensors = {{"x", t, Shape{n}}, {"y", DType::F32, Shape{n}, Role::InOut}};
  c.tol = one_rounding(DType::F32);
  c.flops = 2.0 * n;
  c.inputs = [=](uint64_t seed) {
    Gen r(seed);
    return HostValues{r.uniform(t, n), r.uniform(DType::F32, n)};
  };
  c.reference = [](HostValues& v) {
    for (size_t i = 0; i < v[0].size(); ++i) v[1][i] += 0.5 * v[0][i];
  };
  c.run = [](Ops& ops, Stream& s, std::span<const Tensor> x) { ops.axpy(s, 0.5f, x[0], x[1]); };
  return c;
}

OpCase fill_case(SizeClass size, DType t, int64_t n) {
  OpCase c = base("fill", size, t, n);
  c.tensors = {{"x", t, Shape{n}, Role::Out}};
  c.tol = kExact;
  c.inputs = [](uint64_t) { return HostValues{{}}; };
  c.reference = [=](HostValues& v) {
    v[0].assign(size_t(n), round_to(t, is_floating(t) ? 1.0 / 3.0 : 7.0));
  };
  c.run = [=](Ops& ops, Stream& s, std::span<const Tensor> x) {
    ops.fill(s, x[0], is_floating(t) ? 1.0 / 3.0 : 7.0);
  };
  return c;
}

OpCase cast_case(SizeClass size, DType from, DType to, int64_t n) {
  OpCase c = base("cast", size, from, n, (" -> " + dt(to)).c_str());
  c.tensors = {{"src", from, Shape{n}}, {"dst", to, Shape{n}, Role::Out}};
  c.tol = kExact;
  c.inputs = [=](uint64_t seed) { return HostValues{Gen(seed).uniform(from, n, -100, 100), {}}; };
  c.reference = [=](HostValues& v) {
    v[1] = v[0];
    for (double& x : v[1]) x = round_to(to, x);
  };
  c.run = [](Ops& ops, Stream& s, std::span<const Tensor> x) { ops.cast(s, x[0], x[1]); };
  return c;
}

OpCase sum_squares_case(SizeClass size, DType t, int64_t n) {
  OpCase c = base("sum_squares", size, t, n);
  c.tensors = {{"x", t, Shape{n}}, {"out", DType::F32, Shape{1}, Role::InOut}};
  // One f32 output: the sum of n fp32 products (bf16 inputs were rounded before the reference).
  c.tol = {1e-5 * std::sqrt(double(n)), 1e-6, "f32 sum of n products: ~sqrt(n) 2^-24"};
  c.flops = 2.0 * n;
  c.inputs = [=](uint64_t seed) { return HostValues{Gen(seed).uniform(t, n), {2.5}}; };
  c.reference = [](HostValues& v) {
    for (double x : v[0]) v[1][0] += x * x;
  };
  c.run = [](Ops& ops, Stream& s, std::span<const Tensor> x) { ops.sum_squares(s, x[0], x[1]); };
  return c;
}

// A few NaN / +-Inf planted at random places (Test size only; benchmarks scan finite data).
OpCase nonfinite_case(SizeClass size, DType t, int64_t n) {
  OpCase c = base("find_nonfinite", size, t, n);
  c.tensors = {{"x", t, Shape{n}}, {"result", DType::I64, Shape{3}, Role::Out}};
  c.tol = kExact;
  c.inputs = [=](uint64_t seed) {
    Gen r(seed);
    HostValues v{r.uniform(t, n), {}};
    if (size != SizeClass::Test) return v;
    const double bad[] = {std::numeric_limits<double>::quiet_NaN(),
                          std::numeric_limits<double>::infinity(),
                          -std::numeric_limits<double>::infinity()};
    const std::vector<double> where = r.ints(3, 0, n - 1), kind = r.ints(3, 0, 2);
    for (int i = 0; i < 3; ++i) v[0][size_t(where[i])] = bad[size_t(kind[i])];
    return v;
  };
  c.reference = [](HostValues& v) {
    v[1] = {-1.0, 0.0, 0.0};
    for (size_t i = 0; i < v[0].size(); ++i) {
      const double x = v[0][i];
      if (std::isfinite(x)) continue;
      if (v[1][1]++ == 0) v[1][0] = double(i), v[1][2] = std::isnan(x) ? 1 : (x > 0 ? 2 : 3);
    }
  };
  c.run = [](Ops& ops, Stream& s, std::span<const Tensor> x) { ops.find_nonfinite(s, x[0], x[1]); };
  return c;
}

double silu(double g) { return g / (1.0 + std::exp(-g)); }
double dsilu(double g) {
  const double sg = 1.0 / (1.0 + std::exp(-g));
  return sg * (1.0 + g * (1.0 - sg));
}

OpCase swiglu_case(SizeClass size, DType t, int64_t r, int64_t f, bool backward) {
  OpCase c;
  c.op = backward ? "swiglu_backward" : "swiglu_forward";
  c.size = size;
  c.name = c.op + " " + dt(t) + " " + shape_text({r, f});
  const Shape sh{r, f};
  c.tensors = {{"gate", t, sh}, {"up", t, sh}};
  if (backward) {
    c.tensors.push_back({"dout", t, sh});
    c.tensors.push_back({"dgate", t, sh, Role::Out});
    c.tensors.push_back({"dup", t, sh, Role::Out});
  } else {
    c.tensors.push_back({"out", t, sh, Role::Out});
  }
  // Elementwise: f32 within a few ulps of exp; bf16 output rounding.
  c.tol = t == DType::F32 ? Tol{1e-5, 1e-6, "f32: a few ulps of exp"}
                          : Tol{1.0 / 256, 1e-5, "bf16: output rounding 2^-9"};
  c.flops = (backward ? 10.0 : 5.0) * r * f;
  c.inputs = [=](uint64_t seed) {
    Gen g(seed);
    HostValues v{g.uniform(t, r * f, -4, 4), g.uniform(t, r * f, -2, 2)};
    if (backward) v.push_back(g.uniform(t, r * f));
    v.resize(backward ? 5 : 3);
    return v;
  };
  c.reference = [=](HostValues& v) {
    const size_t n = v[0].size();
    for (size_t k = 2; k < v.size(); ++k) v[k].resize(n);
    for (size_t i = 0; i < n; ++i) {
      const double g = v[0][i], u = v[1][i];
      if (!backward) {
        v[2][i] = silu(g) * u;
      } else {
        v[3][i] = v[2][i] * u * dsilu(g);
        v[4][i] = v[2][i] * silu(g);
      }
    }
  };
  c.run = [backward](Ops& ops, Stream& s, std::span<const Tensor> x) {
    if (backward) {
      ops.swiglu_backward(s, x[0], x[1], x[2], x[3], x[4]);
    } else {
      ops.swiglu_forward(s, x[0], x[1], x[2]);
    }
  };
  return c;
}

// swiglu_backward_act: swiglu_backward plus the recomputed forward output act.
OpCase swiglu_act_case(SizeClass size, DType t, int64_t r, int64_t f) {
  OpCase c = swiglu_case(size, t, r, f, true);
  c.op = "swiglu_backward_act";
  c.name = c.op + " " + dt(t) + " " + shape_text({r, f});
  const Shape sh{r, f};
  c.tensors.insert(c.tensors.begin() + 3, {"act", t, sh, Role::Out});
  c.flops = 12.0 * r * f;
  c.inputs = [=](uint64_t seed) {
    Gen g(seed);
    HostValues v{g.uniform(t, r * f, -4, 4), g.uniform(t, r * f, -2, 2), g.uniform(t, r * f)};
    v.resize(6);
    return v;
  };
  c.reference = [](HostValues& v) {
    const size_t n = v[0].size();
    for (size_t k = 3; k < v.size(); ++k) v[k].resize(n);
    for (size_t i = 0; i < n; ++i) {
      const double g = v[0][i], u = v[1][i];
      v[3][i] = silu(g) * u;
      v[4][i] = v[2][i] * u * dsilu(g);
      v[5][i] = v[2][i] * silu(g);
    }
  };
  c.run = [](Ops& ops, Stream& s, std::span<const Tensor> x) {
    ops.swiglu_backward_act(s, x[0], x[1], x[2], x[3], x[4], x[5]);
  };
  return c;
}

// One AdamW step (step 3: bias correction active), weight decay, grad_scale, a bf16 copy.
OpCase adamw_case(SizeClass size, int64_t n) {
  OpCase c = base("adamw", size, DType::F32, n, " + bf16 copy");
  c.tensors = {{"param", DType::F32, Shape{n}, Role::InOut, Tol{1e-6, 2e-7, "fp32 update"}},
               {"grad", DType::F32, Shape{n}},
               {"exp_avg", DType::F32, Shape{n}, Role::InOut, Tol{1e-5, 2e-8, "fp32 terms ~0.05"}},
               {"exp_avg_sq", DType::F32, Shape{n}, Role::InOut, Tol{1e-5, 1e-12, "fp32"}},
               {"param_copy", DType::BF16, Shape{n}, Role::Out}};
  c.tol = {1.0 / 256, 0.0, "bf16 copy: one RNE rounding of the fp32 param"};
  c.flops = 16.0 * n;
  c.inputs = [=](uint64_t seed) {
    Gen r(seed);
    return HostValues{r.uniform(DType::F32, n),
                      r.uniform(DType::F32, n),
                      r.uniform(DType::F32, n, -0.01, 0.01),
                      r.uniform(DType::F32, n, 0, 1e-4),
                      {}};
  };
  c.reference = [](HostValues& v) {  // torch.optim.AdamW (_single_tensor_adamw), in double
    const double lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    const double bc1 = 1 - std::pow(b1, 3.0), bc2 = 1 - std::pow(b2, 3.0);
    v[4].resize(v[0].size());
    for (size_t i = 0; i < v[0].size(); ++i) {
      const double g = v[1][i] * gs;
      v[0][i] *= 1 - lr * wd;
      v[2][i] = b1 * v[2][i] + (1 - b1) * g;
      v[3][i] = b2 * v[3][i] + (1 - b2) * g * g;
      v[0][i] -= lr / bc1 * v[2][i] / (std::sqrt(v[3][i]) / std::sqrt(bc2) + eps);
      v[4][i] = v[0][i];
    }
  };
  c.run = [](Ops& ops, Stream& s, std::span<const Tensor> x) {
    AdamWArgs a;
    a.param = x[0], a.grad = x[1], a.exp_avg = x[2], a.exp_avg_sq = x[3], a.param_copy = x[4];
    a.lr = 3e-3f, a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f, a.weight_decay = 0.1f;
    a.grad_scale = 0.5f, a.step = 3;
    ops.adamw(s, a);
  };
  return c;
}

// adamw_multi: three entries in one call, each with its own hyper-parameters: n0 elements
// (several 16K-element chunks) with weight decay, an f32 grad and a bf16 copy; 129 elements
// without weight decay, a bf16 grad (the bf16 compute dtype's reduced gradient) and no copy;
// 17 elements with an f32 copy. Each entry against torch's AdamW in double.
OpCase adamw_multi_case(SizeClass size, int64_t n0) {
  struct Entry {
    int64_t n;
    DType grad, copy;  // copy F16: none (the case uses f32 / bf16 only)
    double wd, gs;
    int64_t step;
  };
  const std::vector<Entry> es = {{n0, DType::F32, DType::BF16, 0.1, 0.5, 3},
                                 {129, DType::BF16, DType::F16, 0.0, 1.0, 1},
                                 {17, DType::F32, DType::F32, 0.1, 0.25, 7}};
  OpCase c = base("adamw_multi", size, DType::F32, n0, " + 129 + 17, bf16 grad, copies");
  c.tol = {1.0 / 256, 0.0, "bf16 copy: one RNE rounding of the fp32 param"};
  double flops = 0;
  for (size_t e = 0; e < es.size(); ++e) {
    const std::string k = std::to_string(e);
    const int64_t n = es[e].n;
    c.tensors.push_back(
        {"param" + k, DType::F32, Shape{n}, Role::InOut, Tol{1e-6, 2e-7, "fp32 update"}});
    c.tensors.push_back({"grad" + k, es[e].grad, Shape{n}});
    c.tensors.push_back(
        {"exp_avg" + k, DType::F32, Shape{n}, Role::InOut, Tol{1e-5, 2e-8, "fp32 terms ~0.05"}});
    c.tensors.push_back(
        {"exp_avg_sq" + k, DType::F32, Shape{n}, Role::InOut, Tol{1e-5, 1e-12, "fp32"}});
    if (es[e].copy != DType::F16)
      c.tensors.push_back({"param_copy" + k, es[e].copy, Shape{n}, Role::Out,
                           es[e].copy == DType::F32 ? Tol{1e-6, 2e-7, "fp32 copy"} : c.tol});
    flops += 16.0 * static_cast<double>(n);
  }
  c.flops = flops;
  c.inputs = [es](uint64_t seed) {
    Gen r(seed);
    HostValues v;
    for (const Entry& e : es) {
      v.push_back(r.uniform(DType::F32, e.n));
      v.push_back(r.uniform(e.grad, e.n));
      v.push_back(r.uniform(DType::F32, e.n, -0.01, 0.01));
      v.push_back(r.uniform(DType::F32, e.n, 0, 1e-4));
      if (e.copy != DType::F16) v.push_back({});
    }
    return v;
  };
  c.reference = [es](HostValues& v) {  // torch.optim.AdamW (_single_tensor_adamw), in double
    const double lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    size_t t = 0;
    for (const Entry& e : es) {
      const double st = static_cast<double>(e.step);
      const double bc1 = 1 - std::pow(b1, st), bc2 = 1 - std::pow(b2, st);
      const double wd = static_cast<float>(e.wd), gs = static_cast<float>(e.gs);
      auto &p = v[t], &g = v[t + 1], &m = v[t + 2], &q = v[t + 3];
      for (size_t i = 0; i < p.size(); ++i) {
        const double gi = g[i] * gs;
        p[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        q[i] = b2 * q[i] + (1 - b2) * gi * gi;
        p[i] -= lr / bc1 * m[i] / (std::sqrt(q[i]) / std::sqrt(bc2) + eps);
      }
      t += 4;
      if (e.copy != DType::F16) {
        v[t] = p;
        ++t;
      }
    }
  };
  c.run = [es](Ops& ops, Stream& s, std::span<const Tensor> x) {
    std::vector<AdamWArgs> as;
    size_t t = 0;
    for (const Entry& e : es) {
      AdamWArgs a;
      a.param = x[t], a.grad = x[t + 1], a.exp_avg = x[t + 2], a.exp_avg_sq = x[t + 3];
      t += 4;
      if (e.copy != DType::F16) a.param_copy = x[t++];
      a.lr = 3e-3f, a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f;
      a.weight_decay = static_cast<float>(e.wd), a.grad_scale = static_cast<float>(e.gs);
      a.step = e.step;
      as.push_back(a);
    }
    ops.adamw_multi(s, as);
  };
  return c;
}

}  // namespace

void add_elementwise_cases(std::vector<OpCase>& out) {
  const DType f32 = DType::F32, bf16 = DType::BF16;
  const int64_t big = 1 << 24;  // 16M elements: 64 MiB of f32
  for (DType t : {f32, bf16}) {
    out.push_back(binary_case("add", kT, t, 129));
    out.push_back(binary_case("mul", kT, t, 17));
    out.push_back(scale_case(kT, t, 40000));  // several 16K-element blocks
    out.push_back(axpy_case(kT, t, 129));
    out.push_back(fill_case(kT, t, 17));
    out.push_back(sum_squares_case(kT, t, 40000));
    out.push_back(nonfinite_case(kT, t, 1000));
    out.push_back(swiglu_case(kT, t, 3, 17, false));
    out.push_back(swiglu_case(kT, t, 17, 129, true));
    out.push_back(swiglu_act_case(kT, t, 17, 129));
  }
  out.push_back(fill_case(kT, DType::I32, 17));
  out.push_back(cast_case(kT, f32, bf16, 129));
  out.push_back(cast_case(kT, bf16, f32, 129));
  out.push_back(cast_case(kT, f32, DType::F16, 129));
  out.push_back(adamw_case(kT, 129));
  out.push_back(adamw_multi_case(kT, 40000));
  // Benchmarks: the streaming ops at sizes well past the caches.
  for (SizeClass sc : {kC, kG}) {
    const int64_t n = sc == kC ? big / 4 : big;
    out.push_back(binary_case("add", sc, bf16, n));
    out.push_back(axpy_case(sc, bf16, n));
    out.push_back(cast_case(sc, f32, bf16, n));
    out.push_back(sum_squares_case(sc, f32, n));
    out.push_back(nonfinite_case(sc, bf16, n));
    out.push_back(adamw_case(sc, n));
    out.push_back(adamw_multi_case(sc, n));
    for (DType t : {f32, bf16}) {
      if (sc == kG && t == f32) continue;
      out.push_back(swiglu_case(sc, t, sc == kC ? 4096 : 8192, sc == kC ? 2048 : 5632, false));
      out.push_back(swiglu_case(sc, t, sc == kC ? 4096 : 8192, sc == kC ? 2048 : 5632, true));
    }
  }
}

}  // namespace moezero::cases
