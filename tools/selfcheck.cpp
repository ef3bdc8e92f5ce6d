// tools/selfcheck.cpp — `moezero selfcheck`: a quick end-to-end look at a fresh build.
// Runs a few kernels of the op table on every available backend against float64 references
// computed here, then the collectives on N ranks-as-threads (LocalCommunicator) with inputs
// crafted so the results are exact, and prints one line per check. Exit code 1 if any fails.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "tools/cli.h"
#include "tools/selfcheck_comm.h"
#include "kernels/backend.h"

namespace moezero::cli {
namespace {

struct Report {
  int passed = 0, failed = 0;
  void line(const std::string& what, bool ok, const std::string& detail) {
    std::printf("  %-4s %-52s %s\n", ok ? "ok" : "FAIL", what.c_str(), detail.c_str());
    (ok ? passed : failed)++;
  }
};

std::vector<float> random_vec(std::mt19937& rng, size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

TensorBuffer upload(Device& dev, const std::vector<float>& v, Shape shape) {
  Stream& s = dev.default_stream();
  TensorBuffer t(dev, DType::F32, shape, MemTag::Activation, s);
  dev.memcpy_async(t.view().data(), v.data(), v.size() * 4, s);
  s.synchronize();
  return t;
}
TensorBuffer upload_i32(Device& dev, const std::vector<int32_t>& v, Shape shape) {
  Stream& s = dev.default_stream();
  TensorBuffer t(dev, DType::I32, shape, MemTag::Activation, s);
  dev.memcpy_async(t.view().data(), v.data(), v.size() * 4, s);
  s.synchronize();
  return t;
}
template <typename T>
std::vector<T> download(Device& dev, const Tensor& t) {
  std::vector<T> v(static_cast<size_t>(t.numel()));
  dev.memcpy_async(v.data(), t.data(), t.size_bytes(), dev.default_stream());
  dev.default_stream().synchronize();
  return v;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

std::string err_detail(double err, double tol) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "max|err| %.2e (tol %.0e)", err, tol);
  return buf;
}

void check_kernels(Device& dev, Report& r) {
  std::mt19937 rng(1234);
  Ops& ops = dev.ops();
  Stream& s = dev.default_stream();
  const std::string tag = std::string("[") + dev.name() + "] ";

  {  // GEMM with a transposed weight, as a linear layer computes it: y = x @ w^T.
    const int m = 37, n = 29, k = 65;
    auto x = random_vec(rng, m * k), w = random_vec(rng, n * k);
    auto X = upload(dev, x, {m, k}), W = upload(dev, w, {n, k});
    TensorBuffer Y(dev, DType::F32, {m, n}, MemTag::Activation, s);
    ops.gemm(s, GemmArgs{X, W, Y, Transpose::No, Transpose::Yes});
    auto y = download<float>(dev, Y);
    std::vector<double> ref(m * n, 0.0);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        for (int p = 0; p < k; ++p) ref[i * n + j] += double(x[i * k + p]) * w[j * k + p];
    double e = max_abs_diff(y, ref);
    r.line(tag + "gemm f32 (37x65) @ (29x65)^T", e < 1e-4, err_detail(e, 1e-4));
  }
  {  // Causal attention, grouped-query (4 query heads over 2 kv heads).
    const int B = 1, T = 9, Hq = 4, Hkv = 2, D = 8;
    auto q = random_vec(rng, B * T * Hq * D), k = random_vec(rng, B * T * Hkv * D),
         v = random_vec(rng, B * T * Hkv * D);
    auto Q = upload(dev, q, {B, T, Hq, D}), K = upload(dev, k, {B, T, Hkv, D}),
         V = upload(dev, v, {B, T, Hkv, D});
    TensorBuffer O(dev, DType::F32, {B, T, Hq, D}, MemTag::Activation, s);
    TensorBuffer L(dev, DType::F32, {B, Hq, T}, MemTag::Activation, s);
    ops.attention_forward(s, Q, K, V, O, L);
    auto o = download<float>(dev, O);
    std::vector<double> ref(o.size(), 0.0);
    for (int h = 0; h < Hq; ++h) {
      int g = h / (Hq / Hkv);
      for (int t = 0; t < T; ++t) {
        std::vector<double> sc(t + 1);
        double mx = -1e300, z = 0;
        for (int u = 0; u <= t; ++u) {
          double d = 0;
          for (int c = 0; c < D; ++c)
            d += double(q[(t * Hq + h) * D + c]) * k[(u * Hkv + g) * D + c];
          sc[u] = d / std::sqrt(double(D));
          mx = std::max(mx, sc[u]);
        }
        for (int u = 0; u <= t; ++u) z += (sc[u] = std::exp(sc[u] - mx));
        for (int u = 0; u <= t; ++u)
          for (int c = 0; c < D; ++c)
            ref[(t * Hq + h) * D + c] += sc[u] / z * v[(u * Hkv + g) * D + c];
      }
    }
    double e = max_abs_diff(o, ref);
    r.line(tag + "causal GQA attention (T=9, Hq=4, Hkv=2)", e < 1e-5, err_detail(e, 1e-5));
  }
  {  // MoE movers: stable sort by expert, dispatch, weighted combine.
    const int T = 23, k = 2, E = 5, C = 6;
    std::uniform_int_distribution<int> pick(-1, E - 1);  // -1: dropped by capacity
    std::vector<int32_t> ids(T * k);
    for (auto& id : ids) id = pick(rng);
    auto x = random_vec(rng, T * C);
    std::vector<float> wts = random_vec(rng, T * k);
    auto IDS = upload_i32(dev, ids, {T * k});
    auto X = upload(dev, x, {T, C}), W = upload(dev, wts, {T, k});
    TensorBuffer perm(dev, DType::I32, {T * k}, MemTag::Activation, s);
    TensorBuffer inv(dev, DType::I32, {T * k}, MemTag::Activation, s);
    TensorBuffer off(dev, DType::I32, {E + 1}, MemTag::Activation, s);
    ops.sort_by_expert(s, IDS, E, perm, inv, off);
    auto offsets = download<int32_t>(dev, off);
    const int kept = offsets[E];
    TensorBuffer rows(dev, DType::F32, {kept, C}, MemTag::Activation, s);
    ops.gather_rows(s, X, perm, k, rows);
    TensorBuffer out(dev, DType::F32, {T, C}, MemTag::Activation, s);
    ops.combine_rows(s, rows, inv, W, k, out);
    auto y = download<float>(dev, out);
    auto p = download<int32_t>(dev, perm);
    // Reference: combine of the identity expert is sum_j w[t,j] * x[t] over kept choices.
    std::vector<double> ref(T * C, 0.0);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < k; ++j)
        if (ids[t * k + j] >= 0)
          for (int c = 0; c < C; ++c) ref[t * C + c] += double(wts[t * k + j]) * x[t * C + c];
    bool stable = true;
    for (int q = 1; q < kept; ++q) {
      int a = p[q - 1], b = p[q];
      stable &= ids[a] < ids[b] || (ids[a] == ids[b] && a < b);
    }
    double e = max_abs_diff(y, ref);
    r.line(tag + "sort_by_expert + gather_rows + combine_rows", e < 1e-5 && stable,
           err_detail(e, 1e-5) + (stable ? ", stable order" : ", ORDER NOT STABLE"));
  }
}

}  // namespace

