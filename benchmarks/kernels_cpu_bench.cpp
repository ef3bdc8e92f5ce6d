// benchmarks/kernels_cpu_bench.cpp — throughput of the CPU backend on the op-case table's
// CpuBench cases (kernels/op_cases), each next to a baseline measured in the same run.
//
// Each case is rated by the count it declares: compute-bound cases (GEMMs, attention) in
// GFLOP/s of the case's FLOP count, against raw single-threaded cblas_sgemm at 512^3 (one call
// on this thread, no TBB); memory-bound cases in GB/s of the case's bytes read + written,
// against single-threaded std::memcpy of a 64 MiB buffer. The last column is op / baseline:
// above 1 means the op uses more than one core well (the CPU backend parallelises over TBB),
// below 1 means overhead. Inputs are the case's own, generated from a fixed seed.
// Usage: kernels_cpu_bench [--quick] [--filter SUBSTRING] [--json PATH]
//   --quick: ~4x shorter timing windows; --filter: only cases whose name contains SUBSTRING;
//   --json: also write each case's op kind, shapes and rate (benchmarks/bench_rates_json.h),
//   which `moezero plan --measured-json PATH` reads as the measured compute profile.
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/bench_rates_json.h"
#include "benchmarks/bench_timing.h"
#include "kernels/backend.h"
#include "kernels/op_cases/op_case.h"

namespace {

namespace mc = moezero::cases;

double g_window_s = 0.4;  // timing window per case

// Seconds per call of fn (after one warm-up call), repeated until the window is filled.
double time_per_call(const std::function<void()>& fn) {
  fn();
  return moezero::bench::seconds_per_call(fn, g_window_s);
}

double raw_sgemm_gflops(int64_t n) {
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n);
  const double s = time_per_call([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, a.data(),
                int(n), b.data(), int(n), 0.0f, c.data(), int(n));
  });
  return 2.0 * n * n * n / s * 1e-9;
}

double memcpy_gbs() {
  const size_t bytes = 64u << 20;
  std::vector<char> a(bytes, 1), b(bytes);
  const double s = time_per_call([&] { std::memcpy(b.data(), a.data(), bytes); });
  return 2.0 * bytes / s * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  std::string filter, json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      g_window_s = 0.1;
    } else if (a == "--filter" && i + 1 < argc) {
      filter = argv[++i];
    } else if (a == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: kernels_cpu_bench [--quick] [--filter SUBSTRING] [--json PATH]\n");
      return 2;
    }
  }
  try {
    moezero::bench::RatesJson json(json_path, "kernels_cpu_bench");
    auto dev = moezero::make_cpu_device();  // pins OpenBLAS to one thread per call
#ifdef OPENBLAS_VERSION
    openblas_set_num_threads(1);
#endif
    moezero::Stream& s = dev->default_stream();
    json.set_device(dev->name());
    const double compute_base = raw_sgemm_gflops(512), memory_base = memcpy_gbs();
    std::printf("baselines: sgemm 512^3 one thread %.1f GFLOP/s; memcpy 64 MiB %.1f GB/s\n",
                compute_base, memory_base);
    std::printf("%-52s %10s %10s %-7s %10s %8s\n", "case", "ms/call", "rate", "unit", "baseline",
                "ratio");
    for (const mc::OpCase* c : mc::cases_of(mc::SizeClass::CpuBench)) {
      if (!filter.empty() && c->name.find(filter) == std::string::npos) continue;
      mc::CaseTensors t(*dev, s, *c, c->inputs(42));
      const double sec = time_per_call([&] {
        c->run(dev->ops(), s, t.views());
        s.synchronize();
      });
      json.add(*c, sec);
      const bool compute = c->bound == mc::Bound::Compute;
      const double rate = (compute ? c->flops : c->bytes) / sec * 1e-9;
      const double base = compute ? compute_base : memory_base;
      std::printf("%-52s %10.3f %10.1f %-7s %10.1f %8.2f\n", c->name.c_str(), sec * 1e3, rate,
                  compute ? "GFLOP/s" : "GB/s", base, rate / base);
      std::fflush(stdout);
    }
    json.write();
    if (!json_path.empty()) std::printf("json: %s\n", json_path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernels_cpu_bench: %s\n", e.what());
    return 1;
  }
}
