// benchmarks/bench_timing.h — the timing window shared by the benchmark programs.
#pragma once

#include <chrono>

namespace moezero::bench {

// Seconds per call of fn: calls it until `window_s` seconds have passed (at least once).
template <typename F>
double seconds_per_call(F&& fn, double window_s) {
  using Clock = std::chrono::steady_clock;
  int reps = 0;
  const auto t0 = Clock::now();
  double el = 0;
  do {
    fn();
    ++reps;
    el = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (el < window_s);
  return el / reps;
}

}  // namespace moezero::bench
