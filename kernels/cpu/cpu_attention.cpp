// kernels/cpu/cpu_attention.cpp — causal grouped-query attention, forward and backward, on the
// CPU.
//
// One TBB task per (batch, query head). The task walks query blocks of kQBlock rows of its head;
// per block the scores against the keys 0..block end are one single-threaded sgemm, the causal
// mask and softmax are applied row by row, and P @ V is another sgemm. fp32 heads are read and
// written in place, as strided (T, D) views of the (B, T, H, D) tensors; bf16 heads are widened
// into contiguous fp32 copies first. Backward recomputes P from the saved lse; with one query
// head per kv head its dK, dV go straight to the outputs, else to private buffers of each query
// head that are summed over the kv group in head order afterwards (deterministic either way).
// Each block's dK, dV GEMM writes (beta 0) the key rows that no earlier block touched and adds
// (beta 1) to the others, so no buffer is zeroed first.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <type_traits>

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

// One GEMM on strided fp32 operands (row strides lda, ldb, ldc), on the calling thread.
void gemm_strided(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                  int64_t m, int64_t n, int64_t k, bool ta, bool tb, float alpha, float beta) {
  F32Gemm g{a, b, c, m, n, k, ta, tb, alpha, beta};
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = ldc;
  run_f32_gemm_serial(g);
}

