// kernels/cpu/cpu_norm.cpp — token-wise layers on the CPU: embedding forward/backward, RMSNorm
// forward/backward, rotary position embedding.
//
// Rows are widened to fp32 into a per-task scratch row, computed in fp32, rounded once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_math.h"

namespace moezero::cpu {
namespace {

// Throws (on the stream) when an id is outside [0, v).
void check_ids(const char* op, const int32_t* ids, int64_t n, int64_t v) {
  for (int64_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= v) {
      MOEZERO_THROW(op, ": ids[", t, "] = ", ids[t], " is outside [0, V = ", v, ")");
    }
  }
}

constexpr int64_t kNormRowBlock = 32;  // rows per dw partial in rmsnorm_backward

// Row x as fp32: x itself when T is float, else widened into buf.
template <typename T>
const float* px_f32(const T* x, float* buf, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    (void)buf;
    (void)n;
    return x;
  } else {
    load_f32(x, buf, n);
    return buf;
  }
}

constexpr int64_t kEmbedColBlock = 64;  // channels per task in embedding_backward

}  // namespace

// out (T, C) = table[ids] (T rows of (V, C)).
void embedding_forward(Stream& s, const Tensor& ids, const Tensor& table, const Tensor& out) {
  s.enqueue_host([ids, table, out] {
    const int64_t n = ids.dim(0), v = table.dim(0), c = table.dim(1);
    const int32_t* pid = ids.data_as<int32_t>();
    check_ids("embedding_forward", pid, n, v);
    const size_t row_bytes = static_cast<size_t>(c) * dtype_size_bytes(table.dtype());
    const char* src = static_cast<const char*>(table.data());
    char* dst = static_cast<char*>(out.data());
    parallel_for_each(n, row_grain(c), [&](int64_t t) {
      std::memcpy(dst + t * row_bytes, src + pid[t] * row_bytes, row_bytes);
    });
  });
}

// dtable (V, C) f32 += dout (T, C) rows scattered by ids. Parallel over channel blocks, tokens
// in order within each block: deterministic with repeated ids.
void embedding_backward(Stream& s, const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  s.enqueue_host([ids, dout, dtable] {
    const int64_t n = ids.dim(0), v = dtable.dim(0), c = dtable.dim(1);
    const int32_t* pid = ids.data_as<int32_t>();
    check_ids("embedding_backward", pid, n, v);
    float* dt = dtable.data_as<float>();
    dispatch_act(dout.dtype(), "embedding_backward", [&]<typename T>() {
      const T* pd = static_cast<const T*>(dout.data());
      const int64_t nb = (c + kEmbedColBlock - 1) / kEmbedColBlock;
      parallel_for_each(nb, 1, [&](int64_t b) {
        const int64_t lo = b * kEmbedColBlock, hi = std::min(c, lo + kEmbedColBlock);
        for (int64_t t = 0; t < n; ++t) {
          float* row = dt + pid[t] * c;
          const T* g = pd + t * c;
          for (int64_t j = lo; j < hi; ++j) row[j] += to_f32(g[j]);
        }
      });
    });
  });
}

// out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps); x, out (T, C); w (C); rstd f32 (T).
void rmsnorm_forward(Stream& s, const Tensor& x, const Tensor& w, float eps, const Tensor& out,
                     const Tensor& rstd) {
  s.enqueue_host([x, w, eps, out, rstd] {
    const int64_t rows = x.dim(0), c = x.dim(1);
    dispatch_act(x.dtype(), "rmsnorm_forward", [&]<typename T>() {
      const T* px = static_cast<const T*>(x.data());
      T* po = static_cast<T*>(out.data());
      float* pr = rstd.data_as<float>();
      const std::vector<float> wf = to_f32_vector(w);
      parallel_for_each(rows, row_grain(c), [&](int64_t t) {
        thread_local std::vector<float> row, orow;
        row.resize(static_cast<size_t>(c));
        const float* xr = px_f32(px + t * c, row.data(), c);
        const float ms = c > 0 ? dot_f32(xr, xr, c) / static_cast<float>(c) : 0.0f;
        const float r = 1.0f / std::sqrt(ms + eps);
        pr[t] = r;
        if constexpr (std::is_same_v<T, float>) {
          rmsnorm_row_f32(xr, wf.data(), r, po + t * c, c);
        } else {
          orow.resize(static_cast<size_t>(c));
          rmsnorm_row_f32(xr, wf.data(), r, orow.data(), c);
          store_f32(orow.data(), po + t * c, c);
        }
      });
    });
  });
}

