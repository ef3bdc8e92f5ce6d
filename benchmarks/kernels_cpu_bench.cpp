// benchmarks/kernels_cpu_bench.cpp — throughput of the CPU backend's main ops, each next to a
// baseline measured in the same run.
//
// Compute-bound rows (GEMM, grouped GEMM, attention) report GFLOP/s; their baseline is raw
// single-threaded cblas_sgemm (one call on this thread, no TBB) at the same shape (grouped GEMM:
// the problems one after another; attention: a 512^3 sgemm). Memory-bound rows (SwiGLU, MoE row
// movers) report GB/s of bytes read + written; their baseline is single-threaded std::memcpy of
// a 64 MiB buffer. The last column is op / baseline: above 1 means the op uses more than one
// core well (the CPU backend parallelises over TBB), below 1 means overhead.
// Usage: kernels_cpu_bench [--quick]   (--quick: ~4x shorter timing windows)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "kernels/backend.h"

namespace {

using moezero::DType;
using moezero::MemTag;
using moezero::Shape;
using moezero::Tensor;
using moezero::TensorBuffer;
using Clock = std::chrono::steady_clock;

double g_window_s = 0.4;  // timing window per case

// Seconds per call of fn (after one warm-up call), repeated until the window is filled.
double time_per_call(const std::function<void()>& fn) {
  fn();
  int reps = 0;
  const auto t0 = Clock::now();
  double el = 0;
  do {
    fn();
    ++reps;
    el = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (el < g_window_s);
  return el / reps;
}

double raw_sgemm_gflops(int64_t m, int64_t n, int64_t k) {
  std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n);
  const double s = time_per_call([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(m), int(n), int(k), 1.0f, a.data(),
                int(k), b.data(), int(n), 0.0f, c.data(), int(n));
  });
  return 2.0 * m * n * k / s * 1e-9;
}

double memcpy_gbs() {
  const size_t bytes = 64u << 20;
  std::vector<char> a(bytes, 1), b(bytes);
  const double s = time_per_call([&] { std::memcpy(b.data(), a.data(), bytes); });
  return 2.0 * bytes / s * 1e-9;
}

