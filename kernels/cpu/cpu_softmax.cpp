// kernels/cpu/cpu_softmax.cpp — row softmax forward/backward, logsumexp, top-k, and the
// cross-entropy loss forward/backward on the CPU. One row per loop index, fp32 arithmetic, rows
// widened into a per-task scratch row.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_math.h"

namespace moezero::cpu {
namespace {

// Row softmax in place on fp32 `row` (n); returns log-sum-exp of the input.
// exp and sums vectorised (cpu_math.h); sums in fixed lanes.
float softmax_row(float* row, int64_t n) {
  const float mx = max_f32(row, n);
  const float sum = exp_inplace_f32(row, n, mx);
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) row[j] *= inv;
  return mx + std::log(sum);
}

void check_target(const char* op, int64_t t, int32_t target, int64_t v) {
  if (target != -1 && (target < 0 || target >= v)) {
    MOEZERO_THROW(op, ": targets[", t, "] = ", target, " is outside [0, V = ", v,
                  ") and is not -1 (ignore)");
  }
}

}  // namespace

// x, out (R, C); out may alias x.
void softmax_forward(Stream& s, const Tensor& x, const Tensor& out) {
  s.enqueue_host([x, out] {
    const int64_t rows = x.dim(0), c = x.dim(1);
    dispatch_act(x.dtype(), "softmax_forward", [&]<typename T>() {
      const T* px = static_cast<const T*>(x.data());
      T* po = static_cast<T*>(out.data());
      parallel_for_each(rows, row_grain(c), [&](int64_t r) {
        std::vector<float> row(static_cast<size_t>(c));
        load_f32(px + r * c, row.data(), c);
        softmax_row(row.data(), c);
        store_f32(row.data(), po + r * c, c);
      });
    });
  });
}

// out[r] = max + log(sum exp(x[r] - max)); x f32 (R, C), out f32 (R).
void logsumexp(Stream& s, const Tensor& x, const Tensor& out) {
  s.enqueue_host([x, out] {
    const int64_t rows = x.dim(0), c = x.dim(1);
    const float* px = x.data_as<float>();
    float* po = out.data_as<float>();
    parallel_for_each(rows, row_grain(c), [&](int64_t r) {
      const float* row = px + r * c;
      const float mx = max_f32(row, c);
      po[r] = mx + std::log(sum_exp_f32(row, c, mx));
    });
  });
}

// dx = y * (dy - dot(dy, y)); y, dy, dx (R, C).
void softmax_backward(Stream& s, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  s.enqueue_host([y, dy, dx] {
    const int64_t rows = y.dim(0), c = y.dim(1);
    dispatch_act(y.dtype(), "softmax_backward", [&]<typename T>() {
      const T* py = static_cast<const T*>(y.data());
      const T* pdy = static_cast<const T*>(dy.data());
      T* pdx = static_cast<T*>(dx.data());
      parallel_for_each(rows, row_grain(c), [&](int64_t r) {
        std::vector<float> yr(static_cast<size_t>(c)), gr(static_cast<size_t>(c));
        load_f32(py + r * c, yr.data(), c);
        load_f32(pdy + r * c, gr.data(), c);
        const float d = dot_f32(yr.data(), gr.data(), c);
        for (int64_t j = 0; j < c; ++j) pdx[r * c + j] = from_f32<T>(yr[j] * (gr[j] - d));
      });
    });
  });
}

// Per row of x (R, C) f32: the k largest values, descending, ties to the lower index.
void topk(Stream& s, const Tensor& x, int k, const Tensor& values, const Tensor& indices) {
  s.enqueue_host([x, k, values, indices] {
    const int64_t rows = x.dim(0), c = x.dim(1);
    const float* px = x.data_as<float>();
    float* pv = values.data_as<float>();
    int32_t* pi = indices.data_as<int32_t>();
    parallel_for_each(rows, row_grain(c), [&](int64_t r) {
      const float* row = px + r * c;
      std::vector<int32_t> idx(static_cast<size_t>(c));
      std::iota(idx.begin(), idx.end(), 0);
      // NaN compares as larger than everything (as torch.topk does), so it is never lost.
      auto greater = [row](int32_t a, int32_t b) {
        const float va = row[a], vb = row[b];
        const bool na = std::isnan(va), nb = std::isnan(vb);
        if (na != nb) return na;
        if (!na && va != vb) return va > vb;
        return a < b;
      };
      std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), greater);
      for (int j = 0; j < k; ++j) {
        pi[r * k + j] = idx[static_cast<size_t>(j)];
        pv[r * k + j] = row[idx[static_cast<size_t>(j)]];
      }
    });
  });
}

