// benchmarks/bench_rates_json.h — `--json PATH` of the kernel benchmarks (kernels_cpu_bench,
// kernels_cuda_bench): per op case its op kind (the core/ops.def name), tensors (dtype,
// shape), the count it is rated by and the achieved rate, plus the device. `moezero plan
// --measured-json PATH` reads it as the measured compute profile (kernels/sim/measured_profile.h,
// docs/kernels.md). Written through core/output_file.h: every write, the flush and the close
// are checked, and a failure is one error naming the path.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/output_file.h"
#include "kernels/op_cases/op_case.h"
#include "kernels/sim/sim_device.h"

namespace moezero::bench {

// The counts the simulator charges for one call of case c (kernels/sim/sim_ops.cpp): its
// FLOPs and bytes read + written, read off the virtual clocks of two simulated devices whose
// profiles have rate 1 in one unit and an unlimited other. They may differ from the case's
// own counts (an in-place op's tensor is read and written); with them the measured profile
// gives a call of a measured shape exactly its measured time.
struct SimCounts {
  double flops = 0, bytes = 0;
};
inline SimCounts sim_counts(const cases::OpCase& c) {
  auto charged = [&](bool per_flop) {
    sim::GpuProfile p;
    p.name = per_flop ? "unit-flop" : "unit-byte";
    p.bf16_flops = p.fp32_flops = per_flop ? 1.0 : 1e300;
    p.hbm_bytes_per_s = per_flop ? 1e300 : 1.0;
    p.host_link_bytes_per_s = 1e300;
    p.memory_bytes = uint64_t{1} << 60;
    sim::SimDeviceOptions o;
    o.compute_backed = false;  // counts only: nothing computes
    auto dev = sim::make_sim_device(0, p, o);
    Stream& s = dev->default_stream();
    std::vector<TensorBuffer> bufs;
    std::vector<Tensor> views;
    for (const cases::TensorSpec& t : c.tensors) {
      bufs.emplace_back(*dev, t.dtype, t.shape, MemTag::Activation, s, "sim_counts");
      views.push_back(bufs.back().view());
    }
    dev->synchronize();
    const double t0 = dev->virtual_time_s().value_or(0.0);
    c.run(dev->ops(), s, views);
    dev->synchronize();
    return dev->virtual_time_s().value_or(0.0) - t0;
  };
  SimCounts n;
  n.flops = charged(true);
  n.bytes = charged(false);
  if (n.flops < 1e-200 * n.bytes) n.flops = 0;  // a streaming op: bytes over the huge bandwidth
  return n;
}

class RatesJson {
 public:
  // path "": nothing is written. Otherwise the file is created now (a missing folder fails
  // before minutes of benchmarking, not after).
  RatesJson(std::string path, const std::string& bench) : path_(std::move(path)) {
    if (path_.empty()) return;
    write_output_file(path_, "", "--json");
    doc_["format"] = "moezero-kernel-rates";
    doc_["version"] = 1;
    doc_["bench"] = bench;
    doc_["cases"] = nlohmann::ordered_json::array();
  }

  void set_device(const std::string& device) { doc_["device"] = device; }

  // One case timed at `seconds` per call: rate = its FLOPs (compute-bound) or bytes read +
  // written (memory-bound) per second, in FLOP/s or bytes/s.
  void add(const cases::OpCase& c, double seconds) {
    if (path_.empty()) return;
    const bool compute = c.bound == cases::Bound::Compute;
    nlohmann::ordered_json j;
    j["name"] = c.name;
    j["op"] = c.op;
    j["dtype"] = c.tensors.empty() ? "" : std::string(dtype_name(c.tensors.front().dtype));
    nlohmann::ordered_json ts = nlohmann::ordered_json::array();
    for (const cases::TensorSpec& t : c.tensors)
      ts.push_back({{"name", t.name},
                    {"dtype", std::string(dtype_name(t.dtype))},
                    {"shape", t.shape.dims()}});
    j["tensors"] = ts;
    j["bound"] = compute ? "compute" : "memory";
    j["flops"] = c.flops;
    j["bytes"] = c.bytes;
    const SimCounts sc = sim_counts(c);
    j["sim_flops"] = sc.flops;
    j["sim_bytes"] = sc.bytes;
    j["seconds"] = seconds;
    j["rate"] = (compute ? c.flops : c.bytes) / seconds;
    j["unit"] = compute ? "FLOP/s" : "bytes/s";
    doc_["cases"].push_back(std::move(j));
  }

  void write() const {
    if (!path_.empty()) write_output_file(path_, doc_.dump(1) + "\n", "--json");
  }

 private:
  std::string path_;
  nlohmann::ordered_json doc_;
};

}  // namespace moezero::bench
