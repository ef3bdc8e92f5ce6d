// kernels/cpu/cpu_attention.cpp — causal grouped-query attention, forward and backward, on the
// CPU.
//
// One TBB task per (batch, query head). The task widens its head's q and its kv head's k, v into
// contiguous fp32 (T, D) copies and walks query blocks of kQBlock rows; per block the scores
// against the keys 0..block end are one single-threaded sgemm, the causal mask and softmax are
// applied row by row, and P @ V is another sgemm. Backward recomputes P from the saved lse;
// dK, dV of each query head go to private buffers that are summed over the query heads of a kv
// group in head order afterwards, so the result is deterministic.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_math.h"

namespace moezero::cpu {
namespace {

constexpr int64_t kQBlock = 64;

struct Dims {
  int64_t b, t, hq, hkv, d, group;
  float scale;
};

Dims dims_of(const Tensor& q, const Tensor& k) {
  Dims m{q.dim(0), q.dim(1), q.dim(2), k.dim(2), q.dim(3), 0, 0.0f};
  m.group = m.hq / m.hkv;
  m.scale = 1.0f / std::sqrt(static_cast<float>(m.d));
  return m;
}

// dst (T, D) fp32 <- head h of src (B, T, H, D), batch b.
template <typename T>
void load_head(const T* src, int64_t b, int64_t h, int64_t t_n, int64_t h_n, int64_t d,
               float* dst) {
  for (int64_t t = 0; t < t_n; ++t) load_f32(src + ((b * t_n + t) * h_n + h) * d, dst + t * d, d);
}
template <typename T>
void store_head(const float* src, int64_t b, int64_t h, int64_t t_n, int64_t h_n, int64_t d,
                T* dst) {
  for (int64_t t = 0; t < t_n; ++t) store_f32(src + t * d, dst + ((b * t_n + t) * h_n + h) * d, d);
}

}  // namespace

// q (B, T, Hq, D), k/v (B, T, Hkv, D) -> out (B, T, Hq, D) `=`, lse f32 (B, Hq, T) `=`.
void attention_forward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const Tensor& lse) {
  s.enqueue_host([q, k, v, out, lse] {
    const Dims m = dims_of(q, k);
    if (m.b == 0 || m.t == 0 || m.hq == 0) return;
    float* plse = lse.data_as<float>();
    dispatch_act(q.dtype(), "attention_forward", [&]<typename T>() {
      const T* pq = static_cast<const T*>(q.data());
      const T* pk = static_cast<const T*>(k.data());
      const T* pv = static_cast<const T*>(v.data());
      T* po = static_cast<T*>(out.data());
      parallel_for_each(m.b * m.hq, 1, [&](int64_t task) {
        const int64_t b = task / m.hq, h = task % m.hq, g = h / m.group;
        const int64_t td = m.t * m.d;
        // q, k, v, o (T, D) and the scores of one query block: every element written before read.
        float* qf = thread_scratch(static_cast<size_t>(4 * td + std::min(kQBlock, m.t) * m.t));
        float *kf = qf + td, *vf = kf + td, *of = vf + td, *sc = of + td;
        load_head(pq, b, h, m.t, m.hq, m.d, qf);
        load_head(pk, b, g, m.t, m.hkv, m.d, kf);
        load_head(pv, b, g, m.t, m.hkv, m.d, vf);
        float* lse_row = plse + (b * m.hq + h) * m.t;
        for (int64_t q0 = 0; q0 < m.t; q0 += kQBlock) {
          const int64_t rows = std::min(kQBlock, m.t - q0), kend = q0 + rows;
          // S (rows, kend) = scale * Q[q0:q0+rows] @ K[0:kend]^T
          run_f32_gemm_serial({qf + q0 * m.d, kf, sc, rows, kend, m.d, false, true, m.scale, 0.0f});
          for (int64_t r = 0; r < rows; ++r) {
            float* srow = sc + r * kend;
            const int64_t valid = q0 + r + 1;  // keys 0..t
            const float mx = max_f32(srow, valid);
            const float sum = exp_inplace_f32(srow, valid, mx);
            scale_and_zero_tail_f32(srow, valid, kend, 1.0f / sum);
            lse_row[q0 + r] = mx + std::log(sum);
          }
          // O[q0:q0+rows] (rows, D) = P (rows, kend) @ V[0:kend] (kend, D)
          run_f32_gemm_serial({sc, vf, of + q0 * m.d, rows, m.d, kend, false, false, 1.0f, 0.0f});
        }
        store_head(of, b, h, m.t, m.hq, m.d, po);
      });
    });
  });
}

