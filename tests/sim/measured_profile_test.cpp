// The measured compute profile (kernels/sim/measured_profile.h): a benchmark's --json read
// (tests/sim/measured_fixture.json), interpolated over size per op kind against a profile with
// round numbers, bad files refused naming the file, plan's choice of profile, and the
// simulated device costing a measured op by it.
#include "kernels/sim/measured_profile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include "benchmarks/bench_rates_json.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "kernels/op_cases/op_case.h"
#include "kernels/sim/sim_device.h"

namespace moezero::sim {
namespace {

const std::string kFixture = std::string(MOEZERO_SOURCE_DIR) + "/tests/sim/measured_fixture.json";

// 1 TFLOP/s bf16, 0.5 TFLOP/s fp32, 1 TB/s, no curves: library seconds = size / peak.
GpuProfile round_profile() {
  GpuProfile p;
  p.name = "round";
  p.bf16_flops = 1e12;
  p.fp32_flops = 0.5e12;
  p.hbm_bytes_per_s = 1e12;
  p.host_link_bytes_per_s = 1e10;
  p.memory_bytes = uint64_t{80} << 30;
  return p;
}

std::string scratch(const std::string& name, const std::string& body) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : ".") + "/" + name;
  std::ofstream(path) << body;
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.message();
  }
  return "(no error)";
}

TEST(MeasuredProfile, LoadsTheFixtureByOpKind) {
  const MeasuredRates r = load_measured_rates(kFixture);
  EXPECT_EQ(r.origin, kFixture);
  EXPECT_EQ(r.bench, "fixture");
  EXPECT_EQ(r.device, "round:0");
  ASSERT_EQ(r.kinds.size(), 2u);
  EXPECT_TRUE(r.kinds.at("gemm").compute);
  EXPECT_EQ(r.kinds.at("gemm").points.size(), 3u);
  EXPECT_FALSE(r.kinds.at("add").compute);
}

TEST(MeasuredProfile, MeasuredSizesTakeTheMeasuredTime) {
  const GpuProfile g = round_profile();
  const MeasuredRates r = load_measured_rates(kFixture);
  EXPECT_NEAR(*r.seconds(g, "gemm", 1e9, true, 1e6), 1e9 / 0.25e12, 1e-15);
  EXPECT_NEAR(*r.seconds(g, "gemm", 1e11, true, 1e7), 1e11 / 0.5e12, 1e-13);
  EXPECT_NEAR(*r.seconds(g, "gemm", 1e9, false, 1e6), 1e9 / 0.1e12, 1e-15);  // its dtype's point
  EXPECT_NEAR(*r.seconds(g, "add", 0, false, 1e8), 1e8 / 0.8e12, 1e-15);
}

TEST(MeasuredProfile, InterpolatesInLogSizeAndHoldsOutside) {
  const GpuProfile g = round_profile();
  const MeasuredRates r = load_measured_rates(kFixture);
  // 1e10 is halfway in log size: ratio sqrt(0.25 * 0.5).
  EXPECT_NEAR(*r.seconds(g, "gemm", 1e10, true, 0), 1e10 / 1e12 / std::sqrt(0.125), 1e-12);
  EXPECT_NEAR(*r.seconds(g, "gemm", 1e13, true, 0), 1e13 / 1e12 / 0.5, 1e-9);  // above: 0.5
  EXPECT_NEAR(*r.seconds(g, "gemm", 1e6, true, 0), 1e6 / 1e12 / 0.25, 1e-18);  // below: 0.25
  EXPECT_NEAR(*r.seconds(g, "add", 0, false, 1e7), 1e7 / 1e12 / std::sqrt(0.5 * 0.8), 1e-15);
  // The library's memory floor stays under a compute-bound kind (roofline).
  EXPECT_NEAR(*r.seconds(g, "gemm", 1e6, true, 1e9), 1e9 / 1e12, 1e-15);
  EXPECT_FALSE(r.seconds(g, "mul", 0, false, 1e6).has_value());  // not measured: library
  EXPECT_NEAR(r.mean_ratio(g, "add"), std::sqrt(0.4), 1e-12);
  EXPECT_EQ(r.mean_ratio(g, "mul"), 1.0);
}

TEST(MeasuredProfile, BadFilesNameTheFileAndTheProblem) {
  EXPECT_NE(error_of([] {
              load_measured_rates("/nonexistent/x.json");
            }).find("/nonexistent/x.json: cannot read"),
            std::string::npos);
  const std::string garbled = scratch("garbled.json", "{\"format\": ");
  EXPECT_NE(error_of([&] { load_measured_rates(garbled); }).find(garbled + ": not JSON"),
            std::string::npos);
  const std::string other = scratch("other.json", "{\"rows\": []}");
  EXPECT_NE(error_of([&] { load_measured_rates(other); }).find("not a kernel benchmark's --json"),
            std::string::npos);
  const std::string head = R"({"format": "moezero-kernel-rates", "bench": "b", "device": "d", )";
  EXPECT_NE(
      error_of([&] { parse_measured_rates(head + R"("cases": []})", "f"); }).find("f: no cases"),
      std::string::npos);
  const std::string unknown =
      head + R"("cases": [{"op": "matmul", "bound": "compute", "flops": 1, "rate": 1}]})";
  EXPECT_NE(error_of([&] {
              parse_measured_rates(unknown, "f");
            }).find("f: cases[0] has op 'matmul', not an op of core/ops.def"),
            std::string::npos);
  const std::string negative =
      head + R"("cases": [{"op": "add", "bound": "memory", "bytes": 8, "rate": -1}]})";
  EXPECT_NE(error_of([&] {
              parse_measured_rates(negative, "f");
            }).find("f: cases[0] has rate = -1, not a number > 0"),
            std::string::npos);
}

