// kernels/op_cases/cases_quant.cpp — cases of the block-wise int8 quantisation ops
// (quantize_int8_blocks, dequantize_int8_blocks) and of their round trip with its error bound.
//
// The references follow core/ops.def's fp32 arithmetic in float64, rounding to fp32 where the op
// does: a quotient or product of two fp32 values computed in float64 and rounded once to fp32
// is the correctly rounded fp32 result (53 >= 2 * 24 + 2 bits), so q, scales and dequantised
// values must match exactly; only the round trip carries a tolerance, the bound of the format.
#include <algorithm>
#include <cmath>

#include "kernels/op_cases/families.h"

namespace moezero::cases {
namespace {

const Tol kQuantExact{0.0, 0.0, "exact: the fp32 steps of core/ops.def, emulated in float64"};

double f32(double v) { return static_cast<double>(static_cast<float>(v)); }
int64_t num_blocks(int64_t n, int64_t block) { return (n + block - 1) / block; }

// q and scales of x as core/ops.def defines them (finite inputs).
void ref_quantize(const std::vector<double>& x, int64_t block, std::vector<double>& q,
                  std::vector<double>& scales) {
  const auto n = static_cast<int64_t>(x.size());
  q.assign(x.size(), 0.0);
  scales.assign(static_cast<size_t>(num_blocks(n, block)), 0.0);
  for (int64_t b = 0; b * block < n; ++b) {
    const int64_t lo = b * block, hi = std::min(n, lo + block);
    double amax = 0.0;
    for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(x[size_t(i)]));
    const double scale = f32(amax / 127.0);
    scales[size_t(b)] = scale;
    if (scale == 0.0) continue;
    for (int64_t i = lo; i < hi; ++i)
      q[size_t(i)] = std::clamp(std::nearbyint(f32(x[size_t(i)] / scale)), -127.0, 127.0);
  }
}

// Random values rounded to t, with every third block zero (the all-zero rule), and values of a
// wide range of magnitudes per block (scales differ).
std::vector<double> quant_inputs(Gen& r, DType t, int64_t n, int64_t block, bool zero_blocks) {
  std::vector<double> x = r.uniform(t, n, -1.0, 1.0);
  for (int64_t b = 0; b * block < n; ++b) {
    const double mag = std::ldexp(1.0, int(b % 7) - 3);  // 2^-3 .. 2^3: exact in every dtype
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
      x[size_t(i)] = zero_blocks && b % 3 == 1 ? 0.0 : round_to(t, x[size_t(i)] * mag);
  }
  return x;
}

std::string quant_name(const char* op, DType t, int64_t n, int64_t block, const char* extra = "") {
  return std::string(op) + " " + dt(t) + " " + shape_text({n}) + " block " + std::to_string(block) +
         extra;
}

OpCase quantize_case(SizeClass size, DType t, int64_t n, int64_t block) {
  OpCase c;
  c.op = "quantize_int8_blocks";
  c.size = size;
  c.name = quant_name("quantize_int8_blocks", t, n, block);
  const int64_t nb = num_blocks(n, block);
  c.tensors = {{"x", t, Shape{n}},
               {"q", DType::I8, Shape{n}, Role::Out},
               {"scales", DType::F32, Shape{nb}, Role::Out}};
  c.tol = kQuantExact;
  c.flops = 2.0 * n;
  c.inputs = [=](uint64_t seed) {
    Gen r(seed);
    return HostValues{quant_inputs(r, t, n, block, size == kT), {}, {}};
  };
  c.reference = [=](HostValues& v) { ref_quantize(v[0], block, v[1], v[2]); };
  c.run = [=](Ops& ops, Stream& s, std::span<const Tensor> x) {
    ops.quantize_int8_blocks(s, x[0], x[1], x[2], block);
  };
  return c;
}

OpCase dequantize_case(SizeClass size, DType t, int64_t n, int64_t block, bool accumulate) {
  OpCase c;
  c.op = "dequantize_int8_blocks";
  c.size = size;
  c.name = quant_name("dequantize_int8_blocks", t, n, block, accumulate ? " +=" : "");
  const int64_t nb = num_blocks(n, block);
  c.tensors = {{"q", DType::I8, Shape{n}},
               {"scales", DType::F32, Shape{nb}},
               {"x", t, Shape{n}, accumulate ? Role::InOut : Role::Out}};
  c.tol = kQuantExact;
  c.flops = accumulate ? 2.0 * n : double(n);
  c.inputs = [=](uint64_t seed) {
    Gen r(seed);
    HostValues v{r.ints(n, -127, 127), r.uniform(DType::F32, nb, 0.0, 0.05), {}};
    if (nb > 1) v[1][1] = 0.0;  // an all-zero block's scale
    if (accumulate) v[2] = r.uniform(t, n);
    return v;
  };
  c.reference = [=](HostValues& v) {
    v[2].resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      const double p = f32(v[0][size_t(i)] * v[1][size_t(i / block)]);
      v[2][size_t(i)] = round_to(t, accumulate ? f32(v[2][size_t(i)] + p) : p);
    }
  };
  c.run = [=](Ops& ops, Stream& s, std::span<const Tensor> x) {
    ops.dequantize_int8_blocks(s, x[0], x[1], x[2], block, accumulate);
  };
  return c;
}

