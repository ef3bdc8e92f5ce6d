// kernels/cpu/cpu_moe.cpp — the MoE data movers on the CPU: expert histogram, stable sort of
// assignments by expert, dispatch (gather_rows), combine (combine_rows) and its backward, and the
// router's column gathers between (N, E) and (N, k) rows (gather_cols, scatter_add_cols).
//
// An assignment a = t * k + j is token t's j-th choice; expert_ids[a] in [0, E) or -1
// (dropped). The sort is a sequential counting sort (O(N), stable by construction); the row
// movers are parallel over rows. Bad ids or permutation entries throw on the stream.
#include <cstring>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_math.h"

namespace moezero::cpu {
namespace {

void check_expert_ids(const char* op, const int32_t* ids, int64_t n, int num_experts) {
  for (int64_t a = 0; a < n; ++a) {
    if (ids[a] != -1 && (ids[a] < 0 || ids[a] >= num_experts)) {
      MOEZERO_THROW(op, ": expert_ids[", a, "] = ", ids[a], " is outside [0, E = ", num_experts,
                    ") and is not -1 (dropped)");
    }
  }
}

}  // namespace

// counts (E) i32 `=`.
void expert_histogram(Stream& s, const Tensor& expert_ids, int num_experts, const Tensor& counts) {
  s.enqueue_host([expert_ids, num_experts, counts] {
    const int64_t n = expert_ids.numel();
    const int32_t* ids = expert_ids.data_as<int32_t>();
    check_expert_ids("expert_histogram", ids, n, num_experts);
    int32_t* c = counts.data_as<int32_t>();
    std::fill(c, c + num_experts, 0);
    for (int64_t a = 0; a < n; ++a) {
      if (ids[a] >= 0) ++c[ids[a]];
    }
  });
}

// perm (N), inv_perm (N), offsets (E + 1), all i32 `=`. See core/ops.h.
void sort_by_expert(Stream& s, const Tensor& expert_ids, int num_experts, const Tensor& perm,
                    const Tensor& inv_perm, const Tensor& offsets) {
  s.enqueue_host([expert_ids, num_experts, perm, inv_perm, offsets] {
    const int64_t n = expert_ids.numel();
    const int32_t* ids = expert_ids.data_as<int32_t>();
    check_expert_ids("sort_by_expert", ids, n, num_experts);
    int32_t* pp = perm.data_as<int32_t>();
    int32_t* pinv = inv_perm.data_as<int32_t>();
    int32_t* off = offsets.data_as<int32_t>();
    std::fill(off, off + num_experts + 1, 0);
    for (int64_t a = 0; a < n; ++a) {
      if (ids[a] >= 0) ++off[ids[a] + 1];
    }
    for (int e = 0; e < num_experts; ++e) off[e + 1] += off[e];
    std::vector<int32_t> next(off, off + num_experts);
    std::fill(pp, pp + n, -1);
    for (int64_t a = 0; a < n; ++a) {
      const int32_t e = ids[a];
      if (e < 0) {
        pinv[a] = -1;
        continue;
      }
      const int32_t p = next[static_cast<size_t>(e)]++;
      pp[p] = static_cast<int32_t>(a);
      pinv[a] = p;
    }
  });
}

// out[p] = x[perm[p] / k] for p < P; x (T, C), out (P, C).
void gather_rows(Stream& s, const Tensor& x, const Tensor& perm, int k, const Tensor& out) {
  s.enqueue_host([x, perm, k, out] {
    const int64_t rows = out.dim(0), c = x.dim(1), n = perm.numel();
    const int32_t* pp = perm.data_as<int32_t>();
    for (int64_t p = 0; p < rows; ++p) {
      if (pp[p] < 0 || pp[p] >= n) {
        MOEZERO_THROW("gather_rows: perm[", p, "] = ", pp[p], " is outside [0, N = ", n,
                      ") for an output row p < P = ", rows);
      }
    }
    const size_t row_bytes = static_cast<size_t>(c) * dtype_size_bytes(x.dtype());
    const char* src = static_cast<const char*>(x.data());
    char* dst = static_cast<char*>(out.data());
    parallel_for_each(rows, row_grain(c), [&](int64_t p) {
      std::memcpy(dst + p * row_bytes, src + (pp[p] / k) * row_bytes, row_bytes);
    });
  });
}

// out[t] = sum_j w[t, j] * y[inv_perm[t*k + j]] over kept j (in j order, fp32); y (P, C),
// out (T, C); weights f32 (T, k) or undefined (ones).
void combine_rows(Stream& s, const Tensor& y, const Tensor& inv_perm, const Tensor& weights, int k,
                  const Tensor& out) {
  s.enqueue_host([y, inv_perm, weights, k, out] {
    const int64_t t_n = out.dim(0), c = y.dim(1), p_n = y.dim(0), n = inv_perm.numel();
    const int32_t* inv = inv_perm.data_as<int32_t>();
    for (int64_t a = 0; a < n; ++a) {
      if (inv[a] < -1 || inv[a] >= p_n) {
        MOEZERO_THROW("combine_rows: inv_perm[", a, "] = ", inv[a], " is outside [0, P = ", p_n,
                      ") and is not -1 (dropped)");
      }
    }
    const float* w = weights.defined() ? weights.data_as<float>() : nullptr;
    dispatch_act(y.dtype(), "combine_rows", [&]<typename T>() {
      const T* py = static_cast<const T*>(y.data());
      T* po = static_cast<T*>(out.data());
      parallel_for_each(t_n, row_grain(c * k), [&](int64_t t) {
        std::vector<float> acc(static_cast<size_t>(c), 0.0f);
        for (int j = 0; j < k; ++j) {
          const int64_t a = t * k + j;
          if (inv[a] < 0) continue;
          const float wj = w ? w[a] : 1.0f;
          const T* row = py + inv[a] * c;
          for (int64_t i = 0; i < c; ++i) acc[static_cast<size_t>(i)] += wj * to_f32(row[i]);
        }
        store_f32(acc.data(), po + t * c, c);
      });
    });
  });
}

// dy[p] = w[a] * dout[a / k] with a = perm[p] (p < P) `=`;
// dweights[t, j] = dot(dout[t], y[inv_perm[t*k+j]]) or 0 when dropped `=` (if defined).
void combine_rows_backward(Stream& s, const Tensor& dout, const Tensor& y, const Tensor& perm,
                           const Tensor& inv_perm, const Tensor& weights, int k, const Tensor& dy,
                           const Tensor& dweights) {
  s.enqueue_host([dout, y, perm, inv_perm, weights, k, dy, dweights] {
    const int64_t t_n = dout.dim(0), c = dout.dim(1), p_n = y.dim(0), n = perm.numel();
    const int32_t* pp = perm.data_as<int32_t>();
    const int32_t* inv = inv_perm.data_as<int32_t>();
    for (int64_t p = 0; p < p_n; ++p) {
      if (pp[p] < 0 || pp[p] >= n) {
        MOEZERO_THROW("combine_rows_backward: perm[", p, "] = ", pp[p], " is outside [0, N = ", n,
                      ") for a row p < P = ", p_n);
      }
    }
    for (int64_t a = 0; a < n; ++a) {
      if (inv[a] < -1 || inv[a] >= p_n) {
        MOEZERO_THROW("combine_rows_backward: inv_perm[", a, "] = ", inv[a],
                      " is outside [0, P = ", p_n, ") and is not -1 (dropped)");
      }
    }
    const float* w = weights.defined() ? weights.data_as<float>() : nullptr;
    dispatch_act(dout.dtype(), "combine_rows_backward", [&]<typename T>() {
      const T* pd = static_cast<const T*>(dout.data());
      const T* py = static_cast<const T*>(y.data());
      T* pdy = static_cast<T*>(dy.data());
      parallel_for_each(p_n, row_grain(c), [&](int64_t p) {
        const int64_t a = pp[p];
        const float wa = w ? w[a] : 1.0f;
        const T* src = pd + (a / k) * c;
        for (int64_t i = 0; i < c; ++i) pdy[p * c + i] = from_f32<T>(wa * to_f32(src[i]));
      });
      if (!dweights.defined()) return;
      float* pdw = dweights.data_as<float>();
      parallel_for_each(t_n, row_grain(c * k), [&](int64_t t) {
        std::vector<float> dr(static_cast<size_t>(c)), yr(static_cast<size_t>(c));
        load_f32(pd + t * c, dr.data(), c);
        for (int j = 0; j < k; ++j) {
          const int64_t a = t * k + j;
          if (inv[a] < 0) {
            pdw[a] = 0.0f;
            continue;
          }
          load_f32(py + inv[a] * c, yr.data(), c);
          pdw[a] = dot_f32(dr.data(), yr.data(), c);
        }
      });
    });
  });
}

namespace {
// idx i32 (R, k): every entry -1 or in [0, C).
void check_col_ids(const char* op, const Tensor& idx, int64_t c) {
  const int32_t* pi = idx.data_as<int32_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) {
    if (pi[i] != -1 && (pi[i] < 0 || pi[i] >= c)) {
      MOEZERO_THROW(op, ": idx[", i, "] = ", pi[i], " is outside [0, C = ", c,
                    ") and is not -1 (absent)");
    }
  }
}
}  // namespace

