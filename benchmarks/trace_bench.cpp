// benchmarks/trace_bench.cpp — the cost of tracing: step time of the same training run
// untraced and traced (profile.trace on, every step recorded), on the tiny example config by
// default, with the ratio traced / untraced measured in the same process.
//
//   trace_bench [CONFIG] [--steps N] [--repeats R] [--set section.key=value ...]
//
// After one unmeasured warm-up run, each repeat runs both modes back to back (alternating which
// goes first), so drift of the machine load hits both alike. Step time is the median over
// steps 2..N of every repeat (step 1 records the prefetch order and warms the allocator).
// "untraced" still times every collective with two device events (the comm_ms of the metrics,
// always on); "traced" adds the spans, instants and counters of every step and writes the file at
// the end (the write is outside the step times and reported separately).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "train/trainer.h"

using namespace moezero;

namespace {

struct Mode {
  const char* name;
  bool traced;
  std::vector<double> step_ms;
  double write_s = 0.0;  // whole run minus the sum of its steps (includes the trace write)
  uintmax_t file_bytes = 0;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string path = MOEZERO_SOURCE_DIR "/examples/configs/tiny.json";
    int steps = 8, repeats = 3;
    std::vector<std::string> overrides;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--steps" && i + 1 < argc)
        steps = std::stoi(argv[++i]);
      else if (a == "--repeats" && i + 1 < argc)
        repeats = std::stoi(argv[++i]);
      else if (a == "--set" && i + 1 < argc)
        overrides.push_back(argv[++i]);
      else
        path = a;
    }
    overrides.push_back("train.steps=" + std::to_string(steps));
    const Config cfg = load_config(path, overrides);
    const std::string trace_file =
        (std::filesystem::temp_directory_path() / "moezero_trace_bench.json").string();
    Mode modes[2] = {{"untraced", false, {}}, {"traced", true, {}}};
    train::train(cfg, {});  // warm-up (allocator, thread pools, page faults), not measured
    for (int r = 0; r < repeats; ++r)
      for (int k = 0; k < 2; ++k) {
        Mode& m = modes[(k + r) % 2];
        train::TrainOptions opt;
        if (m.traced) opt.trace_path = trace_file;
        const auto t0 = std::chrono::steady_clock::now();
        const train::TrainResult res = train::train(cfg, opt);
        const double run_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        double steps_s = 0.0;
        for (size_t s = 0; s < res.steps.size(); ++s) {
          const double ms = 1e3 * double(res.steps[s].tokens) / res.steps[s].tokens_per_s;
          steps_s += ms / 1e3;
          if (s > 0) m.step_ms.push_back(ms);
        }
        m.write_s += (run_s - steps_s) / repeats;
        if (m.traced) m.file_bytes = std::filesystem::file_size(trace_file);
      }
    std::filesystem::remove(trace_file);
    std::printf("trace_bench: %s, %lld ranks, %d steps x %d repeats (median of steps 2..%d)\n",
                path.c_str(), static_cast<long long>(cfg.parallel.world_size), steps, repeats,
                steps);
    std::printf("%-10s %14s %16s %12s %10s\n", "mode", "step ms", "run - steps (s)", "file bytes",
                "ratio");
    const double base = median(modes[0].step_ms);
    for (const Mode& m : modes)
      std::printf("%-10s %14.2f %16.3f %12ju %10.3f\n", m.name, median(m.step_ms), m.write_s,
                  m.file_bytes, base > 0 ? median(m.step_ms) / base : 0.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trace_bench: %s\n", e.what());
    return 1;
  }
}