void row(const std::string& name, double sec, double work, const char* unit, double base) {
  const double rate = work / sec * 1e-9;
  std::printf("%-44s %10.3f %10.1f %-7s %10.1f %8.2f\n", name.c_str(), sec * 1e3, rate, unit, base,
              rate / base);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--quick") g_window_s = 0.1;
  auto dev = moezero::make_cpu_device();  // pins OpenBLAS to one thread per call
#ifdef OPENBLAS_VERSION
  openblas_set_num_threads(1);
#endif
  moezero::Stream& s = dev->default_stream();
  moezero::Ops& ops = dev->ops();
  std::mt19937 rng(42);
  auto buf = [&](DType t, Shape sh) {
    TensorBuffer b(*dev, t, sh, MemTag::Activation, s, "bench");
    ops.fill(s, b, 0.01);
    return b;
  };
  auto run = [&](const std::function<void()>& enqueue) {
    return time_per_call([&] {
      enqueue();
      s.synchronize();
    });
  };

  std::printf("%-44s %10s %10s %-7s %10s %8s\n", "case", "ms/call", "rate", "unit", "baseline",
              "ratio");
  // ---- GEMM -------------------------------------------------------------------------------
  for (int64_t n : {128, 512, 1024}) {
    const double base = raw_sgemm_gflops(n, n, n);
    for (DType t : {DType::F32, DType::BF16}) {
      if (t == DType::BF16 && n != 512) continue;
      TensorBuffer a = buf(t, {n, n}), b = buf(t, {n, n}), c = buf(DType::F32, {n, n});
      const double sec = run([&] { ops.gemm(s, {a, b, c}); });
      row("gemm " + std::string(moezero::dtype_name(t)) + " " + std::to_string(n) + "^3", sec,
          2.0 * n * n * n, "GFLOP/s", base);
    }
  }
  // ---- grouped GEMM: 8 experts, uneven rows, X_e (m_e, 512) @ W_e^T (1024, 512) -------------
  {
    const int64_t rows[] = {512, 37, 0, 300, 129, 1000, 64, 5}, d = 512, f = 1024;
    std::vector<TensorBuffer> bufs;
    std::vector<moezero::GemmProblem> probs;
    double flops = 0;
    for (int64_t m : rows) {
      bufs.push_back(buf(DType::F32, {m, d}));
      bufs.push_back(buf(DType::F32, {f, d}));
      bufs.push_back(buf(DType::F32, {m, f}));
      probs.push_back({bufs[bufs.size() - 3], bufs[bufs.size() - 2], bufs.back()});
      flops += 2.0 * m * d * f;
    }
    s.synchronize();
    const double base_s = time_per_call([&] {
      for (auto& p : probs) {
        const int m = int(p.a.dim(0));
        if (m == 0) continue;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, int(f), int(d), 1.0f,
                    p.a.data_as<float>(), int(d), p.b.data_as<float>(), int(d), 0.0f,
                    p.c.data_as<float>(), int(f));
      }
    });
    const double sec = run([&] {
      ops.grouped_gemm(s, probs, moezero::Transpose::No, moezero::Transpose::Yes, 1.0f, 0.0f);
    });
    row("grouped_gemm f32 8 experts (2047 rows) 512->1024", sec, flops, "GFLOP/s",
        flops / base_s * 1e-9);
  }
  // ---- attention ----------------------------------------------------------------------------
  {
    const double base = raw_sgemm_gflops(512, 512, 512);
    const int64_t b = 1, t = 512, h = 8, hkv = 2, dd = 64;
    for (DType dt : {DType::F32, DType::BF16}) {
      TensorBuffer q = buf(dt, {b, t, h, dd}), k = buf(dt, {b, t, hkv, dd}),
                   v = buf(dt, {b, t, hkv, dd}), o = buf(dt, {b, t, h, dd}),
                   lse = buf(DType::F32, {b, h, t}), dq = buf(dt, {b, t, h, dd}),
                   dk = buf(dt, {b, t, hkv, dd}), dv = buf(dt, {b, t, hkv, dd});
      // Causal: QK^T and PV over t(t+1)/2 (query, key) pairs, 2 flops per multiply-add.
      const double pairs = double(t) * (t + 1) / 2;
      const double fwd = 4.0 * b * h * pairs * dd;
      const std::string tag = std::string(moezero::dtype_name(dt)) + " B1 T512 H8/2 D64";
      row("attention_forward " + tag, run([&] { ops.attention_forward(s, q, k, v, o, lse); }), fwd,
          "GFLOP/s", base);
      row("attention_backward " + tag,
          run([&] { ops.attention_backward(s, q, k, v, o, lse, o, dq, dk, dv); }), 2.5 * fwd,
          "GFLOP/s", base);
    }
  }
  // ---- memory-bound ops ----------------------------------------------------------------------
  const double mbase = memcpy_gbs();
  {
    const int64_t r = 4096, f = 2048;
    for (DType dt : {DType::F32, DType::BF16}) {
      const double es = double(moezero::dtype_size_bytes(dt));
      TensorBuffer g = buf(dt, {r, f}), u = buf(dt, {r, f}), o = buf(dt, {r, f}),
                   dg = buf(dt, {r, f}), du = buf(dt, {r, f});
      const std::string tag = std::string(moezero::dtype_name(dt)) + " (4096, 2048)";
      row("swiglu_forward " + tag, run([&] { ops.swiglu_forward(s, g, u, o); }), 3.0 * r * f * es,
          "GB/s", mbase);
      row("swiglu_backward " + tag, run([&] { ops.swiglu_backward(s, g, u, o, dg, du); }),
          5.0 * r * f * es, "GB/s", mbase);
    }
  }
  {
    const int64_t t = 4096, k = 2, c = 1024, e = 8, n = t * k;
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = int32_t(rng() % e);
    TensorBuffer tid(*dev, DType::I32, {n}, MemTag::Activation, s);
    dev->memcpy_async(tid.view().data(), ids.data(), n * 4, s);
    TensorBuffer perm = buf(DType::I32, {n}), inv = buf(DType::I32, {n}),
                 off = buf(DType::I32, {e + 1}), w = buf(DType::F32, {t, k});
    ops.sort_by_expert(s, tid, int(e), perm, inv, off);
    for (DType dt : {DType::F32, DType::BF16}) {
      const double es = double(moezero::dtype_size_bytes(dt));
      TensorBuffer x = buf(dt, {t, c}), y = buf(dt, {n, c}), out = buf(dt, {t, c});
      const std::string tag = std::string(moezero::dtype_name(dt)) + " T4096 k2 C1024";
      row("gather_rows " + tag, run([&] { ops.gather_rows(s, x, perm, int(k), y); }),
          2.0 * n * c * es, "GB/s", mbase);
      row("combine_rows " + tag, run([&] { ops.combine_rows(s, y, inv, w, int(k), out); }),
          (double(n) + t) * c * es, "GB/s", mbase);
    }
  }
  s.synchronize();
  return 0;
}
