// report/step_breakdown.h — "where the step goes": from a trace's spans, the time each kind of
// work and each module takes on the compute stream, per step, as a share of the step, and the
// rate achieved where a span says how much work it did (flops: TFLOP/s; bytes: GB/s). The
// same on CUDA and CPU traces (both time spans with stream events: docs/trace.md).
//
// Definitions. A rank-step is one (pid, args.step) of the trace (spans without args.step, from
// older trainers, form one rank-step per rank). Its step time is the extent of all its spans on
// every track (first start to last end). Compute-stream spans (tid 0) nest; a nested span is
// keyed by its top-level span: "moe fwd > experts fwd". Keys:
//   kind:   the span's name without "layers.N." ("attn fwd", "experts bwd"); stalls on a
//           parameter group's gather "wait gather", other stalls their name ("wait a2a",
//           "wait reduce-scatter", ...); collectives their op ("all_reduce").
//   module: the top-level span's full name ("layers.0.moe fwd"), then " > " and the nested
//           span's kind.
// Derived per-expert spans (args.timing "flops share") are left out: their "experts" span is
// the measurement. Per row: count and ms are means per rank-step; share = sum of durations /
// sum of step times; tflops = sum flops / sum duration over the row's spans when every one of
// them carries args.flops, gbps likewise from args.bytes. The row "(no compute span)" is the
// step time not covered by any top-level compute-stream span: idle, or work without a span.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace moezero::report {

struct BreakdownRow {
  std::string key;
  double count = 0.0;  // spans per rank-step
  double ms = 0.0;     // per rank-step
  double share = 0.0;  // of the step time
  std::optional<double> tflops, gbps;
};

struct StepBreakdown {
  int64_t rank_steps = 0;
  bool has_step_args = true;  // false: an older trace; each rank's spans form one group
  double step_ms = 0.0;       // mean over rank-steps
  std::vector<BreakdownRow> by_kind, by_module;  // by ms, largest first; idle row last
};

// [in] trace_json: a Chrome trace written by the trainer; [in] where: names it in errors.
// Throws moezero::Error naming `where` for text that is not a trace.
StepBreakdown compute_step_breakdown(const std::string& trace_json, const std::string& where);
// Reads `path` (errors name it) and computes its breakdown.
StepBreakdown read_step_breakdown(const std::string& path);
// The two tables under a "== Where the step goes ... ==" heading.
void write_step_breakdown(std::ostream& os, const StepBreakdown& b);

}  // namespace moezero::report
