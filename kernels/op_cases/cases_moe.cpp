// kernels/op_cases/cases_moe.cpp — cases of the MoE data movers: expert_histogram,
// sort_by_expert, gather_rows (dispatch), combine_rows (with and without weights) and
// combine_rows_backward. Expert ids are drawn with a fixed number of dropped assignments (-1),
// so the dispatched row count P = N - dropped is known when the case is built.
#include <algorithm>
#include <numeric>

#include "kernels/op_cases/families.h"

namespace moezero::cases {
namespace {

struct Routing {
  int64_t t, k, e, dropped;  // tokens, choices per token, experts, dropped assignments
  int64_t n() const { return t * k; }
  int64_t kept() const { return n() - dropped; }
  std::string text() const {
    return "T" + std::to_string(t) + " k" + std::to_string(k) + " E" + std::to_string(e) +
           (dropped ? " drop" + std::to_string(dropped) : "");
  }
};

// ids (N) in [0, E) with exactly `dropped` of them -1.
std::vector<double> expert_ids(Gen& g, const Routing& r) {
  std::vector<double> ids = g.ints(r.n(), 0, r.e - 1);
  std::vector<int64_t> pos(static_cast<size_t>(r.n()));
  std::iota(pos.begin(), pos.end(), 0);
  std::shuffle(pos.begin(), pos.end(), g.rng());
  for (int64_t i = 0; i < r.dropped; ++i) ids[size_t(pos[i])] = -1.0;
  return ids;
}

OpCase routing_case(SizeClass size, const Routing& r, bool sort) {
  OpCase c;
  c.op = sort ? "sort_by_expert" : "expert_histogram";
  c.size = size;
  c.name = c.op + " " + r.text();
  c.tensors = {{"expert_ids", DType::I32, Shape{r.n()}}};
  if (sort) {
    c.tensors.push_back({"perm", DType::I32, Shape{r.n()}, Role::Out});
    c.tensors.push_back({"inv_perm", DType::I32, Shape{r.n()}, Role::Out});
    c.tensors.push_back({"offsets", DType::I32, Shape{r.e + 1}, Role::Out});
  } else {
    c.tensors.push_back({"counts", DType::I32, Shape{r.e}, Role::Out});
  }
  c.tol = {0.0, 0.0, "integers: exact"};
  c.inputs = [=](uint64_t seed) {
    Gen g(seed);
    HostValues v{expert_ids(g, r)};
    v.resize(sort ? 4 : 2);
    return v;
  };
  c.reference = [=](HostValues& v) {
    if (sort) {
      ref_sort_by_expert(v[0], int(r.e), &v[1], &v[2], &v[3]);
      return;
    }
    v[1].assign(size_t(r.e), 0.0);
    for (double id : v[0]) {
      if (id >= 0) v[1][size_t(id)] += 1;
    }
  };
  const int e = int(r.e);
  c.run = [sort, e](Ops& ops, Stream& s, std::span<const Tensor> x) {
    if (sort) {
      ops.sort_by_expert(s, x[0], e, x[1], x[2], x[3]);
    } else {
      ops.expert_histogram(s, x[0], e, x[1]);
    }
  };
  return c;
}

// The three movers. gather_rows: x (T, C), perm -> out (P, C). combine_rows: y (P, C),
// inv_perm, weights (T, k) [or none] -> out (T, C). combine_rows_backward: dout (T, C), y, perm,
// inv_perm, weights -> dy (P, C), dweights (T, k).
enum class Mover { Gather, Combine, CombineUnweighted, CombineBackward };

std::vector<TensorSpec> mover_tensors(Mover m, DType t, const Routing& r, int64_t cw) {
  const Shape tc{r.t, cw}, pc{r.kept(), cw}, nn{r.n()}, tk{r.t, r.k};
  switch (m) {
    case Mover::Gather: return {{"x", t, tc}, {"perm", DType::I32, nn}, {"out", t, pc, Role::Out}};
    case Mover::Combine:
      return {{"y", t, pc},
              {"inv_perm", DType::I32, nn},
              {"weights", DType::F32, tk},
              {"out", t, tc, Role::Out}};
    case Mover::CombineUnweighted:
      return {{"y", t, pc}, {"inv_perm", DType::I32, nn}, {"out", t, tc, Role::Out}};
    case Mover::CombineBackward:
      return {{"dout", t, tc},
              {"y", t, pc},
              {"perm", DType::I32, nn},
              {"inv_perm", DType::I32, nn},
              {"weights", DType::F32, tk},
              {"dy", t, pc, Role::Out},
              {"dweights", DType::F32, tk, Role::Out,
               Tol{1e-5 * std::sqrt(double(cw)), 1e-5 * std::sqrt(double(cw)),
                   "f32 dot products of C terms"}}};
  }
  return {};
}

void ref_mover(Mover m, const Routing& r, int64_t cw, HostValues& v) {
  // The routing as the op gets it: perm and/or inv_perm among the inputs.
  const bool bwd = m == Mover::CombineBackward;
  const std::vector<double> perm = v[bwd ? 2 : 1], inv = v[bwd ? 3 : 1];
  const int64_t kept = r.kept();
  if (m == Mover::Gather) {
    v[2].resize(size_t(kept * cw));
    for (int64_t p = 0; p < kept; ++p) {
      for (int64_t j = 0; j < cw; ++j) v[2][p * cw + j] = v[0][int64_t(perm[p]) / r.k * cw + j];
    }
    return;
  }
  if (m == Mover::CombineBackward) {
    v[5].resize(size_t(kept * cw)), v[6].assign(size_t(r.n()), 0.0);
    for (int64_t p = 0; p < kept; ++p) {
      const auto a = int64_t(perm[p]);
      for (int64_t j = 0; j < cw; ++j) v[5][p * cw + j] = v[4][a] * v[0][a / r.k * cw + j];
    }
    for (int64_t a = 0; a < r.n(); ++a) {
      for (int64_t j = 0; inv[a] >= 0 && j < cw; ++j) {
        v[6][a] += v[0][a / r.k * cw + j] * v[1][int64_t(inv[a]) * cw + j];
      }
    }
    return;
  }
  const bool weighted = m == Mover::Combine;
  std::vector<double>& out = v[weighted ? 3 : 2];
  out.assign(size_t(r.t * cw), 0.0);
  for (int64_t a = 0; a < r.n(); ++a) {
    const double w = weighted ? v[2][a] : 1.0;
    for (int64_t j = 0; inv[a] >= 0 && j < cw; ++j) {
      out[a / r.k * cw + j] += w * v[0][int64_t(inv[a]) * cw + j];
    }
  }
}

const char* mover_op(Mover m) {
  switch (m) {
    case Mover::Gather: return "gather_rows";
    case Mover::Combine: return "combine_rows";
    case Mover::CombineUnweighted: return "combine_rows";
    case Mover::CombineBackward: return "combine_rows_backward";
  }
  return "?";
}

OpCase mover_case(SizeClass size, Mover m, DType t, const Routing& r, int64_t cw) {
  OpCase c;
  c.op = mover_op(m);
  c.size = size;
  c.name = c.op + (m == Mover::CombineUnweighted ? " unweighted " : " ") + dt(t) + " " + r.text() +
           " C" + std::to_string(cw);
  c.tensors = mover_tensors(m, t, r, cw);
  const Tol st = sum_tol(t, r.k);  // k-term sums
  c.tol = m == Mover::Gather ? Tol{0.0, 0.0, "a copy: exact"} : st;
  const double es = double(dtype_size_bytes(t)), rows = double(r.kept());
  c.bytes = m == Mover::Gather ? 2.0 * rows * cw * es : (rows + r.t) * cw * es;
  if (m == Mover::CombineBackward) c.bytes = (2.0 * rows + r.t) * cw * es;
  c.inputs = [=](uint64_t seed) {
    Gen g(seed);
    const std::vector<double> ids = expert_ids(g, r);
    std::vector<double> perm, inv, off;
    ref_sort_by_expert(ids, int(r.e), &perm, &inv, &off);
    HostValues v;
    for (const TensorSpec& s : mover_tensors(m, t, r, cw)) {
      if (s.role == Role::Out) {
        v.emplace_back();
      } else if (s.name == "perm" || s.name == "inv_perm") {
        v.push_back(s.name == "perm" ? perm : inv);
      } else {
        v.push_back(s.name == "weights" ? g.uniform(DType::F32, s.shape.numel(), 0, 1)
                                        : g.uniform(t, s.shape.numel()));
      }
    }
    return v;
  };
  c.reference = [=](HostValues& v) { ref_mover(m, r, cw, v); };
  const int kk = int(r.k);
  c.run = [m, kk](Ops& ops, Stream& s, std::span<const Tensor> x) {
    switch (m) {
      case Mover::Gather: ops.gather_rows(s, x[0], x[1], kk, x[2]); break;
      case Mover::Combine: ops.combine_rows(s, x[0], x[1], x[2], kk, x[3]); break;
      case Mover::CombineUnweighted: ops.combine_rows(s, x[0], x[1], Tensor{}, kk, x[2]); break;
      case Mover::CombineBackward:
        ops.combine_rows_backward(s, x[0], x[1], x[2], x[3], x[4], kk, x[5], x[6]);
        break;
    }
  };
  return c;
}

}  // namespace

void add_moe_cases(std::vector<OpCase>& out) {
  const Routing small{17, 2, 8, 5}, single{1, 1, 1, 0}, wide{40, 3, 5, 7};
  for (const Routing& r : {small, single, wide}) {
    out.push_back(routing_case(kT, r, false));
    out.push_back(routing_case(kT, r, true));
  }
  for (DType t : {DType::F32, DType::BF16}) {
    for (Mover m :
         {Mover::Gather, Mover::Combine, Mover::CombineUnweighted, Mover::CombineBackward}) {
      out.push_back(mover_case(kT, m, t, small, 129));
      out.push_back(mover_case(kT, m, t, wide, 3));
    }
  }
  for (SizeClass sc : {kC, kG}) {
    const Routing r{sc == kC ? 4096 : 16384, 2, 8, 0};
    const int64_t cw = sc == kC ? 1024 : 4096;
    out.push_back(routing_case(sc, r, false));
    out.push_back(routing_case(sc, r, true));
    for (DType t : {DType::F32, DType::BF16}) {
      if (sc == kG && t == DType::F32) continue;
      for (Mover m : {Mover::Gather, Mover::Combine, Mover::CombineBackward}) {
        out.push_back(mover_case(sc, m, t, r, cw));
      }
    }
  }
}

}  // namespace moezero::cases
