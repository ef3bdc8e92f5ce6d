// kernels/op_cases/op_case.cpp — the table's registry and the machinery that runs a case on a
// device: upload of host values (rounded exactly as the generator rounded them), download,
// comparison against the float64 reference with each output's bound.
#include "kernels/op_cases/op_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "core/error.h"
#include "kernels/op_cases/families.h"

namespace moezero::cases {

const char* size_class_name(SizeClass c) {
  switch (c) {
    case SizeClass::Test: return "test";
    case SizeClass::CpuBench: return "cpu-bench";
    case SizeClass::GpuBench: return "gpu-bench";
  }
  return "?";
}

const std::vector<OpCase>& all_cases() {
  static const std::vector<OpCase> table = [] {
    std::vector<OpCase> t;
    add_linear_cases(t);
    add_elementwise_cases(t);
    add_norm_cases(t);
    add_router_cases(t);
    add_moe_cases(t);
    add_quant_cases(t);
    for (OpCase& c : t) {
      if (c.bytes == 0.0) c.bytes = tensor_bytes(c);
    }
    return t;
  }();
  return table;
}

std::vector<const OpCase*> cases_of(SizeClass size) {
  std::vector<const OpCase*> out;
  for (const OpCase& c : all_cases()) {
    if (c.size == size) out.push_back(&c);
  }
  return out;
}

double round_to(DType t, double v) {
  switch (t) {
    case DType::F32: return static_cast<float>(v);
    case DType::BF16: return bf16_to_float(float_to_bf16(static_cast<float>(v)));
    case DType::F16: return fp16_to_float(float_to_fp16(static_cast<float>(v)));
    default: return v;
  }
}

std::vector<double> Gen::uniform(DType t, int64_t n, double lo, double hi) {
  // 53 random bits scaled to [0, 1) (no distribution object: benchmark inputs are large).
  const double span = hi - lo;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = round_to(t, lo + span * static_cast<double>(rng_() >> 11) * 0x1.0p-53);
  return v;
}

std::vector<double> Gen::ints(int64_t n, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> d(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = static_cast<double>(d(rng_));
  return v;
}

std::string shape_text(std::initializer_list<int64_t> dims) {
  std::string s = "(";
  for (int64_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + ")";
}

double tensor_bytes(const OpCase& c) {
  double b = 0;
  for (const TensorSpec& t : c.tensors) {
    b += static_cast<double>(t.shape.numel()) * static_cast<double>(dtype_size_bytes(t.dtype));
  }
  return b;
}

Tol sum_tol(DType t, int64_t n_terms, double out_scale) {
  const double sq = std::sqrt(static_cast<double>(std::max<int64_t>(n_terms, 1)));
  if (t == DType::F32) {
    return {1e-5 * sq, (1e-5 * sq + 1e-6) * out_scale, "f32: ~sqrt(n) fp32 roundings of n terms"};
  }
  return {1.0 / 256.0, (1e-5 * sq + 1e-3) * out_scale,
          "bf16: output RNE rounding 2^-9 plus fp32 accumulation"};
}

void ref_sort_by_expert(const std::vector<double>& ids, int num_experts, std::vector<double>* perm,
                        std::vector<double>* inv_perm, std::vector<double>* offsets) {
  const size_t n = ids.size();
  offsets->assign(static_cast<size_t>(num_experts) + 1, 0.0);
  for (double id : ids) {
    if (id >= 0) (*offsets)[static_cast<size_t>(id) + 1] += 1;
  }
  for (int e = 0; e < num_experts; ++e) (*offsets)[e + 1] += (*offsets)[e];
  perm->assign(n, -1.0);
  inv_perm->assign(n, -1.0);
  std::vector<double> next(offsets->begin(), offsets->end() - 1);
  for (size_t a = 0; a < n; ++a) {
    if (ids[a] < 0) continue;
    const auto p = static_cast<size_t>(next[static_cast<size_t>(ids[a])]++);
    (*perm)[p] = static_cast<double>(a);
    (*inv_perm)[a] = static_cast<double>(p);
  }
}

// ---- upload / download ---------------------------------------------------------------------
namespace {

std::vector<uint8_t> to_bytes(DType t, const std::vector<double>& v) {
  const size_t es = dtype_size_bytes(t);
  std::vector<uint8_t> bytes(v.size() * es);
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t* p = &bytes[i * es];
    switch (t) {
      case DType::F32: {
        const float f = static_cast<float>(v[i]);
        std::memcpy(p, &f, 4);
        break;
      }
      case DType::BF16: {
        const bf16 h = float_to_bf16(static_cast<float>(v[i]));
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::F16: {
        const fp16 h = float_to_fp16(static_cast<float>(v[i]));
        std::memcpy(p, &h, 2);
        break;
      }
      case DType::I32: {
        const auto x = static_cast<int32_t>(v[i]);
        std::memcpy(p, &x, 4);
        break;
      }
      case DType::I64: {
        const auto x = static_cast<int64_t>(v[i]);
        std::memcpy(p, &x, 8);
        break;
      }
      case DType::I8: {
        const auto x = static_cast<int8_t>(v[i]);
        std::memcpy(p, &x, 1);
        break;
      }
    }
  }
  return bytes;
}

std::vector<double> from_bytes(DType t, const std::vector<uint8_t>& bytes) {
  const size_t es = dtype_size_bytes(t);
  std::vector<double> v(bytes.size() / es);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint8_t* p = &bytes[i * es];
    switch (t) {
      case DType::F32: {
        float f;
        std::memcpy(&f, p, 4);
        v[i] = f;
        break;
      }
      case DType::BF16: {
        bf16 h;
        std::memcpy(&h, p, 2);
        v[i] = bf16_to_float(h);
        break;
      }
      case DType::F16: {
        fp16 h;
        std::memcpy(&h, p, 2);
        v[i] = fp16_to_float(h);
        break;
      }
      case DType::I32: {
        int32_t x;
        std::memcpy(&x, p, 4);
        v[i] = x;
        break;
      }
      case DType::I64: {
        int64_t x;
        std::memcpy(&x, p, 8);
        v[i] = static_cast<double>(x);
        break;
      }
      case DType::I8: {
        int8_t x;
        std::memcpy(&x, p, 1);
        v[i] = x;
        break;
      }
    }
  }
  return v;
}

}  // namespace

CaseTensors::CaseTensors(Device& dev, Stream& s, const OpCase& c, const HostValues& values)
    : dev_(&dev), case_(&c) {
  MOEZERO_CHECK(values.size() == c.tensors.size(), c.name, ": ", values.size(), " host values for ",
                c.tensors.size(), " tensors");
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const TensorSpec& t = c.tensors[i];
    bufs_.emplace_back(dev, t.dtype, t.shape, MemTag::Activation, s, "op_case");
    const Tensor& view = bufs_.back().view();
    views_.push_back(view);
    if (view.size_bytes() == 0) continue;
    if (values[i].empty()) {
      dev.memset_async(view.data(), 0, view.size_bytes(), s);
      continue;
    }
    MOEZERO_CHECK(static_cast<int64_t>(values[i].size()) == t.shape.numel(), c.name, ": ", t.name,
                  " has ", values[i].size(), " values for ", t.shape.str());
    const std::vector<uint8_t> bytes = to_bytes(t.dtype, values[i]);
    dev.memcpy_async(view.data(), bytes.data(), bytes.size(), s);
    s.synchronize();  // `bytes` dies with this iteration
  }
}

HostValues CaseTensors::download(Stream& s) const {
  HostValues out;
  for (size_t i = 0; i < views_.size(); ++i) {
    std::vector<uint8_t> bytes(views_[i].size_bytes());
    if (!bytes.empty()) dev_->memcpy_async(bytes.data(), views_[i].data(), bytes.size(), s);
    s.synchronize();
    out.push_back(from_bytes(case_->tensors[i].dtype, bytes));
  }
  return out;
}

// ---- checking ------------------------------------------------------------------------------
HostValues initial_values(const OpCase& c, uint64_t seed) {
  HostValues v = c.inputs(seed);
  v.resize(c.tensors.size());
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const TensorSpec& t = c.tensors[i];
    if (t.role != Role::Out || !v[i].empty()) continue;
    // i8: -128, outside the [-127, 127] that quantize_int8_blocks writes (and in range).
    const double poison = is_floating(t.dtype)   ? std::numeric_limits<double>::quiet_NaN()
                          : t.dtype == DType::I8 ? -128.0
                                                 : static_cast<double>(0x7ffffff0);
    v[i].assign(static_cast<size_t>(t.shape.numel()), poison);
  }
  return v;
}