TEST(MeasuredProfile, PlanChoosesAProfileAndSaysWhich) {
  GpuProfile g = round_profile();
  EXPECT_NE(choose_compute_profile(g, "", "").find("compute profile: library"), std::string::npos);
  EXPECT_EQ(g.measured, nullptr);  // no file compiled in for "round"
  const std::string line = choose_compute_profile(g, "", kFixture);
  ASSERT_NE(g.measured, nullptr);
  EXPECT_NE(line.find("compute profile: measured (" + kFixture + ": 2 of " +
                      std::to_string(op_kind_names().size()) + " op kinds measured"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("add 0.632"), std::string::npos) << line;
  EXPECT_NE(choose_compute_profile(g, "library", "").find("as --compute-profile library asks"),
            std::string::npos);
  EXPECT_EQ(g.measured, nullptr);
  EXPECT_NE(error_of([&] {
              choose_compute_profile(g, "library", kFixture);
            }).find("contradicts --compute-profile library"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              choose_compute_profile(g, "measured", "");
            }).find("no kernels/sim/measured/round.json"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              choose_compute_profile(g, "fast", "");
            }).find("--compute-profile needs library or measured, got 'fast'"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              choose_compute_profile(g, "", "/nonexistent/m.json");
            }).find("plan: --measured-json /nonexistent/m.json: cannot read"),
            std::string::npos);
}

// A file with the simulator's counts (the benchmarks' --json): sizes and rates in them, so a
// call of the measured shape takes the measured time even where the case counts otherwise.
TEST(MeasuredProfile, SimulatorCountsWinOverTheCases) {
  const std::string doc = R"({"format": "moezero-kernel-rates", "bench": "b", "device": "d",
    "cases": [{"op": "scale", "bound": "memory", "flops": 0, "bytes": 100, "rate": 1e8,
               "sim_flops": 0, "sim_bytes": 200, "seconds": 1e-6}]})";
  const MeasuredRates r = parse_measured_rates(doc, "f");
  EXPECT_NEAR(*r.seconds(round_profile(), "scale", 0, false, 200), 1e-6, 1e-18);
}

// The benchmarks' sim_flops and sim_bytes for every bench case: the simulator charges a
// compute-bound case the FLOPs the case declares (within causal attention's diagonal), and
// every case some bytes.
TEST(MeasuredProfile, BenchCasesCountAsTheSimulatorCharges) {
  for (const auto size : {cases::SizeClass::CpuBench, cases::SizeClass::GpuBench}) {
    for (const cases::OpCase* c : cases::cases_of(size)) {
      const bench::SimCounts n = bench::sim_counts(*c);
      EXPECT_GT(n.bytes, 0) << c->name;
      if (c->bound == cases::Bound::Compute) EXPECT_NEAR(n.flops / c->flops, 1.0, 0.01) << c->name;
    }
  }
}

// Every kernels/sim/measured/<gpu>.json compiled in is a valid benchmark file.
TEST(MeasuredProfile, CompiledInFilesParse) {
  for (const std::string& gpu : gpu_profile_names()) {
    const std::optional<MeasuredRates> r = compiled_in_measured_rates(gpu);
    if (r) EXPECT_FALSE(r->kinds.empty()) << gpu;
  }
}

TEST(MeasuredProfile, SimulatedDeviceCostsMeasuredOps) {
  GpuProfile g = round_profile();
  g.measured = std::make_shared<const MeasuredRates>(load_measured_rates(kFixture));
  auto dev = make_sim_device(0, g);
  Stream& s = dev->create_stream("compute");
  const int64_t n = 1024;  // unbacked: 2 n^3 FLOPs, ratio interpolated at that size
  TensorBuffer a(*dev, DType::BF16, {n, n}, MemTag::Activation, s),
      b(*dev, DType::BF16, {n, n}, MemTag::Activation, s),
      c(*dev, DType::BF16, {n, n}, MemTag::Activation, s);
  dev->ops().gemm(s, GemmArgs{a, b, c});
  s.synchronize();
  const double flops = 2.0 * n * n * n;
  const double t = std::log(flops / 1e9) / std::log(100.0);
  const double ratio = std::exp(std::log(0.25) + t * (std::log(0.5) - std::log(0.25)));
  EXPECT_NEAR(*dev->virtual_time_s(), flops / 1e12 / ratio, 1e-12);
  dev->ops().scale(s, c, 2.0f);  // not measured: the library's bytes / bandwidth
  s.synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), flops / 1e12 / ratio + 2.0 * 2 * n * n / 1e12, 1e-12);
}

}  // namespace
}  // namespace moezero::sim
