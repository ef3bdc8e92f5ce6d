// tests/kernels/norm_test.cpp — embedding forward/backward (repeated ids, determinism, bad ids),
// RMSNorm forward/backward (reference gradient checked by finite differences) and RoPE forward
// and backward (the inverse rotation) against float64 references.
#include "tests/kernels/kernel_test_util.h"

namespace moezero::test {
namespace {

using NormTest = KernelTest;

TEST_P(NormTest, EmbeddingForwardBackwardDeterministic) {
  for (DType t : {DType::F32, DType::BF16}) {
    const int64_t v = 17, c = 129, n = 300;  // 300 tokens over 17 rows: many repeats
    SCOPED_TRACE(dtype_name(t));
    IVec ids(n);
    for (auto& id : ids) id = rand_int(0, static_cast<int32_t>(v - 1));
    const Vec table = round_to(t, rand_vec(v * c)), dout = round_to(t, rand_vec(n * c));
    const Vec dt0 = rand_vec(v * c);
    TensorBuffer tid = upload_i32(ids, Shape{n}), ttab = upload(table, t, Shape{v, c});
    TensorBuffer out = alloc(t, Shape{n, c}), tdo = upload(dout, t, Shape{n, c});
    TensorBuffer dtab = upload(dt0, DType::F32, Shape{v, c});
    ops().embedding_forward(s(), tid, ttab, out);
    ops().embedding_backward(s(), tid, tdo, dtab);
    Vec ro(n * c);
    DVec rdt(dt0.begin(), dt0.end());
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < c; ++j) {
        ro[i * c + j] = table[ids[i] * c + j];
        rdt[ids[i] * c + j] += dout[i * c + j];
      }
    }
    EXPECT_EQ(download(out), ro);  // a copy: exact
    // dtable: up to ~n/v + 1 f32 additions per element.
    EXPECT_TRUE(all_close(download(dtab), rdt, 1e-5 * std::sqrt(double(n)), 1e-5)) << "dtable";
    // Bit-identical on a rerun.
    TensorBuffer dtab2 = upload(dt0, DType::F32, Shape{v, c});
    ops().embedding_backward(s(), tid, tdo, dtab2);
    TensorBuffer dtab3 = upload(dt0, DType::F32, Shape{v, c});
    ops().embedding_backward(s(), tid, tdo, dtab3);
    EXPECT_EQ(download_bytes(dtab2), download_bytes(dtab3));
  }
}

TEST_P(NormTest, EmbeddingBadIdFailsOnTheStream) {
  TensorBuffer tid = upload_i32({0, 5, 2}, Shape{3});
  TensorBuffer tab = alloc(DType::F32, Shape{5, 4}), out = alloc(DType::F32, Shape{3, 4});
  ops().embedding_forward(s(), tid, tab, out);
  EXPECT_MOEZERO_ERROR(sync(), "embedding_forward: ids[1] = 5");
}

// RMSNorm in double: out = x r w, r = 1/sqrt(mean(x^2) + eps).
void ref_rmsnorm(const Vec& x, const Vec& w, double eps, int64_t rows, int64_t c, DVec* out,
                 DVec* rstd) {
  out->assign(rows * c, 0.0);
  rstd->assign(rows, 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    double ss = 0;
    for (int64_t j = 0; j < c; ++j) ss += double(x[t * c + j]) * x[t * c + j];
    const double r = 1.0 / std::sqrt(ss / c + eps);
    (*rstd)[t] = r;
    for (int64_t j = 0; j < c; ++j) (*out)[t * c + j] = x[t * c + j] * r * w[j];
  }
}

// Gradient in double (same formula as the kernel's header, derived independently):
// dx_j = r g_j - x_j r^3 sum(g x) / C with g = dout w; dw_j += sum_t dout x_j r.
void ref_rmsnorm_backward(const DVec& x, const DVec& w, const DVec& dout, double eps, int64_t rows,
                          int64_t c, DVec* dx, DVec* dw) {
  dx->assign(rows * c, 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    double ss = 0, gx = 0;
    for (int64_t j = 0; j < c; ++j) ss += x[t * c + j] * x[t * c + j];
    const double r = 1.0 / std::sqrt(ss / c + eps);
    for (int64_t j = 0; j < c; ++j) gx += dout[t * c + j] * w[j] * x[t * c + j];
    for (int64_t j = 0; j < c; ++j) {
      (*dx)[t * c + j] = r * dout[t * c + j] * w[j] - x[t * c + j] * r * r * r * gx / c;
      (*dw)[j] += dout[t * c + j] * x[t * c + j] * r;
    }
  }
}

