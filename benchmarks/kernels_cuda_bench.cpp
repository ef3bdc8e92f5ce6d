// benchmarks/kernels_cuda_bench.cpp — CUDA op-table throughput against raw library baselines
// measured in the same run.
//
//   gemm          bf16 op-table gemm        vs raw cublasGemmEx, same shape        (TFLOP/s)
//   grouped_gemm  bf16, 8 uneven experts    vs one dense cublasGemmEx of the same FLOPs
//   attention     causal GQA fwd / bwd      vs cuBLAS batched Q K^T and P V (full T x T,
//                                           no softmax): how far the simple kernel is from GEMM
//   gather_rows   permutation of bf16 rows  vs cudaMemcpyAsync D2D of the same bytes (GB/s)
// Last column: ratio = ours / baseline (1.0 = as fast as the library). Times are CUDA-event
// means over several iterations after warm-up. Without a usable GPU it prints
// "skipped: <reason>" and exits 0.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_stream.h"

using namespace moezero;

namespace {

struct Row {
  std::string name, shape, unit;
  double ms, ours, base;
};

double time_ms(Device& dev, Stream& s, const std::function<void()>& f, int iters) {
  for (int i = 0; i < 2; ++i) f();
  auto e0 = dev.create_event();
  auto e1 = dev.create_event();
  e0->record(s);
  for (int i = 0; i < iters; ++i) f();
  e1->record(s);
  e1->synchronize();
  return static_cast<double>(e1->elapsed_ms_since(*e0)) / iters;
}

// Random bf16 values in [-1, 1).
TensorBuffer random_bf16(Device& dev, Stream& s, Shape shape, std::mt19937& rng) {
  TensorBuffer t(dev, DType::BF16, shape, MemTag::Activation, s, "bench");
  std::vector<bf16> host(static_cast<size_t>(shape.numel()));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : host) x = float_to_bf16(u(rng));
  dev.memcpy_async(t.view().data(), host.data(), t.view().size_bytes(), s);
  s.synchronize();  // host vector dies at scope end
  return t;
}

TensorBuffer empty(Device& dev, Stream& s, DType t, Shape shape) {
  return TensorBuffer(dev, t, shape, MemTag::Activation, s, "bench");
}

