// benchmarks/zero_stages_bench.cpp — ZeRO stages 0-3 on one config (default: the small
// example config at world size 4): tokens/s, peak bytes per rank (total and model states),
// gathered and reduced bytes per step, with ratios to stage 0 measured in the same run.
//
//   zero_stages_bench [CONFIG] [--steps N] [--set section.key=value ...]
//
// Tokens/s is the median over steps 2..N (step 1 records the prefetch order and warms the
// allocator). Byte counters are exact; times are wall clock on whatever else the machine runs.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "train/trainer.h"

using namespace moezero;

int main(int argc, char** argv) {
  try {
    std::string path = MOEZERO_SOURCE_DIR "/examples/configs/small.json";
    int steps = 6;
    std::vector<std::string> overrides = {"parallel.world_size=4"};
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--steps" && i + 1 < argc)
        steps = std::stoi(argv[++i]);
      else if (a == "--set" && i + 1 < argc)
        overrides.push_back(argv[++i]);
      else
        path = a;
    }
    overrides.push_back("train.steps=" + std::to_string(steps));
    struct Row {
      int stage;
      double tok_s;
      uint64_t peak, states, gathered, reduced;
    };
    std::vector<Row> rows;
    int world = 0;
    for (int stage = 0; stage <= 3; ++stage) {
      auto o = overrides;
      o.push_back("zero.stage=" + std::to_string(stage));
      Config cfg = load_config(path, o);
      world = static_cast<int>(cfg.parallel.world_size);
      train::TrainResult r = train::train(cfg, {});
      std::vector<double> tps;
      for (size_t s = 1; s < r.steps.size(); ++s) tps.push_back(r.steps[s].tokens_per_s);
      if (tps.empty()) tps.push_back(r.steps[0].tokens_per_s);
      std::nth_element(tps.begin(), tps.begin() + tps.size() / 2, tps.end());
      Row row{stage, tps[tps.size() / 2], 0, 0, 0, 0};
      for (const auto& s : r.steps)
        for (const auto& k : s.ranks) {
          row.peak = std::max(row.peak, k.peak_total_bytes);
          row.states = std::max<uint64_t>(row.states, k.peak_bytes[size_t(MemTag::ParamShard)] +
                                                          k.peak_bytes[size_t(MemTag::Grad)] +
                                                          k.peak_bytes[size_t(MemTag::OptimState)]);
        }
      const auto& last = r.steps.back().ranks[0];
      row.gathered = last.gathered_bytes;
      row.reduced = last.reduce_scattered_bytes + last.all_reduced_bytes;
      rows.push_back(row);
    }
    std::printf("ZeRO stages on %s, world size %d, %d steps (rank 0 bytes per step)\n",
                path.c_str(), world, steps);
    std::printf("%-6s %12s %14s %16s %16s %16s %10s %10s\n", "stage", "tokens/s", "peak B/rank",
                "states+grads B", "gathered B/step", "reduced B/step", "tok/s x", "peak x");
    for (const auto& r : rows)
      std::printf("%-6d %12.0f %14llu %16llu %16llu %16llu %10.2f %10.2f\n", r.stage, r.tok_s,
                  (unsigned long long)r.peak, (unsigned long long)r.states,
                  (unsigned long long)r.gathered, (unsigned long long)r.reduced,
                  r.tok_s / rows[0].tok_s, double(r.peak) / double(rows[0].peak));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zero_stages_bench: error: %s\n", e.what());
    return 1;
  }
}