TEST_P(NormTest, RmsnormReferenceGradientMatchesFiniteDifferences) {
  const int64_t rows = 2, c = 5;
  const double eps = 1e-5;
  const Vec x = rand_vec(rows * c), w = rand_vec(c), d = rand_vec(rows * c);
  DVec dx, dw(c, 0.0);
  ref_rmsnorm_backward(to_double(x), to_double(w), to_double(d), eps, rows, c, &dx, &dw);
  auto loss = [&](const DVec& xx, const DVec& ww) {  // sum(dout * rmsnorm(x, w))
    double l = 0;
    for (int64_t t = 0; t < rows; ++t) {
      double ss = 0;
      for (int64_t j = 0; j < c; ++j) ss += xx[t * c + j] * xx[t * c + j];
      const double r = 1.0 / std::sqrt(ss / c + eps);
      for (int64_t j = 0; j < c; ++j) l += d[t * c + j] * xx[t * c + j] * r * ww[j];
    }
    return l;
  };
  const double h = 1e-6;
  DVec xd = to_double(x), wd = to_double(w);
  for (int64_t i = 0; i < rows * c; ++i) {
    DVec xp = xd, xm = xd;
    xp[i] += h;
    xm[i] -= h;
    EXPECT_NEAR((loss(xp, wd) - loss(xm, wd)) / (2 * h), dx[i], 1e-6) << "dx " << i;
  }
  for (int64_t j = 0; j < c; ++j) {
    DVec wp = wd, wm = wd;
    wp[j] += h;
    wm[j] -= h;
    EXPECT_NEAR((loss(xd, wp) - loss(xd, wm)) / (2 * h), dw[j], 1e-6) << "dw " << j;
  }
}

TEST_P(NormTest, RmsnormForwardBackward) {
  const float eps = 1e-5f;
  for (DType t : {DType::F32, DType::BF16}) {
    for (auto [rows, c] : {std::pair<int64_t, int64_t>{1, 1}, {3, 17}, {17, 129}, {70, 3}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " (" << rows << ", " << c << ")");
      const Vec x = round_to(t, rand_vec(rows * c)), w = round_to(t, rand_vec(c, 0.5f, 1.5f));
      const Vec d = round_to(t, rand_vec(rows * c)), dw0 = rand_vec(c);
      TensorBuffer tx = upload(x, t, Shape{rows, c}), tw = upload(w, t, Shape{c});
      TensorBuffer td = upload(d, t, Shape{rows, c}), tdw = upload(dw0, DType::F32, Shape{c});
      TensorBuffer out = alloc(t, Shape{rows, c}), rstd = alloc(DType::F32, Shape{rows});
      TensorBuffer dx = alloc(t, Shape{rows, c});
      ops().rmsnorm_forward(s(), tx, tw, eps, out, rstd);
      ops().rmsnorm_backward(s(), td, tx, tw, rstd, dx, tdw);
      DVec ro, rr, rdx, rdw = to_double(dw0);
      ref_rmsnorm(x, w, eps, rows, c, &ro, &rr);
      ref_rmsnorm_backward(to_double(x), to_double(w), to_double(d), eps, rows, c, &rdx, &rdw);
      // Outputs are O(1) (normalised); the C-term sums set the f32 error.
      const Tol tl = tol_for(t, c, 1.0);
      EXPECT_TRUE(all_close(download(out), ro, tl.rtol, tl.atol)) << "out";
      EXPECT_TRUE(all_close(download(rstd), rr, 1e-5 * std::sqrt(double(c)), 0)) << "rstd";
      EXPECT_TRUE(all_close(download(dx), rdx, tl.rtol, 2 * tl.atol)) << "dx";
      // dw: f32 `+=` over rows; magnitudes ~ sqrt(rows).
      EXPECT_TRUE(all_close(download(tdw), rdw, 1e-5 * std::sqrt(double(rows * c)),
                            1e-5 * std::sqrt(double(rows * c))))
          << "dw";
    }
  }
}

