// tests/kernels/attention_test.cpp — causal grouped-query attention forward (out, lse) and
// backward (dq, dk, dv) against a naive float64 reference, whose gradient is itself checked by
// central finite differences; T = 1, odd T, T crossing the CPU backend's 64-row query blocks,
// Hq = Hkv (MHA), Hq > Hkv (GQA), f32 and bf16; determinism and validation.
#include <algorithm>

#include "tests/kernels/kernel_test_util.h"

namespace moezero::test {
namespace {

struct Dims {
  int64_t b, t, hq, hkv, d;
};

// Reference forward: out (B, T, Hq, D), lse (B, Hq, T).
void ref_forward(const Dims& m, const DVec& q, const DVec& k, const DVec& v, DVec* out, DVec* lse) {
  out->assign(m.b * m.t * m.hq * m.d, 0.0);
  lse->assign(m.b * m.hq * m.t, 0.0);
  const double scale = 1.0 / std::sqrt(double(m.d));
  const int64_t group = m.hq / m.hkv;
  for (int64_t b = 0; b < m.b; ++b) {
    for (int64_t h = 0; h < m.hq; ++h) {
      const int64_t g = h / group;
      for (int64_t t = 0; t < m.t; ++t) {
        const double* qr = &q[((b * m.t + t) * m.hq + h) * m.d];
        DVec sc(t + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          const double* kr = &k[((b * m.t + j) * m.hkv + g) * m.d];
          double dot = 0;
          for (int64_t d = 0; d < m.d; ++d) dot += qr[d] * kr[d];
          sc[j] = dot * scale;
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double x : sc) sum += std::exp(x - mx);
        (*lse)[(b * m.hq + h) * m.t + t] = mx + std::log(sum);
        double* o = &(*out)[((b * m.t + t) * m.hq + h) * m.d];
        for (int64_t j = 0; j <= t; ++j) {
          const double p = std::exp(sc[j] - mx) / sum;
          const double* vr = &v[((b * m.t + j) * m.hkv + g) * m.d];
          for (int64_t d = 0; d < m.d; ++d) o[d] += p * vr[d];
        }
      }
    }
  }
}

// Reference backward (naive, per query row): dp = dO v; Di = sum p dp; ds = p (dp - Di).
// When `out_in` is given, Di = dO . out_in instead (equal in exact arithmetic): the op reads its
// `out` input, so a test that feeds it a rounded out compares against the same input.
void ref_backward(const Dims& m, const DVec& q, const DVec& k, const DVec& v, const DVec& dout,
                  DVec* dq, DVec* dk, DVec* dv, const DVec* out_in = nullptr) {
  dq->assign(q.size(), 0.0);
  dk->assign(k.size(), 0.0);
  dv->assign(v.size(), 0.0);
  const double scale = 1.0 / std::sqrt(double(m.d));
  const int64_t group = m.hq / m.hkv;
  for (int64_t b = 0; b < m.b; ++b) {
    for (int64_t h = 0; h < m.hq; ++h) {
      const int64_t g = h / group;
      for (int64_t t = 0; t < m.t; ++t) {
        const int64_t qo = ((b * m.t + t) * m.hq + h) * m.d;
        DVec p(t + 1), dp(t + 1);
        double mx = -1e300, sum = 0, di = 0;
        for (int64_t j = 0; j <= t; ++j) {
          const int64_t ko = ((b * m.t + j) * m.hkv + g) * m.d;
          double dot = 0, dd = 0;
          for (int64_t d = 0; d < m.d; ++d) {
            dot += q[qo + d] * k[ko + d];
            dd += dout[qo + d] * v[ko + d];
          }
          p[j] = dot * scale;
          dp[j] = dd;
          mx = std::max(mx, p[j]);
        }
        for (auto& x : p) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j <= t; ++j) di += (p[j] /= sum) * dp[j];
        if (out_in) {
          di = 0;
          for (int64_t d = 0; d < m.d; ++d) di += dout[qo + d] * (*out_in)[qo + d];
        }
        for (int64_t j = 0; j <= t; ++j) {
          const int64_t ko = ((b * m.t + j) * m.hkv + g) * m.d;
          const double ds = p[j] * (dp[j] - di);
          for (int64_t d = 0; d < m.d; ++d) {
            (*dq)[qo + d] += scale * ds * k[ko + d];
            (*dk)[ko + d] += scale * ds * q[qo + d];
            (*dv)[ko + d] += p[j] * dout[qo + d];
          }
        }
      }
    }
  }
}

double max_abs(const DVec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

class AttentionTest : public KernelTest {};

TEST_P(AttentionTest, ReferenceGradientMatchesFiniteDifferences) {
  const Dims m{1, 4, 2, 1, 3};
  const DVec q = to_double(rand_vec(m.b * m.t * m.hq * m.d)),
             k = to_double(rand_vec(m.b * m.t * m.hkv * m.d)),
             v = to_double(rand_vec(m.b * m.t * m.hkv * m.d)), dout = to_double(rand_vec(q.size()));
  DVec dq, dk, dv;
  ref_backward(m, q, k, v, dout, &dq, &dk, &dv);
  auto loss = [&](const DVec& qq, const DVec& kk, const DVec& vv) {
    DVec out, lse;
    ref_forward(m, qq, kk, vv, &out, &lse);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * dout[i];
    return l;
  };
  const double h = 1e-6;
  auto check = [&](DVec x, const DVec& grad, int which, const char* name) {
    for (size_t i = 0; i < x.size(); ++i) {
      DVec xp = x, xm = x;
      xp[i] += h;
      xm[i] -= h;
      const double fd = which == 0   ? (loss(xp, k, v) - loss(xm, k, v)) / (2 * h)
                        : which == 1 ? (loss(q, xp, v) - loss(q, xm, v)) / (2 * h)
                                     : (loss(q, k, xp) - loss(q, k, xm)) / (2 * h);
      EXPECT_NEAR(fd, grad[i], 1e-6) << name << "[" << i << "]";
    }
  };
  check(q, dq, 0, "dq");
  check(k, dk, 1, "dk");
  check(v, dv, 2, "dv");
}

TEST_P(AttentionTest, ForwardBackwardOddSizesMhaGqa) {
  const Dims cases[] = {
      {1, 1, 1, 1, 8}, {2, 3, 3, 3, 2}, {2, 17, 4, 2, 16}, {1, 129, 2, 1, 8}, {1, 65, 6, 2, 4}};
  for (DType t : {DType::F32, DType::BF16}) {
    for (const Dims& m : cases) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " B " << m.b << " T " << m.t << " Hq "
                                        << m.hq << " Hkv " << m.hkv << " D " << m.d);
      const Shape sq{m.b, m.t, m.hq, m.d}, skv{m.b, m.t, m.hkv, m.d};
      const Vec q = round_to(t, rand_vec(sq.numel(), -2, 2)),
                k = round_to(t, rand_vec(skv.numel(), -2, 2)),
                v = round_to(t, rand_vec(skv.numel())), dout = round_to(t, rand_vec(sq.numel()));
      DVec ro, rlse, rdq, rdk, rdv;
      ref_forward(m, to_double(q), to_double(k), to_double(v), &ro, &rlse);
      const Vec out_in = round_to(t, Vec(ro.begin(), ro.end()));  // the backward's out input
      const DVec out_in_d = to_double(out_in);
      ref_backward(m, to_double(q), to_double(k), to_double(v), to_double(dout), &rdq, &rdk, &rdv,
                   &out_in_d);
      TensorBuffer tq = upload(q, t, sq), tk = upload(k, t, skv), tv = upload(v, t, skv);
      TensorBuffer out = alloc(t, sq), lse = alloc(DType::F32, Shape{m.b, m.hq, m.t});
      ops().attention_forward(s(), tq, tk, tv, out, lse);
      // f32: fp32 dot products of D terms and sums over T keys: 1e-5 * sqrt(T * D) relative to
      // the output's scale (plus a floor for gradients that are exactly 0, e.g. T = 1). bf16:
      // the reference used the same rounded inputs (out included), so output rounding (2^-9)
      // plus fp32 accumulation remain; 2^-8 of the element or of the output's scale.
      const double sq_n = std::sqrt(double(m.t * m.d));
      const bool f32 = t == DType::F32;
      auto tol_of = [&](const DVec& ref) {
        return f32 ? Tol{1e-5 * sq_n, 1e-5 * sq_n * (max_abs(ref) + 0.1)}
                   : Tol{1.0 / 256, (max_abs(ref) + 0.1) / 256};
      };
      Tol tl = tol_of(ro);
      EXPECT_TRUE(all_close(download(out), ro, tl.rtol, tl.atol)) << "out";
      EXPECT_TRUE(all_close(download(lse), rlse, 1e-5 * sq_n, 1e-5 * sq_n)) << "lse";
      // Backward from the reference's out (rounded to t) and lse: isolates the backward.
      TensorBuffer tout = upload(out_in, t, sq);
      TensorBuffer tlse = upload(Vec(rlse.begin(), rlse.end()), DType::F32, lse.view().shape());
      TensorBuffer tdo = upload(dout, t, sq);
      TensorBuffer dq = alloc(t, sq), dk = alloc(t, skv), dv = alloc(t, skv);
      ops().attention_backward(s(), tq, tk, tv, tout, tlse, tdo, dq, dk, dv);
      tl = tol_of(rdq);
      EXPECT_TRUE(all_close(download(dq), rdq, tl.rtol, tl.atol)) << "dq";
      tl = tol_of(rdk);
      EXPECT_TRUE(all_close(download(dk), rdk, tl.rtol, tl.atol)) << "dk";
      tl = tol_of(rdv);
      EXPECT_TRUE(all_close(download(dv), rdv, tl.rtol, tl.atol)) << "dv";
      // Deterministic: a second backward is bit-identical.
      TensorBuffer dk2 = alloc(t, skv);
      ops().attention_backward(s(), tq, tk, tv, tout, tlse, tdo, dq, dk2, dv);
      EXPECT_EQ(download_bytes(dk), download_bytes(dk2)) << "rerun";
    }
  }
}