// Raw row-major C (m, n) = A (m, k) @ op(B), B stored (n, k) when trans_b, else (k, n); bf16 in,
// c_type out, fp32 compute; `batch` strided problems (stride 0 = shared).
void raw_gemm(cublasHandle_t h, int m, int n, int k, bool trans_b, const void* a, long long sa,
              const void* b, long long sb, void* c, long long sc, cudaDataType_t c_type,
              int batch) {
  const float alpha = 1.0f, beta = 0.0f;
  const cublasOperation_t opb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldb = trans_b ? k : n;
  MOEZERO_CUDA_CHECK(cublasGemmStridedBatchedEx(
      h, opb, CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16BF, ldb, sb, a, CUDA_R_16BF, k, sa, &beta,
      c, c_type, n, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void bench_gemm(Device& dev, Stream& s, cublasHandle_t h, std::mt19937& rng, std::vector<Row>& out,
                int64_t m, int64_t n, int64_t k) {
  TensorBuffer a = random_bf16(dev, s, Shape{m, k}, rng);
  TensorBuffer b = random_bf16(dev, s, Shape{n, k}, rng);  // nn.Linear layout: (out, in)
  TensorBuffer c = empty(dev, s, DType::BF16, Shape{m, n});
  GemmArgs g{a, b, c, Transpose::No, Transpose::Yes, 1.0f, 0.0f};
  const double flops = 2.0 * m * n * k;
  const double ours = time_ms(
      dev, s, [&] { dev.ops().gemm(s, g); }, 10);
  const double base = time_ms(
      dev, s,
      [&] {
        raw_gemm(h, int(m), int(n), int(k), true, a.view().data(), 0, b.view().data(), 0,
                 c.view().data(), 0, CUDA_R_16BF, 1);
      },
      10);
  out.push_back({"gemm", std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k),
                 "TFLOP/s", ours, flops / ours / 1e9, flops / base / 1e9});
}

void bench_grouped(Device& dev, Stream& s, cublasHandle_t h, std::mt19937& rng,
                   std::vector<Row>& out) {
  const std::vector<int64_t> rows{3072, 2560, 2048, 2048, 1792, 1536, 1792, 1536};  // 16384
  const int64_t C = 2048, F = 5632, M = std::accumulate(rows.begin(), rows.end(), int64_t{0});
  const int64_t E = static_cast<int64_t>(rows.size());
  TensorBuffer x = random_bf16(dev, s, Shape{M, C}, rng);
  TensorBuffer w = random_bf16(dev, s, Shape{E, F, C}, rng);
  TensorBuffer y = empty(dev, s, DType::BF16, Shape{M, F});
  std::vector<GemmProblem> probs;
  int64_t r0 = 0;
  for (int64_t e = 0; e < E; ++e) {
    probs.push_back({x.view().slice_rows(r0, r0 + rows[e]),
                     w.view().view_elems(e * F * C, Shape{F, C}),
                     y.view().slice_rows(r0, r0 + rows[e])});
    r0 += rows[e];
  }
  const double flops = 2.0 * M * F * C;
  const double ours = time_ms(
      dev, s, [&] { dev.ops().grouped_gemm(s, probs, Transpose::No, Transpose::Yes, 1.0f, 0.0f); },
      10);
  const double base = time_ms(
      dev, s,
      [&] {
        raw_gemm(h, int(M), int(F), int(C), true, x.view().data(), 0, w.view().data(), 0,
                 y.view().data(), 0, CUDA_R_16BF, 1);
      },
      10);
  out.push_back({"grouped_gemm", "E=8 M=16384 F=5632 C=2048", "TFLOP/s", ours, flops / ours / 1e9,
                 flops / base / 1e9});
}

void bench_attention(Device& dev, Stream& s, cublasHandle_t h, std::mt19937& rng,
                     std::vector<Row>& out) {
  const int64_t B = 1, T = 2048, Hq = 32, Hkv = 8, D = 128;
  TensorBuffer q = random_bf16(dev, s, Shape{B, T, Hq, D}, rng);
  TensorBuffer k = random_bf16(dev, s, Shape{B, T, Hkv, D}, rng);
  TensorBuffer v = random_bf16(dev, s, Shape{B, T, Hkv, D}, rng);
  TensorBuffer o = empty(dev, s, DType::BF16, Shape{B, T, Hq, D});
  TensorBuffer lse = empty(dev, s, DType::F32, Shape{B, Hq, T});
  TensorBuffer dout = random_bf16(dev, s, Shape{B, T, Hq, D}, rng);
  TensorBuffer dq = empty(dev, s, DType::BF16, Shape{B, T, Hq, D});
  TensorBuffer dk = empty(dev, s, DType::BF16, Shape{B, T, Hkv, D});
  TensorBuffer dv = empty(dev, s, DType::BF16, Shape{B, T, Hkv, D});
  // Baseline: per head S = Q K^T (T, T) then O = S V, as two strided-batched GEMMs.
  TensorBuffer kb = random_bf16(dev, s, Shape{B * Hq, T, D}, rng);  // one K, V per query head
  TensorBuffer vb = random_bf16(dev, s, Shape{B * Hq, T, D}, rng);
  TensorBuffer sc = empty(dev, s, DType::BF16, Shape{B * Hq, T, T});
  TensorBuffer ob = empty(dev, s, DType::BF16, Shape{B * Hq, T, D});
  const double causal_fwd = 2.0 * 2.0 * B * Hq * T * T * D / 2.0;
  const double full_fwd = 2.0 * causal_fwd;
  const double fwd = time_ms(
      dev, s, [&] { dev.ops().attention_forward(s, q, k, v, o, lse); }, 5);
  const double bwd = time_ms(
      dev, s, [&] { dev.ops().attention_backward(s, q, k, v, o, lse, dout, dq, dk, dv); }, 3);
  const double base = time_ms(
      dev, s,
      [&] {
        raw_gemm(h, int(T), int(T), int(D), true, q.view().data(), T * D, kb.view().data(), T * D,
                 sc.view().data(), T * T, CUDA_R_16BF, int(B * Hq));
        raw_gemm(h, int(T), int(D), int(T), false, sc.view().data(), T * T, vb.view().data(), T * D,
                 ob.view().data(), T * D, CUDA_R_16BF, int(B * Hq));
      },
      5);
  const std::string shape = "B=1 T=2048 Hq=32 Hkv=8 D=128";
  out.push_back(
      {"attention_fwd", shape, "TFLOP/s", fwd, causal_fwd / fwd / 1e9, full_fwd / base / 1e9});
  out.push_back({"attention_bwd", shape, "TFLOP/s", bwd, 2.5 * causal_fwd / bwd / 1e9,
                 full_fwd / base / 1e9});
}

void bench_gather(Device& dev, Stream& s, std::mt19937& rng, std::vector<Row>& out) {
  const int64_t T = 16384, C = 4096, k = 2, N = T * k;
  TensorBuffer x = random_bf16(dev, s, Shape{T, C}, rng);
  TensorBuffer y = empty(dev, s, DType::BF16, Shape{N, C});
  TensorBuffer perm = empty(dev, s, DType::I32, Shape{N});
  std::vector<int32_t> p(static_cast<size_t>(N));
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), rng);
  dev.memcpy_async(perm.view().data(), p.data(), p.size() * sizeof(int32_t), s);
  s.synchronize();
  const double bytes = 2.0 * N * C * 2.0;  // read + write of every output row
  const double ours = time_ms(
      dev, s, [&] { dev.ops().gather_rows(s, x, perm, int(k), y); }, 10);
  const double base = time_ms(
      dev, s,
      [&] {
        dev.memcpy_async(y.view().data(), x.view().data(), x.view().size_bytes(), s);
        dev.memcpy_async(static_cast<char*>(y.view().data()) + x.view().size_bytes(),
                         x.view().data(), x.view().size_bytes(), s);
      },
      10);
  out.push_back(
      {"gather_rows", "N=32768 C=4096 bf16", "GB/s", ours, bytes / ours / 1e6, bytes / base / 1e6});
}

}  // namespace