// C[0:kend] (kend, D; ldc) (+)= alpha * A^T @ B for the query block at q0 of a head's backward:
// A (rows, kend; lda), B (rows, D; ldb). Key rows below q0 were written by earlier blocks and
// are added to; rows q0..kend are new and written.
void accumulate_keys(const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                     int64_t ldc, int64_t q0, int64_t kend, int64_t rows, int64_t d, float alpha) {
  if (q0 > 0) gemm_strided(a, lda, b, ldb, c, ldc, q0, d, rows, true, false, alpha, 1.0f);
  gemm_strided(a + q0, lda, b, ldb, c + q0 * ldc, ldc, kend - q0, d, rows, true, false, alpha,
               0.0f);
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
      constexpr bool kDirect = std::is_same_v<T, float>;  // heads read and written in place
      const T* pq = static_cast<const T*>(q.data());
      const T* pk = static_cast<const T*>(k.data());
      const T* pv = static_cast<const T*>(v.data());
      T* po = static_cast<T*>(out.data());
      parallel_for_each(m.b * m.hq, 1, [&](int64_t task) {
        const int64_t b = task / m.hq, h = task % m.hq, g = h / m.group;
        const int64_t td = m.t * m.d, blk = std::min(kQBlock, m.t) * m.t;
        // Row strides of the q/o and k/v views.
        const int64_t ldq = kDirect ? m.hq * m.d : m.d, ldkv = kDirect ? m.hkv * m.d : m.d;
        // The scores of one query block, its rows' 1 / sum (and the bf16 heads' copies): written
        // before read.
        const int64_t rows_max = std::min(kQBlock, m.t);
        float* sc = thread_scratch(static_cast<size_t>(blk + rows_max + (kDirect ? 0 : 4 * td)));
        float* inv = sc + blk;
        const float *qf, *kf, *vf;
        float* of;
        if constexpr (kDirect) {
          qf = pq + (b * m.t * m.hq + h) * m.d;
          kf = pk + (b * m.t * m.hkv + g) * m.d;
          vf = pv + (b * m.t * m.hkv + g) * m.d;
          of = po + (b * m.t * m.hq + h) * m.d;
        } else {
          float* copies = inv + rows_max;
          load_head(pq, b, h, m.t, m.hq, m.d, copies);
          load_head(pk, b, g, m.t, m.hkv, m.d, copies + td);
          load_head(pv, b, g, m.t, m.hkv, m.d, copies + 2 * td);
          qf = copies, kf = copies + td, vf = copies + 2 * td, of = copies + 3 * td;
        }
        float* lse_row = plse + (b * m.hq + h) * m.t;
        for (int64_t q0 = 0; q0 < m.t; q0 += kQBlock) {
          const int64_t rows = std::min(kQBlock, m.t - q0), kend = q0 + rows;
          // S (rows, kend) = scale * Q[q0:q0+rows] @ K[0:kend]^T
          gemm_strided(qf + q0 * ldq, ldq, kf, ldkv, sc, kend, rows, kend, m.d, false, true,
                       m.scale, 0.0f);
          for (int64_t r = 0; r < rows; ++r) {
            // keys 0..q0 + r: exp(s - max), 0 beyond (normalised below, on the output row)
            const RowMaxSum ms = softmax_prefix_row_f32(sc + r * kend, q0 + r + 1, kend);
            inv[r] = 1.0f / ms.sum;
            lse_row[q0 + r] = ms.max + std::log(ms.sum);
          }
          // O[q0:q0+rows] (rows, D) = (exp(S - max) (rows, kend) @ V[0:kend] (kend, D)) / sum
          float* ob = of + q0 * ldq;
          gemm_strided(sc, kend, vf, ldkv, ob, ldq, rows, m.d, kend, false, false, 1.0f, 0.0f);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < m.d; ++j) ob[r * ldq + j] *= inv[r];
        }
        if constexpr (!kDirect) store_head(of, b, h, m.t, m.hq, m.d, po);
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
    const float* plse = lse.data_as<float>();
    dispatch_act(q.dtype(), "attention_backward", [&]<typename T>() {
      constexpr bool kDirect = std::is_same_v<T, float>;
      // dK, dV straight into the outputs: fp32 with one query head per kv head. Else per
      // (b, q head) private (T, D) buffers, summed below.
      const bool direct_kv = kDirect && m.group == 1;
      std::unique_ptr<float[]> dkp, dvp;
      if (!direct_kv) {
        dkp = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(m.b * m.hq * td));
        dvp = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(m.b * m.hq * td));
      }
      const T* pq = static_cast<const T*>(q.data());
      const T* pk = static_cast<const T*>(k.data());
      const T* pv = static_cast<const T*>(v.data());
      const T* po = static_cast<const T*>(out.data());
      const T* pdo = static_cast<const T*>(dout.data());
      T* pdq = static_cast<T*>(dq.data());
      T* pdk = static_cast<T*>(dk.data());
      T* pdv = static_cast<T*>(dv.data());
      parallel_for_each(m.b * m.hq, 1, [&](int64_t task) {
        const int64_t b = task / m.hq, h = task % m.hq, g = h / m.group;
        const int64_t ldq = kDirect ? m.hq * m.d : m.d, ldkv = kDirect ? m.hkv * m.d : m.d;
        // P, dP of one query block (and the bf16 heads' copies): all written before read.
        const int64_t blk = std::min(kQBlock, m.t) * m.t;
        float* pb = thread_scratch(static_cast<size_t>(2 * blk + (kDirect ? 0 : 6 * td)));
        float* dpb = pb + blk;
        const float *qf, *kf, *vf, *of, *dof;
        float* dqf;
        if constexpr (kDirect) {
          const int64_t hq0 = (b * m.t * m.hq + h) * m.d, hkv0 = (b * m.t * m.hkv + g) * m.d;
          qf = pq + hq0, kf = pk + hkv0, vf = pv + hkv0, of = po + hq0, dof = pdo + hq0;
          dqf = pdq + hq0;
        } else {
          float* copies = dpb + blk;
          load_head(pq, b, h, m.t, m.hq, m.d, copies);
          load_head(pk, b, g, m.t, m.hkv, m.d, copies + td);
          load_head(pv, b, g, m.t, m.hkv, m.d, copies + 2 * td);
          load_head(po, b, h, m.t, m.hq, m.d, copies + 3 * td);
          load_head(pdo, b, h, m.t, m.hq, m.d, copies + 4 * td);
          qf = copies, kf = copies + td, vf = copies + 2 * td, of = copies + 3 * td;
          dof = copies + 4 * td, dqf = copies + 5 * td;
        }
        float *dkf, *dvf;
        int64_t lddkv;
        if (direct_kv) {
          if constexpr (kDirect) {
            dkf = pdk + (b * m.t * m.hkv + g) * m.d;
            dvf = pdv + (b * m.t * m.hkv + g) * m.d;
          }
          lddkv = ldkv;
        } else {
          dkf = dkp.get() + task * td;
          dvf = dvp.get() + task * td;
          lddkv = m.d;
        }
        const float* lse_row = plse + (b * m.hq + h) * m.t;
        for (int64_t q0 = 0; q0 < m.t; q0 += kQBlock) {
          const int64_t rows = std::min(kQBlock, m.t - q0), kend = q0 + rows;
          const float* qb = qf + q0 * ldq;
          const float* dob = dof + q0 * ldq;
          gemm_strided(qb, ldq, kf, ldkv, pb, kend, rows, kend, m.d, false, true, m.scale, 0.0f);
          gemm_strided(dob, ldq, vf, ldkv, dpb, kend, rows, kend, m.d, false, true, 1.0f, 0.0f);
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t valid = q0 + r + 1;
            const float l = lse_row[q0 + r];
            const float dsum = dot_f32(dob + r * ldq, of + (q0 + r) * ldq, m.d);
            // P from lse, and dS in dp's place.
            softmax_backward_row_f32(pb + r * kend, dpb + r * kend, valid, kend, l, dsum);
          }
          // dQ[q0:] (rows, D) = scale * dS (rows, kend) @ K[0:kend]
          gemm_strided(dpb, kend, kf, ldkv, dqf + q0 * ldq, ldq, rows, m.d, kend, false, false,
                       m.scale, 0.0f);
          // dK[0:kend] += scale * dS^T @ Q_blk;  dV[0:kend] += P^T @ dO_blk   (kend, D)
          accumulate_keys(dpb, kend, qb, ldq, dkf, lddkv, q0, kend, rows, m.d, m.scale);
          accumulate_keys(pb, kend, dob, ldq, dvf, lddkv, q0, kend, rows, m.d, 1.0f);
        }
        if constexpr (!kDirect) store_head(dqf, b, h, m.t, m.hq, m.d, pdq);
      });
      if (direct_kv) return;
      // Sum the q heads of each kv group, in head order.
      // Per element head 0 + head 1 + ... in head order; rows of D at a time (vectorised).
      parallel_for_each(m.b * m.t, row_grain(m.hkv * m.d), [&](int64_t bt) {
        const int64_t b = bt / m.t, t = bt % m.t;
        float* sk = thread_scratch(static_cast<size_t>(2 * m.d));
        float* sv = sk + m.d;
        for (int64_t g = 0; g < m.hkv; ++g) {
          std::fill(sk, sk + 2 * m.d, 0.0f);
          for (int64_t h = g * m.group; h < (g + 1) * m.group; ++h) {
            const size_t row = static_cast<size_t>((b * m.hq + h) * td + t * m.d);
            const float* rk = dkp.get() + row;
            const float* rv = dvp.get() + row;
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
