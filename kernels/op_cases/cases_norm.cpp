// kernels/op_cases/cases_norm.cpp — cases of the embedding lookup and its backward, RMSNorm
// forward/backward and rotary position embedding (both directions).
#include <cmath>

#include "kernels/op_cases/families.h"

namespace moezero::cases {
namespace {

// ids (T) over a (V, C) table: many repeats when T > V.
OpCase embedding_case(SizeClass size, DType t, int64_t v, int64_t c, int64_t n, bool backward) {
  OpCase k;
  k.op = backward ? "embedding_backward" : "embedding_forward";
  k.size = size;
  k.name = k.op + " " + dt(t) + " V" + std::to_string(v) + " C" + std::to_string(c) + " T" +
           std::to_string(n);
  k.tensors = {{"ids", DType::I32, Shape{n}}};
  if (backward) {
    k.tensors.push_back({"dout", t, Shape{n, c}});
    k.tensors.push_back({"dtable", DType::F32, Shape{v, c}, Role::InOut});
    k.tol = {1e-5 * std::sqrt(double(n)), 1e-5, "f32: up to ~T/V + 1 additions per element"};
    k.flops = double(n * c);
  } else {
    k.tensors.push_back({"table", t, Shape{v, c}});
    k.tensors.push_back({"out", t, Shape{n, c}, Role::Out});
    k.tol = {0.0, 0.0, "a copy: exact"};
  }
  k.inputs = [=](uint64_t seed) {
    Gen r(seed);
    HostValues x{r.ints(n, 0, v - 1), {}, {}};
    x[1] = backward ? r.uniform(t, n * c) : r.uniform(t, v * c);
    if (backward) x[2] = r.uniform(DType::F32, v * c);
    return x;
  };
  k.reference = [=](HostValues& x) {
    if (!backward) x[2].resize(size_t(n * c));
    for (int64_t i = 0; i < n; ++i) {
      const auto row = int64_t(x[0][i]);
      for (int64_t j = 0; j < c; ++j) {
        if (backward) {
          x[2][row * c + j] += x[1][i * c + j];
        } else {
          x[2][i * c + j] = x[1][row * c + j];
        }
      }
    }
  };
  k.run = [backward](Ops& ops, Stream& s, std::span<const Tensor> x) {
    if (backward) {
      ops.embedding_backward(s, x[0], x[1], x[2]);
    } else {
      ops.embedding_forward(s, x[0], x[1], x[2]);
    }
  };
  return k;
}

constexpr float kEps = 1e-5f;

// Forward: x, w -> out, rstd. Backward: dout, x, w, rstd -> dx `=`, dw `+=`; reads the given
// rstd (f32, from the forward) as the op does.
OpCase rmsnorm_case(SizeClass size, DType t, int64_t rows, int64_t c, bool backward) {
  OpCase k;
  k.op = backward ? "rmsnorm_backward" : "rmsnorm_forward";
  k.size = size;
  k.name = k.op + " " + dt(t) + " " + shape_text({rows, c});
  const Shape sx{rows, c};
  const Tol rstd_tol{1e-5 * std::sqrt(double(c)), 0.0, "f32 sum of C squares"};
  if (backward) {
    k.tensors = {{"dout", t, sx},
                 {"x", t, sx},
                 {"w", t, Shape{c}},
                 {"rstd", DType::F32, Shape{rows}},
                 {"dx", t, sx, Role::Out},
                 {"dw", DType::F32, Shape{c}, Role::InOut,
                  Tol{1e-5 * std::sqrt(double(rows * c)), 1e-5 * std::sqrt(double(rows * c)),
                      "f32 `+=` over rows; magnitudes ~sqrt(rows)"}}};
  } else {
    k.tensors = {{"x", t, sx},
                 {"w", t, Shape{c}},
                 {"out", t, sx, Role::Out},
                 {"rstd", DType::F32, Shape{rows}, Role::Out, rstd_tol}};
  }
  // Outputs are O(1) (normalised); the C-term sums set the f32 error (x2: dx has two terms).
  k.tol = sum_tol(t, c, backward ? 2.0 : 1.0);
  k.flops = (backward ? 8.0 : 4.0) * rows * c;
  k.inputs = [=](uint64_t seed) {
    Gen r(seed);
    if (!backward) return HostValues{r.uniform(t, rows * c), r.uniform(t, c, 0.5, 1.5), {}, {}};
    HostValues v{r.uniform(t, rows * c),
                 r.uniform(t, rows * c),
                 r.uniform(t, c, 0.5, 1.5),
                 std::vector<double>(size_t(rows)),
                 {},
                 r.uniform(DType::F32, c)};
    for (int64_t i = 0; i < rows; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < c; ++j) ss += v[1][i * c + j] * v[1][i * c + j];
      v[3][i] = round_to(DType::F32, 1.0 / std::sqrt(ss / double(c) + kEps));
    }
    return v;
  };
  k.reference = [=](HostValues& v) {
    const auto& x = backward ? v[1] : v[0];
    const auto& w = backward ? v[2] : v[1];
    if (!backward) v[2].resize(size_t(rows * c)), v[3].resize(size_t(rows));
    if (backward) v[4].resize(size_t(rows * c));
    for (int64_t i = 0; i < rows; ++i) {
      double ss = 0, gx = 0;
      for (int64_t j = 0; j < c; ++j) ss += x[i * c + j] * x[i * c + j];
      const double r = backward ? v[3][i] : 1.0 / std::sqrt(ss / double(c) + kEps);
      if (!backward) {
        v[3][i] = r;
        for (int64_t j = 0; j < c; ++j) v[2][i * c + j] = x[i * c + j] * r * w[j];
        continue;
      }
      // dx_j = r g_j - x_j r^3 sum(g x) / C with g = dout w; dw_j += sum_t dout x_j r.
      for (int64_t j = 0; j < c; ++j) gx += v[0][i * c + j] * w[j] * x[i * c + j];
      for (int64_t j = 0; j < c; ++j) {
        v[4][i * c + j] = r * v[0][i * c + j] * w[j] - x[i * c + j] * r * r * r * gx / double(c);
        v[5][j] += v[0][i * c + j] * x[i * c + j] * r;
      }
    }
  };
  k.run = [backward](Ops& ops, Stream& s, std::span<const Tensor> x) {
    if (backward) {
      ops.rmsnorm_backward(s, x[0], x[1], x[2], x[3], x[4], x[5]);
    } else {
      ops.rmsnorm_forward(s, x[0], x[1], kEps, x[2], x[3]);
    }
  };
  return k;
}

// x (T, H, D), positions in [0, 2048); Backward is the inverse rotation.
OpCase rope_case(SizeClass size, DType t, int64_t n, int64_t h, int64_t d, RopeDirection dir) {
  const bool bwd = dir == RopeDirection::Backward;
  OpCase k;
  k.op = "rope";
  k.size = size;
  k.name =
      std::string("rope ") + (bwd ? "backward " : "forward ") + dt(t) + " " + shape_text({n, h, d});
  k.tensors = {{"x", t, Shape{n, h, d}},
               {"positions", DType::I32, Shape{n}},
               {"out", t, Shape{n, h, d}, Role::Out}};
  // Angles up to 2047 rad: a backend forming them in fp32 is off by ~1e-4 absolute.
  k.tol = t == DType::F32 ? Tol{1e-5, 3e-4, "f32: fp32 angles up to 2047 rad"}
                          : Tol{1.0 / 256, 3e-4, "bf16: output rounding 2^-9; fp32 angles"};
  k.flops = 6.0 * n * h * d;
  k.inputs = [=](uint64_t seed) {
    Gen r(seed);
    HostValues v{r.uniform(t, n * h * d), r.ints(n, 0, 2047), {}};
    v[1][0] = 0;
    return v;
  };
  k.reference = [=](HostValues& v) {
    v[2].resize(v[0].size());
    const double sgn = bwd ? -1.0 : 1.0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < d / 2; ++j) {
        const double ang = v[1][i] * std::pow(10000.0, -2.0 * double(j) / double(d));
        const double cs = std::cos(ang), sn = sgn * std::sin(ang);
        for (int64_t hh = 0; hh < h; ++hh) {
          const int64_t o = (i * h + hh) * d;
          v[2][o + j] = v[0][o + j] * cs - v[0][o + j + d / 2] * sn;
          v[2][o + j + d / 2] = v[0][o + j + d / 2] * cs + v[0][o + j] * sn;
        }
      }
    }
  };
  k.run = [dir](Ops& ops, Stream& s, std::span<const Tensor> x) {
    ops.rope(s, x[0], x[1], 10000.0f, dir, x[2]);
  };
  return k;
}

}  // namespace

void add_norm_cases(std::vector<OpCase>& out) {
  for (DType t : {DType::F32, DType::BF16}) {
    for (bool bwd : {false, true}) {
      out.push_back(embedding_case(kT, t, 17, 129, 300, bwd));
      out.push_back(rmsnorm_case(kT, t, 17, 129, bwd));
      out.push_back(rmsnorm_case(kT, t, 70, 3, bwd));
    }
    for (RopeDirection dir : {RopeDirection::Forward, RopeDirection::Backward}) {
      out.push_back(rope_case(kT, t, 17, 3, 10, dir));  // D/2 = 5: odd half
    }
  }
  for (SizeClass sc : {kC, kG}) {
    const int64_t tok = sc == kC ? 4096 : 8192, c = sc == kC ? 1024 : 4096;
    for (DType t : {DType::F32, DType::BF16}) {
      if (sc == kG && t == DType::F32) continue;
      for (bool bwd : {false, true}) {
        out.push_back(embedding_case(sc, t, 8192, c, tok, bwd));
        out.push_back(rmsnorm_case(sc, t, tok, c, bwd));
      }
      out.push_back(rope_case(sc, t, tok, 32, 128, RopeDirection::Forward));
    }
  }
}

}  // namespace moezero::cases