HostValues reference_values(const OpCase& c, const HostValues& initial) {
  HostValues v = initial;
  c.reference(v);
  return v;
}

HostValues run_on(Device& dev, const OpCase& c, const HostValues& initial) {
  Stream& s = dev.default_stream();
  CaseTensors t(dev, s, c, initial);
  c.run(dev.ops(), s, t.views());
  return t.download(s);
}

Comparison compare(const OpCase& c, const HostValues& got, const HostValues& ref,
                   double tol_scale) {
  Comparison r;
  for (size_t i = 0; i < c.tensors.size(); ++i) {
    const TensorSpec& t = c.tensors[i];
    if (t.role == Role::In) continue;
    const bool exact = !is_floating(t.dtype);
    const Tol& tol = t.tol ? *t.tol : c.tol;
    MOEZERO_CHECK(got[i].size() == ref[i].size(), c.name, ": ", t.name, " sizes differ");
    size_t bad = 0, worst_i = 0;
    double worst = -1.0, ref_max = 0.0;
    for (double x : ref[i]) ref_max = std::max(ref_max, std::fabs(x));
    const double atol = tol.atol + tol.of_max * ref_max;
    for (size_t j = 0; j < got[i].size(); ++j) {
      const double err = std::fabs(got[i][j] - ref[i][j]);
      const double lim = exact ? 0.0 : tol_scale * (atol + tol.rtol * std::fabs(ref[i][j]));
      const bool ok = err <= lim;  // false for NaN
      if (!ok) ++bad;
      const double ratio = std::isnan(err) ? 1e300 : (lim > 0 ? err / lim : (ok ? 0.0 : 1e300));
      if (ratio > worst) {
        worst = ratio;
        worst_i = j;
      }
    }
    if (worst > r.worst) r.worst = worst;
    if (bad > 0 && r.ok) {
      r.ok = false;
      std::ostringstream o;
      o << t.name << ": " << bad << " of " << got[i].size() << " differ; worst [" << worst_i
        << "] got " << got[i][worst_i] << ", ref " << ref[i][worst_i];
      if (!exact) o << " (rtol " << tol.rtol << ", atol " << atol << ": " << tol.why << ")";
      r.detail = o.str();
    }
  }
  if (r.ok) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "max err/bound %.2f", r.worst);
    r.detail = buf;
  }
  return r;
}

Comparison check_against_reference(Device& dev, const OpCase& c, uint64_t seed) {
  const HostValues init = initial_values(c, seed);
  return compare(c, run_on(dev, c, init), reference_values(c, init));
}

}  // namespace moezero::cases
