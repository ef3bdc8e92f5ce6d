// kernels/sim/measured_profile.h — the `measured` compute profile of the simulated backend:
// a GPU profile whose per-op-kind efficiencies come from a kernel benchmark's --json
// (kernels_cuda_bench on that GPU, kernels_cpu_bench on this machine) instead of the library
// curves of kernels/sim/gpu_profiles.json. docs/plan.md, "Compute profiles: library and
// measured".
//
// The benchmark's file holds, per op case, the op kind (its core/ops.def name), the count it
// is rated by (FLOPs for compute-bound cases, bytes read + written for memory-bound ones), the
// time per call, and the FLOPs and bytes the simulator charges for that call (sim_flops,
// sim_bytes; an in-place op's bytes count twice there). Sizes and rates are taken in the
// simulator's counts when the file has them, else in the case's. For an op kind the file
// measured, the simulator's duration of a call of size x (its FLOPs or bytes) is the
// library's duration divided by
// ratio(x) = measured rate / library rate, interpolated linearly in log x and log ratio
// between the measured sizes and held at the nearest one outside them. At a measured size the
// duration is exactly the measured one; elsewhere the library curve's shape (a small op's
// fixed cost) scales by the measured efficiency. Compute-bound kinds keep the library's
// memory-bound floor (roofline). Op kinds the file does not measure keep the library curve.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moezero::sim {

struct GpuProfile;

// The rates of one benchmark file, by op kind.
struct MeasuredRates {
  struct Point {
    double size = 0;  // FLOPs (compute-bound) or bytes (memory-bound) of one call
    double rate = 0;  // achieved FLOP/s or bytes/s
    bool bf16 = false;
  };
  struct Kind {
    bool compute = false;       // rated by FLOPs (else by bytes)
    std::vector<Point> points;  // sorted by size
  };
  std::string origin;  // the file (or "compiled in: kernels/sim/measured/NAME.json")
  std::string bench;   // the program that wrote it
  std::string device;  // the device it ran on, as that program named it
  std::map<std::string, Kind, std::less<>> kinds;

  // Seconds of one call of `op` on `library` (before `sharing`); nullopt when the file does
  // not measure `op`. flops, bf16 and bytes as the simulator counts them (kernels/sim).
  std::optional<double> seconds(const GpuProfile& library, std::string_view op, double flops,
                                bool bf16, double bytes) const;
  // measured rate / library rate of `op`'s measured cases: geometric mean (1 when unmeasured).
  double mean_ratio(const GpuProfile& library, std::string_view op) const;
};

// Parses a benchmark's --json text. Throws UserError "ORIGIN: PROBLEM" on anything but a valid
// file: not JSON, no cases, an op that is not in core/ops.def, a rate or size not > 0.
MeasuredRates parse_measured_rates(std::string_view text, const std::string& origin);
// Reads and parses `path` (an unreadable file is "PATH: cannot read: REASON").
MeasuredRates load_measured_rates(const std::string& path);

// The measured file compiled in for GPU profile `gpu` (kernels/sim/measured/<gpu>.json at
// build time), or nullopt when the build has none.
std::optional<MeasuredRates> compiled_in_measured_rates(const std::string& gpu);

// plan's choice (`--compute-profile`, `--measured-json`): mode "" (default), "library" or
// "measured"; path "" (none given). Default: measured when a file is given or compiled in for
// the GPU, else library. Sets gpu.measured and returns the line plan prints, e.g.
// "compute profile: measured (FILE, 3 of 41 op kinds measured on DEVICE by BENCH; ...)".
// Throws UserError naming the flag or the file on a bad choice or a bad file.
std::string choose_compute_profile(GpuProfile& gpu, const std::string& mode,
                                   const std::string& path);

// The op kinds of core/ops.def.
const std::vector<std::string>& op_kind_names();

}  // namespace moezero::sim
