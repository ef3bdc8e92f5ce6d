// benchmarks/kernels_cuda_bench.cpp — CUDA throughput on the op-case table's GpuBench cases
// (kernels/op_cases), each next to a raw-library baseline measured in the same run.
//
// Each case is rated by the count it declares: compute-bound cases (gemm, grouped_gemm,
// attention) in TFLOP/s of the case's FLOP count, against raw cublasGemmEx (bf16 in and out,
// fp32 compute) at 4096^3; memory-bound cases in GB/s of the case's bytes read + written,
// against cudaMemcpyAsync D2D of 1 GiB (bytes read + written). Last column: ratio = ours /
// baseline (1.0 = as fast as the library). Times are CUDA-event means over several iterations
// after warm-up; inputs are the case's own, generated from a fixed seed. Without a usable GPU
// it prints "skipped: <reason>" and exits 0 (1 with --json: no file is written).
// Usage: kernels_cuda_bench [--quick] [--filter SUBSTRING] [--json PATH]
//   --quick: fewer iterations; --filter: only cases whose name contains SUBSTRING; --json: also
//   write each case's op kind, shapes and rate (benchmarks/bench_rates_json.h), which `moezero
//   plan --measured-json PATH` reads as the measured compute profile of this GPU.
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/bench_rates_json.h"
#include "core/cuda_check.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_objects.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/op_cases/op_case.h"

using namespace moezero;

namespace {

int g_iters = 10;

// Mean ms per call of f over g_iters calls after two warm-up calls.
double time_ms(Device& dev, Stream& s, const std::function<void()>& f) {
  for (int i = 0; i < 2; ++i) f();
  auto e0 = dev.create_event();
  auto e1 = dev.create_event();
  e0->record(s);
  for (int i = 0; i < g_iters; ++i) f();
  e1->record(s);
  e1->synchronize();
  return static_cast<double>(e1->elapsed_ms_since(*e0)) / g_iters;
}

// Raw cuBLAS, row-major C (n, n) = A (n, n) @ B (n, n): bf16 in and out, fp32 compute.
double cublas_tflops(Device& dev, Stream& s, int64_t n) {
  cublasHandle_t h = nullptr;
  MOEZERO_CUDA_CHECK(cublasCreate(&h));
  MOEZERO_CUDA_CHECK(cublasSetStream(h, cuda::cuda_stream_handle(s)));
  MOEZERO_CUDA_CHECK(cublasSetMathMode(h, cuda::kCublasMathMode));  // as our GEMMs run
  TensorBuffer a(dev, DType::BF16, Shape{n, n}, MemTag::Activation, s, "bench");
  TensorBuffer b(dev, DType::BF16, Shape{n, n}, MemTag::Activation, s, "bench");
  TensorBuffer c(dev, DType::BF16, Shape{n, n}, MemTag::Activation, s, "bench");
  dev.ops().fill(s, a, 0.01);
  dev.ops().fill(s, b, 0.01);
  const float alpha = 1.0f, beta = 0.0f;
  const int ni = static_cast<int>(n);
  const double ms = time_ms(dev, s, [&] {
    MOEZERO_CUDA_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha,
                                    b.view().data(), CUDA_R_16BF, ni, a.view().data(), CUDA_R_16BF,
                                    ni, &beta, c.view().data(), CUDA_R_16BF, ni, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
  });
  s.synchronize();
  MOEZERO_CUDA_CHECK(cublasDestroy(h));
  return 2.0 * n * n * n / ms / 1e9;
}

double memcpy_gbs(Device& dev, Stream& s) {
  const int64_t bytes = int64_t{1} << 30;
  TensorBuffer a(dev, DType::I32, Shape{bytes / 4}, MemTag::Activation, s, "bench");
  TensorBuffer b(dev, DType::I32, Shape{bytes / 4}, MemTag::Activation, s, "bench");
  const double ms = time_ms(dev, s, [&] {
    dev.memcpy_async(b.view().data(), a.view().data(), static_cast<size_t>(bytes), s);
  });
  return 2.0 * static_cast<double>(bytes) / ms / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  std::string filter, json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      g_iters = 3;
    } else if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: kernels_cuda_bench [--quick] [--filter SUBSTRING] [--json PATH]\n");
      return 2;
    }
  }
  try {
    std::string why;
    if (!cuda_available(&why)) {
      std::printf("skipped: %s\n", why.c_str());
      if (json_path.empty()) return 0;
      std::fprintf(stderr, "kernels_cuda_bench: --json %s: not written, no GPU to measure\n",
                   json_path.c_str());
      return 1;  // a measured profile was asked for: none is no success
    }
    bench::RatesJson json(json_path, "kernels_cuda_bench");
    auto dev = make_cuda_device(0);
    Stream& s = dev->default_stream();
    json.set_device(dev->name());
    const double compute_base = cublas_tflops(*dev, s, 4096), memory_base = memcpy_gbs(*dev, s);
    std::printf("\nCUDA kernels on %s (ratio = ours / baseline in this run)\n",
                dev->name().c_str());
    std::printf("baselines: cublasGemmEx bf16 4096^3 %.1f TFLOP/s; memcpy D2D 1 GiB %.1f GB/s\n",
                compute_base, memory_base);
    std::printf("%-52s %10s %12s %12s %8s\n", "case", "ms", "ours", "baseline", "ratio");
    for (const cases::OpCase* c : cases::cases_of(cases::SizeClass::GpuBench)) {
      if (!filter.empty() && c->name.find(filter) == std::string::npos) continue;
      double ms = 0;
      {
        cases::CaseTensors t(*dev, s, *c, c->inputs(1234));
        ms = time_ms(*dev, s, [&] { c->run(dev->ops(), s, t.views()); });
        s.synchronize();
      }
      json.add(*c, ms * 1e-3);
      const bool compute = c->bound == cases::Bound::Compute;
      const double ours = compute ? c->flops / ms / 1e9 : c->bytes / ms / 1e6;
      const double base = compute ? compute_base : memory_base;
      const char* unit = compute ? "TF" : "GB";
      std::printf("%-52s %10.3f %8.1f %-3s %8.1f %-3s %8.2f\n", c->name.c_str(), ms, ours, unit,
                  base, unit, ours / base);
      std::fflush(stdout);
    }
    json.write();
    if (!json_path.empty()) std::printf("json: %s\n", json_path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernels_cuda_bench: %s\n", e.what());
    return 1;
  }
}
