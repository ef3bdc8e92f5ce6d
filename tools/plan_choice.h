// tools/plan_choice.h — which strategy `moezero plan` recommends (issue 28): the fastest that
// fits the GPU's memory, unless another one is within the jitter of the steps measured, in
// which case the rows are a tie and the one with the least peak memory is recommended.
//
// Jitter: the simulator is deterministic for a given input (docs/plan.md), so repeating a run
// measures nothing; what varies is the step itself (routing drifts, the cache and prefetch
// adapt), so the jitter of a row is max / min - 1 of its measured steps' times (two steps by
// default). Two rows tie when they differ by no more than the larger of their jitters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moezero::cli {

struct PlanCandidate {
  std::string name;         // the strategy
  double step_ms = 0.0;     // median over the measured steps
  double jitter = 0.0;      // max / min - 1 of the measured steps' times
  uint64_t peak_bytes = 0;  // the largest present rank's allocator peak
  bool fits = false;        // peak_bytes within the GPU's memory
};

struct PlanChoice {
  std::string fastest;      // the fastest candidate that fits (first listed on equal times)
  std::string recommended;  // of `tied`, the least peak (then the faster, then first listed)
  // The candidates that fit within the jitter of `fastest`, fastest first (ties by list
  // order); one entry when there is no tie.
  std::vector<std::string> tied;
};

// nullopt when no candidate fits.
std::optional<PlanChoice> choose_plan(const std::vector<PlanCandidate>& candidates);

// The jitter of a row's measured step times (0 for fewer than two).
double step_jitter(const std::vector<double>& step_ms);

// The memory a strategy's peak must fit per GPU: the GPU's [in] gpu_bytes, or the config's
// [in] memory_limit (train.memory_limit, 0: none) when that is smaller (the trainer refuses
// to allocate past it, as on a real GPU).
struct PlanMemory {
  uint64_t bytes = 0;
  bool from_memory_limit = false;  // bytes is train.memory_limit
};
PlanMemory plan_memory(uint64_t gpu_bytes, uint64_t memory_limit);

}  // namespace moezero::cli
