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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
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

  // bf16 operands for the bf16 matmul path (a (m, k) used as both A and B: m == n here).
  const bool native16 = cpu::bf16_gemm_available();
  std::vector<bf16> a16(a.size());
  for (size_t i = 0; i < a.size(); ++i) a16[i] = float_to_bf16(a[i]);
  std::atomic<bool> go{false};
  std::atomic<int> done{0};
  std::atomic<bool> leave{false};
  auto rank = [&](std::vector<float>* c) {
    std::vector<float> c16(static_cast<size_t>(m * n));
    while (!go.load()) std::this_thread::yield();
    for (int rep = 0; rep < 3; ++rep) {
      const cpu::F32Gemm g{a.data(), b.data(), c->data(), m, n, k, false, false, 1.0f, 0.0f};
      cpu::run_f32_gemms({&g, 1});
      if (native16) {  // and the bf16 matmul path, where there is one
        cpu::F32Gemm g16{nullptr, nullptr, c16.data(), m, n, k, false, false, 1.0f, 0.0f};
        g16.a16 = a16.data(), g16.b16 = a16.data();
        cpu::run_f32_gemms({&g16, 1});
      }
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
// Deep GEMMs (weight gradients: the depth is the tokens) are cut into more, smaller tiles so that
// no single tile is the long pole of its parallel loop; shallow ones keep up to 512 x 256.
TEST(CpuGemmThreads, DeepGemmsGetSmallerTiles) {
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(cpu::gemm_tile_shape(1024, 128, 128), P(512, 128));  // dense forward
  EXPECT_EQ(cpu::gemm_tile_shape(632, 256, 128), P(256, 256));   // an expert's forward
  EXPECT_EQ(cpu::gemm_tile_shape(128, 128, 1024), P(64, 128));   // dense weight gradient
  EXPECT_EQ(cpu::gemm_tile_shape(128, 256, 1004), P(64, 128));   // a busy expert's gradient
  EXPECT_EQ(cpu::gemm_tile_shape(128, 256, 3), P(128, 256));     // an idle one's
  EXPECT_EQ(cpu::gemm_tile_shape(30, 20, 100000), P(64, 64));    // never below 64 x 64
  for (const auto& [m, n, k] :
       {std::tuple<int64_t, int64_t, int64_t>{1000, 700, 50}, {128, 128, 1024}, {600, 520, 300}}) {
    const auto [tm, tn] = cpu::gemm_tile_shape(m, n, k);
    EXPECT_TRUE(tm * tn * k <= 256 * 256 * 128 || (tm == 64 && tn == 64)) << m << " " << n;
    EXPECT_TRUE(tm <= 512 && tn <= 256 && tm % 64 == 0 && tn % 64 == 0) << tm << " " << tn;
  }
}

TEST(CpuGemmThreads, ResultDoesNotDependOnThreadCount) {
  for (const auto& [m, n, k] :
       {std::tuple<int64_t, int64_t, int64_t>{600, 520, 300}, {128, 256, 1004}, {100, 30, 77}}) {
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
}

// bf16 x bf16 GEMMs run natively (oneDNN bf16 matmul) where the CPU has bf16 dot products, and
// give the same bits with one thread and with all of them; products of bf16 are exact in fp32,
// so the result is within fp32 accumulation error of the fp32 GEMM on the widened values.
TEST(CpuGemmThreads, Bf16GemmIsNativeOnBf16MachinesAndDeterministic) {
  __builtin_cpu_init();
  const cpu::GemmLibraryInfo info = cpu::gemm_library_info();
  if (info.library.rfind("oneDNN", 0) == 0 && __builtin_cpu_supports("avx512bf16")) {
    EXPECT_TRUE(cpu::bf16_gemm_available()) << "this CPU has avx512_bf16: " << info.kernels;
  }
  if (!cpu::bf16_gemm_available()) GTEST_SKIP() << "no native bf16 GEMM here: " << info.kernels;
  const int64_t m = 300, n = 270, k = 130;
  std::vector<bf16> a16(static_cast<size_t>(m * k)), b16(static_cast<size_t>(k * n));
  std::vector<float> a32(a16.size()), b32(b16.size());
  const auto ar = random_matrix(a16.size(), 5), br = random_matrix(b16.size(), 6);
  for (size_t i = 0; i < a16.size(); ++i)
    a16[i] = float_to_bf16(ar[i]), a32[i] = bf16_to_float(a16[i]);
  for (size_t i = 0; i < b16.size(); ++i)
    b16[i] = float_to_bf16(br[i]), b32[i] = bf16_to_float(b16[i]);
  for (const bool tb : {false, true}) {
    auto run = [&](int threads, bool native) {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                                static_cast<size_t>(threads));
      std::vector<float> c(static_cast<size_t>(m * n), 1.0f);
      cpu::F32Gemm g{native ? nullptr : a32.data(),
                     native ? nullptr : b32.data(),
                     c.data(),
                     m,
                     n,
                     k,
                     false,
                     tb,
                     0.5f,
                     2.0f};
      if (native) g.a16 = a16.data(), g.b16 = b16.data();
      cpu::run_f32_gemms({&g, 1});
      return c;
    };
    const std::vector<float> one = run(1, true);
    EXPECT_EQ(one, run(tbb::this_task_arena::max_concurrency(), true)) << "tb " << tb;
    const std::vector<float> f32 = run(1, false);
    double worst = 0.0;
    for (size_t i = 0; i < one.size(); ++i)
      worst = std::max(worst, double(std::fabs(one[i] - f32[i])));
    EXPECT_LT(worst, 1e-4) << "tb " << tb << ": bf16 matmul vs fp32 GEMM of the same values";
  }
}

// `moezero train --gemm-profile`: every tile call is counted under its shape and layout while
// the profile is on, nothing while it is off, and enabling again starts from zero.
TEST(CpuGemmThreads, GemmProfileCountsEveryTileByShape) {
  const int64_t m = 1024, n = 128, k = 128;  // tiles of 512 x 128: two per call
  const auto [tm, tn] = cpu::gemm_tile_shape(m, n, k);
  ASSERT_EQ(tm, 512);
  ASSERT_EQ(tn, 128);
  const auto a = random_matrix(static_cast<size_t>(m * k), 5);
  const auto b = random_matrix(static_cast<size_t>(k * n), 6);
  std::vector<float> c(static_cast<size_t>(m * n));
  auto run = [&](bool tb, int times) {
    const cpu::F32Gemm g{a.data(), b.data(), c.data(), m, n, k, false, tb, 1.0f, 0.0f};
    for (int i = 0; i < times; ++i) cpu::run_f32_gemms({&g, 1});
  };
  // A line of the report: its label, then this many tiles.
  auto has = [](const std::string& rep, const std::string& label, int tiles) {
    return std::regex_search(rep, std::regex("\\n +" + label + " +" + std::to_string(tiles) +
                                             " tiles +[0-9.]+ s +[0-9.]+ GFLOP/s\\n"));
  };
  run(false, 1);  // before the profile: not counted
  cpu_gemm_profile_enable(true);
  run(false, 3);
  run(true, 2);
  const std::string rep = cpu_gemm_profile_report();
  EXPECT_TRUE(has(rep, "all", 10)) << rep;
  EXPECT_TRUE(has(rep, "A N, B N", 6)) << rep;
  EXPECT_TRUE(has(rep, "A N, B T", 4)) << rep;
  EXPECT_TRUE(has(rep, "512 x 128 x 128 NN", 6)) << rep;
  EXPECT_TRUE(has(rep, "512 x 128 x 128 NT", 4)) << rep;
  EXPECT_EQ(rep.find(" 0.0 GFLOP/s"), std::string::npos) << "a tile with no time: " << rep;
  cpu_gemm_profile_enable(false);
  run(false, 2);
  EXPECT_TRUE(has(cpu_gemm_profile_report(), "all", 0)) << cpu_gemm_profile_report();
  cpu_gemm_profile_enable(true);  // starts from zero
  run(true, 1);
  EXPECT_TRUE(has(cpu_gemm_profile_report(), "all", 2)) << cpu_gemm_profile_report();
  cpu_gemm_profile_enable(false);
}

}  // namespace
}  // namespace moezero::test