// out[r, j] = x[r, idx[r, j]] (0 for -1); x f32 (R, C), idx i32 (R, k), out f32 (R, k).
void gather_cols(Stream& s, const Tensor& x, const Tensor& idx, const Tensor& out) {
  s.enqueue_host([x, idx, out] {
    const int64_t c = x.dim(1), k = idx.dim(1);
    check_col_ids("gather_cols", idx, c);
    const float* px = x.data_as<float>();
    const int32_t* pi = idx.data_as<int32_t>();
    float* po = out.data_as<float>();
    parallel_for_each(idx.dim(0), row_grain(k), [&](int64_t r) {
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = pi[r * k + j];
        po[r * k + j] = e < 0 ? 0.0f : px[r * c + e];
      }
    });
  });
}

// out[r, idx[r, j]] += src[r, j] in increasing j (skipping -1); one task per row: deterministic.
void scatter_add_cols(Stream& s, const Tensor& src, const Tensor& idx, const Tensor& out) {
  s.enqueue_host([src, idx, out] {
    const int64_t c = out.dim(1), k = idx.dim(1);
    check_col_ids("scatter_add_cols", idx, c);
    const float* ps = src.data_as<float>();
    const int32_t* pi = idx.data_as<int32_t>();
    float* po = out.data_as<float>();
    parallel_for_each(idx.dim(0), row_grain(k), [&](int64_t r) {
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = pi[r * k + j];
        if (e >= 0) po[r * c + e] += ps[r * k + j];
      }
    });
  });
}

}  // namespace moezero::cpu