// out = 1 / (1 + exp(-x)); x, out f32 (R, C), out may alias x.
void sigmoid_forward(Stream& s, const Tensor& x, const Tensor& out) {
  s.enqueue_host([x, out] {
    const float* px = x.data_as<float>();
    float* po = out.data_as<float>();
    parallel_for_each(x.numel(), 4096,
                      [&](int64_t i) { po[i] = 1.0f / (1.0f + std::exp(-px[i])); });
  });
}

// out[r] = x[r] / sum(x[r]) (0 when the sum is 0); x, out f32 (R, C), out may alias x.
void normalize_rows(Stream& s, const Tensor& x, const Tensor& out) {
  s.enqueue_host([x, out] {
    const int64_t rows = x.dim(0), c = x.dim(1);
    const float* px = x.data_as<float>();
    float* po = out.data_as<float>();
    parallel_for_each(rows, row_grain(c), [&](int64_t r) {
      float sum = 0.0f;
      for (int64_t j = 0; j < c; ++j) sum += px[r * c + j];
      const float inv = sum != 0.0f ? 1.0f / sum : 0.0f;
      for (int64_t j = 0; j < c; ++j) po[r * c + j] = px[r * c + j] * inv;
    });
  });
}

// losses[t] = logsumexp(logits[t]) - logits[t, target]; 0 where target == -1.
void cross_entropy_forward(Stream& s, const Tensor& logits, const Tensor& targets,
                           const Tensor& losses) {
  s.enqueue_host([logits, targets, losses] {
    const int64_t rows = logits.dim(0), v = logits.dim(1);
    const int32_t* pt = targets.data_as<int32_t>();
    for (int64_t t = 0; t < rows; ++t) check_target("cross_entropy_forward", t, pt[t], v);
    float* pl = losses.data_as<float>();
    dispatch_act(logits.dtype(), "cross_entropy_forward", [&]<typename T>() {
      const T* px = static_cast<const T*>(logits.data());
      parallel_for_each(rows, row_grain(v), [&](int64_t t) {
        if (pt[t] == -1) {
          pl[t] = 0.0f;
          return;
        }
        const T* row = px + t * v;
        const float* rf;
        std::vector<float> widened;
        if constexpr (std::is_same_v<T, float>) {
          rf = row;
        } else {
          widened.resize(static_cast<size_t>(v));
          load_f32(row, widened.data(), v);
          rf = widened.data();
        }
        const float mx = max_f32(rf, v);
        pl[t] = mx + std::log(sum_exp_f32(rf, v, mx)) - rf[pt[t]];
      });
    });
  });
}

// dlogits[t] = (softmax(logits[t]) - onehot(target)) * dlosses[t]; 0 rows where ignored.
// dlogits may alias logits: each row is read completely before it is written.
void cross_entropy_backward(Stream& s, const Tensor& logits, const Tensor& targets,
                            const Tensor& dlosses, const Tensor& dlogits) {
  s.enqueue_host([logits, targets, dlosses, dlogits] {
    const int64_t rows = logits.dim(0), v = logits.dim(1);
    const int32_t* pt = targets.data_as<int32_t>();
    for (int64_t t = 0; t < rows; ++t) check_target("cross_entropy_backward", t, pt[t], v);
    const float* pdl = dlosses.data_as<float>();
    dispatch_act(logits.dtype(), "cross_entropy_backward", [&]<typename T>() {
      const T* px = static_cast<const T*>(logits.data());
      T* pd = static_cast<T*>(dlogits.data());
      parallel_for_each(rows, row_grain(v), [&](int64_t t) {
        T* drow = pd + t * v;
        if (pt[t] == -1) {
          std::fill(drow, drow + v, from_f32<T>(0.0f));
          return;
        }
        std::vector<float> row(static_cast<size_t>(v));
        load_f32(px + t * v, row.data(), v);
        softmax_row(row.data(), v);
        row[static_cast<size_t>(pt[t])] -= 1.0f;
        const float g = pdl[t];
        for (int64_t j = 0; j < v; ++j) drow[j] = from_f32<T>(row[static_cast<size_t>(j)] * g);
      });
    });
  });
}

}  // namespace moezero::cpu