TEST_P(NormTest, RopeForwardBackward) {
  for (DType t : {DType::F32, DType::BF16}) {
    const int64_t tn = 17, h = 3, d = 10;  // D/2 = 5: odd half
    SCOPED_TRACE(dtype_name(t));
    const float base = 10000.0f;
    IVec pos(tn);
    for (auto& p : pos) p = rand_int(0, 2047);
    pos[0] = 0;
    const Vec x = round_to(t, rand_vec(tn * h * d));
    TensorBuffer tx = upload(x, t, Shape{tn, h, d}), tp = upload_i32(pos, Shape{tn});
    TensorBuffer out = alloc(t, Shape{tn, h, d});
    ops().rope(s(), tx, tp, base, Ops::RopeDirection::Forward, out);
    const Vec got = download(out);
    DVec ref(tn * h * d);
    for (int64_t i = 0; i < tn; ++i) {
      for (int64_t hh = 0; hh < h; ++hh) {
        for (int64_t j = 0; j < d / 2; ++j) {
          const double ang = pos[i] * std::pow(double(base), -2.0 * j / d);
          const int64_t o = (i * h + hh) * d;
          ref[o + j] = x[o + j] * std::cos(ang) - x[o + j + d / 2] * std::sin(ang);
          ref[o + j + d / 2] = x[o + j + d / 2] * std::cos(ang) + x[o + j] * std::sin(ang);
        }
      }
    }
    // Angles up to 2047 rad: a backend forming them in fp32 is off by ~1e-4 absolute.
    const Tol tl = t == DType::F32 ? Tol{1e-5, 3e-4} : Tol{1.0 / 256, 3e-4};
    EXPECT_TRUE(all_close(got, ref, tl.rtol, tl.atol)) << "forward";
    // Backward is the inverse rotation: applying it in place to out gives x back. bf16 rounds
    // twice (forward output, then backward output), each 2^-9 of the rotated pair's magnitude
    // (up to sqrt(2)), so the absolute error of a small element can reach ~2^-7.
    ops().rope(s(), out, tp, base, Ops::RopeDirection::Backward, out);
    const Tol tb = t == DType::F32 ? Tol{1e-5, 6e-4} : Tol{2.0 / 256, 1.0 / 128};
    EXPECT_TRUE(all_close(download(out), to_double(x), tb.rtol, tb.atol)) << "backward";
  }
}

// The CPU backend keeps cos/sin tables per (base, D) for positions below 65536 and computes
// rows with larger (or negative) positions directly: both ways give the same bits, and a table
// grown by a later, longer call gives the same bits as the first one.
TEST_P(NormTest, RopeTablesGiveTheSameBitsAsDirectAngles) {
  const int64_t h = 2, d = 12;
  const float base = 5000.0f;  // a (base, D) no other test uses: the first call builds its table
  auto run = [&](const IVec& pos) {
    const int64_t tn = static_cast<int64_t>(pos.size());
    Vec x(static_cast<size_t>(tn * h * d));
    for (int64_t i = 0; i < tn * h * d; ++i)
      x[i] = 0.25f + 0.01f * static_cast<float>(i % (h * d));  // same in every row
    TensorBuffer tx = upload(x, DType::F32, Shape{tn, h, d}), tp = upload_i32(pos, Shape{tn});
    TensorBuffer out = alloc(DType::F32, Shape{tn, h, d});
    ops().rope(s(), tx, tp, base, Ops::RopeDirection::Forward, out);
    return download(out);
  };
  const Vec small = run({3, 100, 250});          // table for [0, 256)
  const Vec direct = run({3, 100, 250, 70000});  // 70000: every row computed directly
  const Vec grown = run({3, 100, 250, 5000});    // table grown to 5001 positions
  const size_t n3 = static_cast<size_t>(3 * h * d);
  EXPECT_EQ(Vec(direct.begin(), direct.begin() + n3), small);
  EXPECT_EQ(Vec(grown.begin(), grown.begin() + n3), small);
  const Vec far = run({5000});
  EXPECT_EQ(Vec(grown.begin() + n3, grown.end()), far);
}

TEST_P(NormTest, ValidationNamesTheOp) {
  TensorBuffer x = alloc(DType::F32, Shape{3, 4}), w5 = alloc(DType::F32, Shape{5});
  TensorBuffer w = alloc(DType::F32, Shape{4}), r = alloc(DType::F32, Shape{3});
  EXPECT_MOEZERO_ERROR(ops().rmsnorm_forward(s(), x, w5, 1e-5f, x, r),
                       "rmsnorm_forward: w is f32(5) but must be f32(4)");
  TensorBuffer dw = alloc(DType::BF16, Shape{4});
  EXPECT_MOEZERO_ERROR(ops().rmsnorm_backward(s(), x, x, w, r, x, dw),
                       "rmsnorm_backward: dw is bf16(4) but must be f32(4)");
  TensorBuffer q = alloc(DType::F32, Shape{3, 2, 5}), p = alloc(DType::I32, Shape{3});
  EXPECT_MOEZERO_ERROR(ops().rope(s(), q, p, 1e4f, Ops::RopeDirection::Forward, q),
                       "rope: x is f32(3, 2, 5) but D = 5 is odd");
  TensorBuffer ids = alloc(DType::I32, Shape{2}), tab = alloc(DType::F32, Shape{7, 4});
  EXPECT_MOEZERO_ERROR(ops().embedding_forward(s(), ids, tab, x),
                       "embedding_forward: out is f32(3, 4) but must be f32(2, 4)");
  EXPECT_MOEZERO_ERROR(ops().embedding_backward(s(), ids, x, tab),
                       "embedding_backward: dout is f32(3, 4) but dim 0 must be 2");
  sync();
}

MOEZERO_INSTANTIATE_BACKENDS(NormTest);

}  // namespace
}  // namespace moezero::test