// With g = dout * w: dx = rstd * g - x * rstd^3 * dot(g, x) / C  (`=`);
// dw += sum over rows of dout * x * rstd (`+=`, f32), reduced over fixed row blocks in order.
void rmsnorm_backward(Stream& s, const Tensor& dout, const Tensor& x, const Tensor& w,
                      const Tensor& rstd, const Tensor& dx, const Tensor& dw) {
  s.enqueue_host([dout, x, w, rstd, dx, dw] {
    const int64_t rows = x.dim(0), c = x.dim(1);
    const int64_t nb = (rows + kNormRowBlock - 1) / kNormRowBlock;
    std::vector<float> partial(static_cast<size_t>(nb * c));
    dispatch_act(x.dtype(), "rmsnorm_backward", [&]<typename T>() {
      const T* px = static_cast<const T*>(x.data());
      const T* pd = static_cast<const T*>(dout.data());
      T* pdx = static_cast<T*>(dx.data());
      const float* pr = rstd.data_as<float>();
      const std::vector<float> wf = to_f32_vector(w);
      parallel_for_each(nb, 1, [&](int64_t b) {
        std::vector<float> xr(static_cast<size_t>(c)), g(static_cast<size_t>(c)), dxr;
        if constexpr (!std::is_same_v<T, float>) dxr.resize(static_cast<size_t>(c));
        float* acc = partial.data() + b * c;
        for (int64_t t = b * kNormRowBlock; t < std::min(rows, (b + 1) * kNormRowBlock); ++t) {
          const float* xp = px_f32(px + t * c, xr.data(), c);
          load_f32(pd + t * c, g.data(), c);  // g is scaled in place
          if constexpr (std::is_same_v<T, float>) {
            rmsnorm_backward_row_f32(xp, g.data(), wf.data(), pr[t], acc, pdx + t * c, c);
          } else {
            rmsnorm_backward_row_f32(xp, g.data(), wf.data(), pr[t], acc, dxr.data(), c);
            store_f32(dxr.data(), pdx + t * c, c);
          }
        }
      });
    });
    float* pdw = dw.data_as<float>();
    parallel_for_each(c, 1024, [&](int64_t j) {
      float sum = 0.0f;
      for (int64_t b = 0; b < nb; ++b) sum += partial[static_cast<size_t>(b * c + j)];
      pdw[j] += sum;
    });
  });
}

namespace {

// cos / sin of pos * base^(-2i/D) for pos in [0, positions), i in [0, D/2): [pos * half + i].
struct RopeTable {
  int64_t positions = 0;
  std::vector<float> cos, sin;
};

constexpr int64_t kRopeTableMaxPositions = 1 << 16;

double rope_inv_freq(float base, int64_t i, int64_t d) {
  return std::pow(static_cast<double>(base),
                  -2.0 * static_cast<double>(i) / static_cast<double>(d));
}

// The table for (base, d) covering positions [0, need): built once and kept (grown by doubling
// when a longer sequence comes), shared by every rank and stream of the process. The values are
// those rope() computed per call before: angles in double, cos/sin rounded to fp32.
std::shared_ptr<const RopeTable> rope_table(float base, int64_t d, int64_t need) {
  static std::mutex mu;
  static std::map<std::pair<uint32_t, int64_t>, std::shared_ptr<const RopeTable>> tables;
  std::lock_guard lock(mu);
  auto& slot = tables[{float_bits(base), d}];
  if (slot && slot->positions >= need) return slot;
  const int64_t half = d / 2;
  auto t = std::make_shared<RopeTable>();
  t->positions = std::min(kRopeTableMaxPositions, std::max(need, slot ? 2 * slot->positions : 256));
  t->cos.resize(static_cast<size_t>(t->positions * half));
  t->sin.resize(static_cast<size_t>(t->positions * half));
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[static_cast<size_t>(i)] = rope_inv_freq(base, i, d);
  parallel_for_each(t->positions, 64, [&](int64_t p) {
    for (int64_t i = 0; i < half; ++i) {
      const double ang = static_cast<double>(p) * inv_freq[static_cast<size_t>(i)];
      t->cos[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(ang));
      t->sin[static_cast<size_t>(p * half + i)] = static_cast<float>(std::sin(ang));
    }
  });
  slot = t;
  return t;
}

}  // namespace

