// kernels/cpu/cpu_gemm_profile.cpp — the per-tile timing of `moezero train --gemm-profile`
// (cpu_gemm_profile_enable, cpu_gemm_profile_report: kernels/backend.h): wall time and FLOPs
// of every tile call, by tile shape and operand layout.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_gemm_tile.h"

namespace moezero::cpu {
namespace {

// The per-tile timing of `moezero train --gemm-profile` (cpu_gemm_profile_enable): off by
// default, when it costs one relaxed load per tile.
struct GemmProfile {
  struct Entry {
    int64_t calls = 0;
    double seconds = 0, flops = 0;
  };
  // (m, n, k, A transposed, B transposed, bf16 operands) of one tile call
  using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, bool>;
  std::atomic<bool> on{false};
  std::mutex mu;
  std::map<Key, Entry> tiles;
};

GemmProfile& gemm_profile() {
  static GemmProfile p;
  return p;
}

}  // namespace

// One tile [i0, i1) x [j0, j1) of g's C (timed when the profile is on).
void run_tile(const F32Gemm& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  GemmProfile& prof = gemm_profile();
  if (!prof.on.load(std::memory_order_relaxed)) return run_tile_untimed(g, i0, i1, j0, j1);
  const auto t0 = std::chrono::steady_clock::now();
  run_tile_untimed(g, i0, i1, j0, j1);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t m = i1 - i0, n = j1 - j0;
  std::lock_guard lock(prof.mu);
  GemmProfile::Entry& e = prof.tiles[{m, n, g.k, g.ta, g.tb, g.a16 != nullptr}];
  ++e.calls;
  e.seconds += dt;
  e.flops += 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(g.k);
}

}  // namespace moezero::cpu

namespace moezero {

void cpu_gemm_profile_enable(bool on) {
  cpu::GemmProfile& prof = cpu::gemm_profile();
  std::lock_guard lock(prof.mu);
  prof.tiles.clear();
  prof.on.store(on, std::memory_order_relaxed);
}

std::string cpu_gemm_profile_report(size_t top) {
  cpu::GemmProfile& prof = cpu::gemm_profile();
  std::lock_guard lock(prof.mu);
  using Entry = cpu::GemmProfile::Entry;
  // "NT" (A as is, B transposed), "+ bf16" for native bf16 operands
  auto op = [](bool ta, bool tb, bool b16) {
    return std::string(ta ? "T" : "N") + (tb ? "T" : "N") + (b16 ? " bf16" : "");
  };
  Entry all;
  std::map<std::string, Entry> layouts;  // by op()
  std::vector<std::pair<cpu::GemmProfile::Key, Entry>> shapes(prof.tiles.begin(), prof.tiles.end());
  for (const auto& [key, e] : shapes) {
    const auto& [m, n, k, ta, tb, b16] = key;
    for (Entry* to : {&all, &layouts[op(ta, tb, b16)]}) {
      to->calls += e.calls;
      to->seconds += e.seconds;
      to->flops += e.flops;
    }
  }
  auto line = [](const std::string& what, const Entry& e) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-28s %9lld tiles %9.3f s %7.1f GFLOP/s\n", what.c_str(),
                  static_cast<long long>(e.calls), e.seconds,
                  e.seconds > 0 ? e.flops / e.seconds * 1e-9 : 0.0);
    return std::string(buf);
  };
  std::string out = "gemm profile (CPU GEMM tiles, every thread, wall time per tile call):\n";
  out += line("all", all);
  for (const auto& [name, e] : layouts)
    out += line("A " + name.substr(0, 1) + ", B " + name.substr(1), e);
  std::sort(shapes.begin(), shapes.end(),
            [](const auto& x, const auto& y) { return x.second.seconds > y.second.seconds; });
  if (shapes.size() > top) shapes.resize(top);
  out += "  the " + std::to_string(shapes.size()) +
         " tile shapes (m x n x k, op) with the most time:\n";
  for (const auto& [key, e] : shapes) {
    const auto& [m, n, k, ta, tb, b16] = key;
    out += line("  " + std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k) +
                    " " + op(ta, tb, b16),
                e);
  }
  return out;
}

}  // namespace moezero