int main() {
  try {
    std::string why;
    if (!cuda_available(&why)) {
      std::printf("skipped: %s\n", why.c_str());
      return 0;
    }
    auto dev = make_cuda_device(0);
    Stream& s = dev->default_stream();
    std::mt19937 rng(1234);
    cublasHandle_t h = nullptr;
    MOEZERO_CUDA_CHECK(cublasCreate(&h));
    MOEZERO_CUDA_CHECK(cublasSetStream(h, cuda::cuda_stream_handle(s)));
    std::vector<Row> rows;
    bench_gemm(*dev, s, h, rng, rows, 4096, 4096, 4096);
    bench_gemm(*dev, s, h, rng, rows, 16384, 5632, 2048);
    bench_grouped(*dev, s, h, rng, rows);
    bench_attention(*dev, s, h, rng, rows);
    bench_gather(*dev, s, rng, rows);
    s.synchronize();
    MOEZERO_CUDA_CHECK(cublasDestroy(h));

    std::printf("\nCUDA kernels on %s (ratio = ours / baseline in this run)\n",
                dev->name().c_str());
    std::printf("%-14s %-30s %10s %12s %12s %8s\n", "op", "shape", "ms", "ours", "baseline",
                "ratio");
    for (const Row& r : rows) {
      std::printf("%-14s %-30s %10.3f %8.1f %-3s %8.1f %-3s %8.2f\n", r.name.c_str(),
                  r.shape.c_str(), r.ms, r.ours, r.unit == "GB/s" ? "GB" : "TF", r.base,
                  r.unit == "GB/s" ? "GB" : "TF", r.ours / r.base);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernels_cuda_bench: %s\n", e.what());
    return 1;
  }
}
