// tests/kernels/gemm_threads_test.cpp — the CPU GEMM library runs each call on one thread:
// two ranks' GEMMs running at once (two threads, each splitting its GEMMs over oneTBB) must not
// add threads to the process (Debian's oneDNN would fork a GNU OpenMP team of nproc threads per
// calling thread unless each caller is pinned to one). Its own executable, so that no earlier
// test has already grown the process's thread pools. Also: the kernel family the GEMM library
// picked must use the machine's widest vector units (an AVX-512 machine running OpenBLAS's SSE3
// "Prescott" kernels fails here), and results do not depend on the number of threads.
#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_common.h"

namespace moezero::test {
namespace {

// Threads of this process, from /proc/self/status.
int process_threads() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  ADD_FAILURE() << "no Threads: line in /proc/self/status";
  return -1;
}

std::vector<float> random_matrix(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Starts every oneTBB worker this process can have: max_concurrency tasks that wait (up to 2 s)
// until all of them run at once.
void start_all_tbb_workers() {
  const int n = tbb::this_task_arena::max_concurrency();
  std::atomic<int> arrived{0};
  tbb::parallel_for(0, n, 1, [&](int) {
    arrived.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (arrived.load() < n && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
  });
}

TEST(CpuGemmThreads, TwoConcurrentCallersDoNotAddThreads) {
  // Big enough that a multi-threaded library would split it (1024 x 1024 x 512 per caller, in
  // 16 tiles of 256 x 256).
  const int64_t m = 1024, n = 1024, k = 512;
  const auto a = random_matrix(static_cast<size_t>(m * k), 1);
  const auto b = random_matrix(static_cast<size_t>(k * n), 2);
  std::vector<float> c0(static_cast<size_t>(m * n)), c1(static_cast<size_t>(m * n));

  std::atomic<bool> go{false};
  std::atomic<int> done{0};
  std::atomic<bool> leave{false};
  auto rank = [&](std::vector<float>* c) {
    while (!go.load()) std::this_thread::yield();
    for (int rep = 0; rep < 3; ++rep) {
      const cpu::F32Gemm g{a.data(), b.data(), c->data(), m, n, k, false, false, 1.0f, 0.0f};
      cpu::run_f32_gemms({&g, 1});
    }
    done.fetch_add(1);
    while (!leave.load()) std::this_thread::yield();  // stay alive until counted
  };
  std::thread r0(rank, &c0), r1(rank, &c1);
  start_all_tbb_workers();
  const int before = process_threads();
  go.store(true);
  int most = before;
  while (done.load() < 2) {
    most = std::max(most, process_threads());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const int after = process_threads();
  leave.store(true);
  r0.join();
  r1.join();
  EXPECT_EQ(after, before) << "the GEMM calls started threads of their own (OpenMP team?): "
                           << cpu_gemm_description();
  EXPECT_EQ(most, before) << "threads were added while the GEMMs ran";
  EXPECT_EQ(c0, c1) << "two callers of the same GEMM got different results";
}

TEST(CpuGemmThreads, KernelFamilyUsesTheWidestUnits) {
  const cpu::GemmLibraryInfo info = cpu::gemm_library_info();
  const std::string desc = cpu_gemm_description();
  EXPECT_NE(desc.find(info.library), std::string::npos) << desc;
  EXPECT_NE(desc.find(info.kernels), std::string::npos) << desc;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    EXPECT_TRUE(info.avx512_class)
        << "this CPU has AVX-512 but the GEMM runs " << info.library << " '" << info.kernels
        << "' kernels (SSE/AVX2-class); build with oneDNN (libdnnl-dev) or set OPENBLAS_CORETYPE";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_TRUE(info.avx2_class) << "this CPU has AVX2 but the GEMM runs " << info.library << " '"
                                 << info.kernels << "' kernels";
  } else {
    GTEST_SKIP() << "CPU without AVX2: any kernel family is the widest it has (" << desc << ")";
  }
}

// Results do not depend on the number of cores: the same GEMMs (several tiles, uneven edges,
// every transpose) give the same bits with oneTBB limited to one thread and with all of them.
// (A row of C may depend on the call's M with oneDNN, whose kernels pick blockings by shape;
// tile boundaries are a function of the shape only, so that is deterministic too.)
TEST(CpuGemmThreads, ResultDoesNotDependOnThreadCount) {
  const int64_t m = 600, n = 520, k = 300;
  const auto a = random_matrix(static_cast<size_t>(m * k), 3);
  const auto b = random_matrix(static_cast<size_t>(k * n), 4);
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      auto run = [&](int threads) {
        tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                  static_cast<size_t>(threads));
        std::vector<float> c(static_cast<size_t>(m * n), 0.5f);
        const cpu::F32Gemm g{a.data(), b.data(), c.data(), m, n, k, ta, tb, 0.75f, 1.0f};
        cpu::run_f32_gemms({&g, 1});
        return c;
      };
      const int all = tbb::this_task_arena::max_concurrency();
      const std::vector<float> one = run(1);
      EXPECT_EQ(one, run(all)) << "ta " << ta << " tb " << tb << ": 1 vs " << all << " threads";
      EXPECT_EQ(one, run(1)) << "ta " << ta << " tb " << tb << ": not the same run to run";
    }
  }
}

}  // namespace
}  // namespace moezero::test