int selfcheck(const std::vector<std::string>& args) {
  int ranks = 4;
  std::string backend = "all";
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      MOEZERO_REQUIRE(i + 1 < args.size(), "selfcheck: ", flag, " needs a value");
      return args[++i];
    };
    if (args[i] == "--ranks") {
      std::string v = value("--ranks");
      try {
        ranks = std::stoi(v);
      } catch (const std::exception&) {
        MOEZERO_THROW("selfcheck: --ranks '", v, "' is not an integer");
      }
      MOEZERO_REQUIRE(ranks >= 1 && ranks <= 64, "selfcheck: --ranks must be in [1, 64], got ",
                      ranks);
    } else if (args[i] == "--backend") {
      backend = value("--backend");
      MOEZERO_REQUIRE(backend == "cpu" || backend == "cuda" || backend == "all",
                      "selfcheck: --backend must be cpu, cuda or all, got '", backend, "'");
    } else {
      MOEZERO_THROW("selfcheck: unknown option '", args[i], "'");
    }
  }
  Report r;
  std::printf("moezero selfcheck\nkernels (against float64 references):\n");
  if (backend != "cuda") {
    auto cpu = make_cpu_device(0);
    check_kernels(*cpu, r);
  }
  if (backend != "cpu") {
    std::string why;
    if (cuda_available(&why)) {
      auto gpu = make_cuda_device(0);
      check_kernels(*gpu, r);
    } else {
      std::printf("  skip [cuda] kernels: %s\n", why.c_str());
      MOEZERO_REQUIRE(backend != "cuda", "selfcheck: --backend cuda asked for, but ", why);
    }
  }
  std::printf("collectives (%d ranks as threads, exact results):\n", ranks);
  check_collectives(ranks, [&](const std::string& what, bool ok, const std::string& detail) {
    r.line(what, ok, detail);
  });
  std::printf("selfcheck: %d passed, %d failed\n", r.passed, r.failed);
  return r.failed == 0 ? 0 : 1;
}

}  // namespace moezero::cli
