// benchmarks/gemm_rate.cpp — single-thread sgemm rate of the GEMM libraries this build links,
// on given shapes: the denominator of benchmarks/cpu_vs_torch.py's "fraction of the machine's
// GEMM rate" (that script takes, per shape, the best of these and of torch.mm).
//
// Usage: gemm_rate [--footprint MB] M,N,K [M,N,K ...]
//        (row-major C(M,N) = A(M,K) B(K,N), no transposes)
// Prints one JSON object: {"shapes": [[M,N,K],...], "<library>": [GFLOP/s per shape], ...} with a
// key per library: "onednn" (dnnl_sgemm, one OpenMP thread) when built with oneDNN, and
// "cblas" (the linked CBLAS, OpenBLAS here: its kernels follow OPENBLAS_CORETYPE; one thread
// through OPENBLAS_NUM_THREADS=1, which this program sets before the first call). Each rate is
// the median of 5 timing windows of ~0.1 s after 3 warm-up calls.
//
// --footprint MB (default 0: every call on the same, cache-hot A, B, C): successive calls cycle
// through as many separate (A, B, C) sets as fill MB, so that each call finds its operands where
// a training step finds them, beyond the core's caches when MB is well above them (issue 14's
// note: on this machine 2-8 MB keeps them hot, 32 MB and more gives the same rate as 128).
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "benchmarks/bench_timing.h"

#if MOEZERO_HAVE_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

namespace {

struct Shape {
  long m, n, k;
};

// GFLOP/s of fn (2 m n k FLOPs per call): median of 5 windows.
double rate(const Shape& s, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  const double flop = 2.0 * double(s.m) * double(s.n) * double(s.k);
  std::vector<double> r;
  for (int w = 0; w < 5; ++w) r.push_back(flop / moezero::bench::seconds_per_call(fn, 0.1) * 1e-9);
  std::sort(r.begin(), r.end());
  return r[2];
}

void print_list(const char* key, const std::vector<double>& v) {
  std::printf(", \"%s\": [", key);
  for (size_t i = 0; i < v.size(); ++i) std::printf("%s%.2f", i ? ", " : "", v[i]);
  std::printf("]");
}

}  // namespace

int main(int argc, char** argv) {
  setenv("OPENBLAS_NUM_THREADS", "1", 0);
  std::vector<Shape> shapes;
  long footprint_mb = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--footprint") {
      char* end = nullptr;
      footprint_mb = i + 1 < argc ? std::strtol(argv[i + 1], &end, 10) : -1;
      if (i + 1 >= argc || end == argv[i + 1] || *end != '\0' || footprint_mb < 0 ||
          footprint_mb > 4096) {
        std::fprintf(stderr,
                     "gemm_rate: --footprint needs a whole number of MB in 0..4096, got '%s'\n",
                     i + 1 < argc ? argv[i + 1] : "");
        return 2;
      }
      ++i;
      continue;
    }
    Shape s{};
    if (std::sscanf(argv[i], "%ld,%ld,%ld", &s.m, &s.n, &s.k) != 3 || s.m <= 0 || s.n <= 0 ||
        s.k <= 0 || s.m * s.k > (1L << 28) || s.k * s.n > (1L << 28) || s.m * s.n > (1L << 28)) {
      std::fprintf(stderr,
                   "gemm_rate: argument %d '%s' is not M,N,K (positive, each matrix under "
                   "2^28 elements)\n",
                   i, argv[i]);
      return 2;
    }
    shapes.push_back(s);
  }
  if (shapes.empty()) {
    std::fprintf(stderr, "usage: gemm_rate [--footprint MB] M,N,K [M,N,K ...]\n");
    return 2;
  }
  std::vector<double> cb, dn;
  for (const Shape& s : shapes) {
    // Operand sets: one, or as many as fill the footprint; call i uses set i mod sets.
    const size_t floats = size_t(s.m * s.k + s.k * s.n + s.m * s.n);
    const size_t sets =
        std::max<size_t>(1, size_t(footprint_mb) * (size_t{1} << 20) / (floats * sizeof(float)));
    std::vector<std::vector<float>> as(sets, std::vector<float>(size_t(s.m * s.k), 0.5f)),
        bs(sets, std::vector<float>(size_t(s.k * s.n), 0.25f)),
        cs(sets, std::vector<float>(size_t(s.m * s.n), 0.0f));
    size_t next = 0;
    auto set = [&] {
      const size_t i = next;
      next = (next + 1) % sets;
      return i;
    };
    cb.push_back(rate(s, [&] {
      const size_t i = set();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.m), int(s.n), int(s.k), 1.0f,
                  as[i].data(), int(s.k), bs[i].data(), int(s.n), 0.0f, cs[i].data(), int(s.n));
    }));
#if MOEZERO_HAVE_ONEDNN
    omp_set_num_threads(1);
    dn.push_back(rate(s, [&] {
      const size_t i = set();
      if (dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.0f, as[i].data(), s.k, bs[i].data(), s.n, 0.0f,
                     cs[i].data(), s.n) != dnnl_success) {
        std::fprintf(stderr, "gemm_rate: dnnl_sgemm failed (%ld, %ld, %ld)\n", s.m, s.n, s.k);
        std::exit(1);
      }
    }));
#endif
  }
  std::printf("{\"shapes\": [");
  for (size_t i = 0; i < shapes.size(); ++i)
    std::printf("%s[%ld, %ld, %ld]", i ? ", " : "", shapes[i].m, shapes[i].n, shapes[i].k);
  std::printf("], \"footprint_mb\": %ld", footprint_mb);
  print_list("cblas", cb);
  if (!dn.empty()) print_list("onednn", dn);
  std::printf("}\n");
  return 0;
}