// Standard attention backward with P recomputed from lse:
//   dP = dO V^T; Di = rowsum(dO * O); dS = P * (dP - Di);
//   dQ = scale dS K; dK = scale dS^T Q; dV = P^T dO (dK, dV summed over a kv group's q heads).
void attention_backward(Stream& s, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, const Tensor& dq,
                        const Tensor& dk, const Tensor& dv) {
  s.enqueue_host([q, k, v, out, lse, dout, dq, dk, dv] {
    const Dims m = dims_of(q, k);
    if (m.b == 0 || m.t == 0 || m.hq == 0) return;
    const int64_t td = m.t * m.d;
    // Per (b, q head): dK and dV contributions (T, D) each.
    std::vector<float> dkp(static_cast<size_t>(m.b * m.hq * td));
    std::vector<float> dvp(static_cast<size_t>(m.b * m.hq * td));
    const float* plse = lse.data_as<float>();
    dispatch_act(q.dtype(), "attention_backward", [&]<typename T>() {
      const T* pq = static_cast<const T*>(q.data());
      const T* pk = static_cast<const T*>(k.data());
      const T* pv = static_cast<const T*>(v.data());
      const T* po = static_cast<const T*>(out.data());
      const T* pdo = static_cast<const T*>(dout.data());
      T* pdq = static_cast<T*>(dq.data());
      parallel_for_each(m.b * m.hq, 1, [&](int64_t task) {
        const int64_t b = task / m.hq, h = task % m.hq, g = h / m.group;
        // q, k, v, o, dO, dQ (T, D), and P, dP of one query block: all written before read.
        const int64_t blk = std::min(kQBlock, m.t) * m.t;
        float* qf = thread_scratch(static_cast<size_t>(6 * td + 2 * blk));
        float *kf = qf + td, *vf = kf + td, *of = vf + td, *dof = of + td, *dqf = dof + td;
        float *pb = dqf + td, *dpb = pb + blk;
        load_head(pq, b, h, m.t, m.hq, m.d, qf);
        load_head(pk, b, g, m.t, m.hkv, m.d, kf);
        load_head(pv, b, g, m.t, m.hkv, m.d, vf);
        load_head(po, b, h, m.t, m.hq, m.d, of);
        load_head(pdo, b, h, m.t, m.hq, m.d, dof);
        float* dkf = dkp.data() + task * td;
        float* dvf = dvp.data() + task * td;
        const float* lse_row = plse + (b * m.hq + h) * m.t;
        for (int64_t q0 = 0; q0 < m.t; q0 += kQBlock) {
          const int64_t rows = std::min(kQBlock, m.t - q0), kend = q0 + rows;
          const float* qb = qf + q0 * m.d;
          const float* dob = dof + q0 * m.d;
          run_f32_gemm_serial({qb, kf, pb, rows, kend, m.d, false, true, m.scale, 0.0f});
          run_f32_gemm_serial({dob, vf, dpb, rows, kend, m.d, false, true, 1.0f, 0.0f});
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t valid = q0 + r + 1;
            const float l = lse_row[q0 + r];
            const float dsum = dot_f32(dob + r * m.d, of + (q0 + r) * m.d, m.d);
            // P from lse, and dS in dp's place.
            softmax_backward_row_f32(pb + r * kend, dpb + r * kend, valid, kend, l, dsum);
          }
          // dQ[q0:] (rows, D) = scale * dS (rows, kend) @ K[0:kend]
          run_f32_gemm_serial(
              {dpb, kf, dqf + q0 * m.d, rows, m.d, kend, false, false, m.scale, 0.0f});
          // dK[0:kend] += scale * dS^T @ Q_blk;  dV[0:kend] += P^T @ dO_blk   (kend, D)
          run_f32_gemm_serial({dpb, qb, dkf, kend, m.d, rows, true, false, m.scale, 1.0f});
          run_f32_gemm_serial({pb, dob, dvf, kend, m.d, rows, true, false, 1.0f, 1.0f});
        }
        store_head(dqf, b, h, m.t, m.hq, m.d, pdq);
      });
      // Sum the q heads of each kv group, in head order.
      T* pdk = static_cast<T*>(dk.data());
      T* pdv = static_cast<T*>(dv.data());
      // Per element 0 + head 0 + head 1 + ... in head order; rows of D at a time (vectorised).
      parallel_for_each(m.b * m.t, row_grain(m.hkv * m.d), [&](int64_t bt) {
        const int64_t b = bt / m.t, t = bt % m.t;
        float* sk = thread_scratch(static_cast<size_t>(2 * m.d));
        float* sv = sk + m.d;
        for (int64_t g = 0; g < m.hkv; ++g) {
          std::fill(sk, sk + 2 * m.d, 0.0f);
          for (int64_t h = g * m.group; h < (g + 1) * m.group; ++h) {
            const size_t row = static_cast<size_t>((b * m.hq + h) * td + t * m.d);
            const float* rk = dkp.data() + row;
            const float* rv = dvp.data() + row;
            for (int64_t d = 0; d < m.d; ++d) sk[d] += rk[d];
            for (int64_t d = 0; d < m.d; ++d) sv[d] += rv[d];
          }
          const int64_t o = ((b * m.t + t) * m.hkv + g) * m.d;
          store_f32(sk, pdk + o, m.d);
          store_f32(sv, pdv + o, m.d);
        }
      });
    });
  });
}

}  // namespace moezero::cpu
