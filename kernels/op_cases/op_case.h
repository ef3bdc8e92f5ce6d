// kernels/op_cases/op_case.h — the op-case table: every op of core/ops.def at a few shapes and
// dtypes, each case carrying what every kernel check needs (in the manner of ggml's
// test-backend-ops). Consumers: tests/kernels/op_cases_test.cpp (each case on each compiled
// backend against its float64 reference, and CUDA against CPU), `moezero selfcheck` (the Test
// cases on every available backend) and the kernel benchmarks (the CpuBench / GpuBench cases,
// rated by their FLOP or byte counts).
//
// A case is data plus three functions:
//   inputs(seed)     the initial host values of every tensor (inputs and `+=` outputs); float
//                    values are generated already rounded to their dtype, so the device holds
//                    exactly what the reference reads. `=` outputs are left empty.
//   reference(v)     the op in float64 on the host: overwrites the Out/InOut entries of v.
//   run(ops, s, t)   enqueues the op on s; t are the device tensors in spec order.
// Integer outputs must match exactly; float outputs within the case's (or the tensor's) Tol,
// see Tol, whose `why` says where the bound comes from.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace moezero::cases {

// Which consumer a case is sized for.
enum class SizeClass : uint8_t {
  Test,      // small, odd shapes: tests and selfcheck (milliseconds each on one core)
  CpuBench,  // kernels_cpu_bench
  GpuBench,  // kernels_cuda_bench
};
const char* size_class_name(SizeClass c);

// What a tensor is to the op.
enum class Role : uint8_t {
  In,     // read only; given by inputs()
  Out,    // `=` output; poisoned (NaN / 0x7ffffff0; i8 -128) before a check so a missed write shows
  InOut,  // `+=` output or updated in place; initial values given by inputs()
};

// Which count a benchmark rates a case by (GFLOP/s or GB/s).
enum class Bound : uint8_t { Compute, Memory };

// |got - ref| <= atol + of_max * max|ref| + rtol * |ref| (max over the tensor: for outputs
// whose error scales with the largest term, e.g. gradients summed over many rows).
struct Tol {
  double rtol = 0.0, atol = 0.0;
  std::string why;  // where the bound comes from
  double of_max = 0.0;
};

struct TensorSpec {
  std::string name;
  DType dtype;
  Shape shape;
  Role role = Role::In;
  std::optional<Tol> tol = std::nullopt;  // this output's bound, when not the case's
};

// Host contents of a case's tensors in spec order, one double per element (exact for every
// dtype the table uses). An empty entry: not given (an `=` output before the op).
using HostValues = std::vector<std::vector<double>>;

struct OpCase {
  std::string op;    // the core/ops.def name
  std::string name;  // op + dtype + shape, unique in the table
  SizeClass size = SizeClass::Test;
  std::vector<TensorSpec> tensors;
  Tol tol;             // float outputs without their own
  double flops = 0.0;  // arithmetic of one call (multiply-add = 2)
  double bytes = 0.0;  // bytes read + written by one call (each tensor once)
  Bound bound = Bound::Memory;
  std::function<HostValues(uint64_t seed)> inputs;
  std::function<void(HostValues& v)> reference;
  std::function<void(Ops& ops, Stream& s, std::span<const Tensor> t)> run;
};

// The whole table (built once; immutable).
const std::vector<OpCase>& all_cases();
std::vector<const OpCase*> cases_of(SizeClass size);

// ---- helpers for writing cases -------------------------------------------------------------
double round_to(DType t, double v);  // nearest value of dtype t (RNE), identity for ints/f64

// Seeded generator of host values.
class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  // n values uniform in [lo, hi), rounded to t.
  std::vector<double> uniform(DType t, int64_t n, double lo = -1.0, double hi = 1.0);
  // n integers uniform in [lo, hi] (inclusive).
  std::vector<double> ints(int64_t n, int64_t lo, int64_t hi);
  std::mt19937_64& rng() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

// ---- running cases -------------------------------------------------------------------------
// The device copies of a case's tensors; an empty host entry leaves the tensor zero-filled.
class CaseTensors {
 public:
  CaseTensors(Device& dev, Stream& s, const OpCase& c, const HostValues& values);
  std::span<const Tensor> views() const { return views_; }
  // Synchronizes s, then reads every tensor back.
  HostValues download(Stream& s) const;

 private:
  Device* dev_;
  const OpCase* case_;
  std::vector<TensorBuffer> bufs_;
  std::vector<Tensor> views_;
};

// inputs(seed) with `=` outputs poisoned, as a check uploads them.
HostValues initial_values(const OpCase& c, uint64_t seed);
// reference() applied to a copy of `initial`.
HostValues reference_values(const OpCase& c, const HostValues& initial);
// Uploads `initial` to dev, runs the case on its default stream, downloads every tensor.
HostValues run_on(Device& dev, const OpCase& c, const HostValues& initial);

struct Comparison {
  bool ok = true;
  double worst = 0.0;  // max over checked elements of |err| / bound (<= 1 passes)
  std::string detail;  // the first failing tensor and its worst element, or the worst ratio
};
// Compares the Out/InOut tensors of got with ref (ints exactly; floats within their Tol, its
// bounds multiplied by tol_scale).
Comparison compare(const OpCase& c, const HostValues& got, const HostValues& ref,
                   double tol_scale = 1.0);
// The whole check: initial values from seed, run on dev, compare with the f64 reference.
Comparison check_against_reference(Device& dev, const OpCase& c, uint64_t seed);

}  // namespace moezero::cases