TEST_P(AttentionTest, ValidationNamesTheOp) {
  TensorBuffer q = alloc(DType::F32, Shape{1, 4, 3, 8}), k = alloc(DType::F32, Shape{1, 4, 2, 8});
  TensorBuffer lse = alloc(DType::F32, Shape{1, 3, 4}), k1 = alloc(DType::F32, Shape{1, 4, 1, 8});
  EXPECT_MOEZERO_ERROR(ops().attention_forward(s(), q, k, k, q, lse),
                       "attention_forward: q is f32(1, 4, 3, 8) and k is f32(1, 4, 2, 8): Hq = 3");
  TensorBuffer bad_lse = alloc(DType::F32, Shape{1, 4, 3});
  EXPECT_MOEZERO_ERROR(ops().attention_forward(s(), q, k1, k1, q, bad_lse),
                       "attention_forward: lse is f32(1, 4, 3) but must be f32(1, 3, 4)");
  TensorBuffer kh = alloc(DType::BF16, Shape{1, 4, 1, 8});
  EXPECT_MOEZERO_ERROR(ops().attention_forward(s(), q, kh, kh, q, lse), "dtypes differ");
  EXPECT_MOEZERO_ERROR(ops().attention_backward(s(), q, k1, k1, q, lse, q, q, k, k1),
                       "attention_backward: dk is f32(1, 4, 2, 8) but must match k");
  sync();
}

MOEZERO_INSTANTIATE_BACKENDS(AttentionTest);

}  // namespace
}  // namespace moezero::test