// Rotate-half RoPE on x, out (T, H, D); positions i32 (T). Angles pos * base^(-2i/D) are formed
// in double (exact enough for any position) and their cos/sin rounded to fp32: looked up in a
// per-(base, D) table for positions in [0, 65536), computed per row otherwise (same values).
void rope(Stream& s, const Tensor& x, const Tensor& positions, float base, RopeDirection dir,
          const Tensor& out) {
  s.enqueue_host([x, positions, base, dir, out] {
    const int64_t t_n = x.dim(0), h_n = x.dim(1), d = x.dim(2), half = d / 2;
    const int32_t* pos = positions.data_as<int32_t>();
    const float sign = dir == RopeDirection::Forward ? 1.0f : -1.0f;
    int64_t max_pos = 0;
    for (int64_t t = 0; t < t_n; ++t) max_pos = std::max<int64_t>(max_pos, pos[t]);
    const auto table =
        max_pos < kRopeTableMaxPositions ? rope_table(base, d, max_pos + 1) : nullptr;
    std::vector<double> inv_freq;
    if (!table || std::any_of(pos, pos + t_n, [](int32_t p) { return p < 0; })) {
      inv_freq.resize(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i)
        inv_freq[static_cast<size_t>(i)] = rope_inv_freq(base, i, d);
    }
    dispatch_act(x.dtype(), "rope", [&]<typename T>() {
      const T* px = static_cast<const T*>(x.data());
      T* po = static_cast<T*>(out.data());
      parallel_for_each(t_n, row_grain(h_n * d), [&](int64_t t) {
        // cos, sin of this position, then (bf16) a head widened and its result.
        float* cs = thread_scratch(static_cast<size_t>(2 * half + 2 * d));
        float *sn = cs + half, *xr = sn + half, *orow = xr + d;
        if (table && pos[t] >= 0) {
          const float* tc = table->cos.data() + pos[t] * half;
          const float* ts = table->sin.data() + pos[t] * half;
          for (int64_t i = 0; i < half; ++i) {
            cs[i] = tc[i];
            sn[i] = sign * ts[i];
          }
        } else {
          for (int64_t i = 0; i < half; ++i) {
            const double ang = static_cast<double>(pos[t]) * inv_freq[static_cast<size_t>(i)];
            cs[i] = static_cast<float>(std::cos(ang));
            sn[i] = sign * static_cast<float>(std::sin(ang));
          }
        }
        if constexpr (std::is_same_v<T, float>) {
          for (int64_t h = 0; h < h_n; ++h) {
            const int64_t off = (t * h_n + h) * d;
            rope_row_f32(px + off, px + off + half, cs, sn, po + off, po + off + half, half);
          }
        } else {
          for (int64_t h = 0; h < h_n; ++h) {
            const int64_t off = (t * h_n + h) * d;
            load_f32(px + off, xr, d);
            rope_row_f32(xr, xr + half, cs, sn, orow, orow + half, half);
            store_f32(orow, po + off, d);
          }
        }
      });
    });
  });
}

}  // namespace moezero::cpu