// quantize, then dequantize into "back": q and scales exact, back within the format's bound
// |x - back| <= scale_b / 2 <= max|x| / 254, plus the fp32 rounding of x / scale (2^-24 of
// 127 steps) and of the product, plus the output dtype's RNE rounding for bf16 (2^-9).
OpCase round_trip_case(DType t, int64_t n, int64_t block) {
  OpCase c = quantize_case(kT, t, n, block);
  c.op = "quantize_int8_blocks";
  c.name = quant_name("quantize+dequantize", t, n, block);
  const double half_step = (1.0 / 254) * (1.0 + std::ldexp(1.0, -20));
  const Tol bound = t == DType::F32
                        ? Tol{std::ldexp(1.0, -23), 0.0, "scale_b / 2 + fp32 product", half_step}
                        : Tol{std::ldexp(1.0, -8), 0.0, "scale_b / 2 + bf16 RNE", half_step};
  c.tensors.push_back({"back", t, Shape{n}, Role::Out, bound});
  c.inputs = [=](uint64_t seed) {
    Gen r(seed);
    return HostValues{quant_inputs(r, t, n, block, false), {}, {}, {}};
  };
  c.reference = [=](HostValues& v) {
    ref_quantize(v[0], block, v[1], v[2]);
    v[3] = v[0];
  };
  c.run = [=](Ops& ops, Stream& s, std::span<const Tensor> x) {
    ops.quantize_int8_blocks(s, x[0], x[1], x[2], block);
    ops.dequantize_int8_blocks(s, x[1], x[2], x[3], block, false);
  };
  return c;
}

}  // namespace

void add_quant_cases(std::vector<OpCase>& out) {
  const DType f32t = DType::F32, bf16t = DType::BF16, f16t = DType::F16;
  out.push_back(quantize_case(kT, f32t, 1000, 64));     // short last block (40)
  out.push_back(quantize_case(kT, bf16t, 777, 32));     // bf16 input, short last block (9)
  out.push_back(quantize_case(kT, f16t, 130, 7));       // f16 input, odd block
  out.push_back(quantize_case(kT, f32t, 50, 2048));     // one block longer than x
  out.push_back(quantize_case(kT, f32t, 40000, 2048));  // several CPU tasks, many GPU blocks
  for (bool acc : {false, true}) {
    out.push_back(dequantize_case(kT, f32t, 1000, 64, acc));
    out.push_back(dequantize_case(kT, bf16t, 777, 32, acc));
  }
  out.push_back(dequantize_case(kT, f16t, 130, 7, false));
  out.push_back(round_trip_case(f32t, 4099, 256));
  out.push_back(round_trip_case(bf16t, 3001, 128));
  // Benchmarks: a bf16 parameter shard well past the caches, ZeRO++'s block size.
  for (SizeClass sc : {kC, kG}) {
    const int64_t n = sc == kC ? int64_t{1} << 22 : int64_t{1} << 26;
    out.push_back(quantize_case(sc, bf16t, n, 2048));
    out.push_back(dequantize_case(sc, bf16t, n, 2048, false));
  }
}

}  // namespace moezero::cases
