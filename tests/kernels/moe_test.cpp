// tests/kernels/moe_test.cpp — the MoE data movers: expert_histogram and sort_by_expert with
// random expert ids including -1 (dropped) and empty experts (stability checked explicitly),
// gather_rows (dispatch), combine_rows with and without weights, combine_rows_backward, bad ids
// failing on the stream, and validation.
#include "tests/kernels/kernel_test_util.h"

namespace moezero::test {
namespace {

class MoeFixture : public KernelTest {
 protected:
  // Random ids in [-1, E) with expert `empty` never used.
  IVec random_ids(int64_t n, int e, int empty) {
    IVec ids(n);
    for (auto& id : ids) {
      do {
        id = rand_int(-1, e - 1);
      } while (id == empty);
    }
    return ids;
  }
};

TEST_P(MoeFixture, HistogramAndStableSortWithDroppedAndEmptyExperts) {
  for (auto [t, k, e] :
       {std::tuple<int64_t, int, int>{1, 1, 1}, {3, 2, 5}, {17, 2, 8}, {129, 4, 16}, {0, 2, 3}}) {
    SCOPED_TRACE(::testing::Message() << "T " << t << " k " << k << " E " << e);
    const int64_t n = t * k;
    const IVec ids = random_ids(n, e, e > 2 ? 1 : -2);  // expert 1 empty when E > 2
    TensorBuffer tid = upload_i32(ids, Shape{n});
    TensorBuffer counts = alloc(DType::I32, Shape{e}), perm = alloc(DType::I32, Shape{n});
    TensorBuffer inv = alloc(DType::I32, Shape{n}), off = alloc(DType::I32, Shape{e + 1});
    ops().expert_histogram(s(), tid, e, counts);
    ops().sort_by_expert(s(), tid, e, perm, inv, off);
    const IVec gc = download_i32(counts), gp = download_i32(perm), gi = download_i32(inv),
               go = download_i32(off);
    IVec rc(e, 0);
    for (int32_t id : ids) {
      if (id >= 0) ++rc[id];
    }
    EXPECT_EQ(gc, rc);
    if (e > 2) {
      EXPECT_EQ(gc[1], 0);
    }
    IVec ro(e + 1, 0);
    for (int i = 0; i < e; ++i) ro[i + 1] = ro[i] + rc[i];
    EXPECT_EQ(go, ro);
    const int32_t kept = ro[e];
    // Expected: per expert, its assignments in increasing a (stability), dropped excluded.
    IVec rp;
    for (int x = 0; x < e; ++x) {
      for (int64_t a = 0; a < n; ++a) {
        if (ids[a] == x) rp.push_back(static_cast<int32_t>(a));
      }
    }
    rp.resize(n, -1);
    EXPECT_EQ(gp, rp);
    for (int64_t p = 1; p < kept; ++p) {  // stability, explicitly
      if (ids[gp[p]] == ids[gp[p - 1]]) {
        EXPECT_LT(gp[p - 1], gp[p]) << "p " << p;
      }
    }
    for (int64_t a = 0; a < n; ++a) {
      if (ids[a] < 0) {
        EXPECT_EQ(gi[a], -1) << "a " << a;
      } else {
        ASSERT_GE(gi[a], 0);
        EXPECT_EQ(gp[gi[a]], a) << "inverse at a " << a;
      }
    }
  }
}

TEST_P(MoeFixture, GatherCombineAndBackward) {
  for (DType dt : {DType::F32, DType::BF16}) {
    for (auto [t, k, e, c] : {std::tuple<int64_t, int, int, int64_t>{1, 1, 1, 1},
                              {3, 2, 4, 17},
                              {17, 2, 8, 129},
                              {40, 3, 5, 3}}) {
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(dt) << " T " << t << " k " << k << " E " << e << " C " << c);
      const int64_t n = t * k;
      const IVec ids = random_ids(n, e, -2);
      TensorBuffer tid = upload_i32(ids, Shape{n});
      TensorBuffer perm = alloc(DType::I32, Shape{n}), inv = alloc(DType::I32, Shape{n});
      TensorBuffer off = alloc(DType::I32, Shape{e + 1});
      ops().sort_by_expert(s(), tid, e, perm, inv, off);
      const IVec gp = download_i32(perm), gi = download_i32(inv);
      const int64_t kept = download_i32(off)[e];
      const Vec x = round_to(dt, rand_vec(t * c));
      TensorBuffer tx = upload(x, dt, Shape{t, c}), disp = alloc(dt, Shape{kept, c});
      ops().gather_rows(s(), tx, perm, k, disp);
      Vec rdisp(kept * c);
      for (int64_t p = 0; p < kept; ++p) {
        for (int64_t j = 0; j < c; ++j) rdisp[p * c + j] = x[(gp[p] / k) * c + j];
      }
      EXPECT_EQ(download(disp), rdisp) << "gather_rows is a copy";
      // Combine expert outputs y (kept, C) with weights w (T, k), and without weights.
      const Vec y = round_to(dt, rand_vec(kept * c)), w = rand_vec(n, 0, 1);
      const Vec dout = round_to(dt, rand_vec(t * c));
      TensorBuffer ty = upload(y, dt, Shape{kept, c}), tw = upload(w, DType::F32, Shape{t, k});
      TensorBuffer out = alloc(dt, Shape{t, c}), out1 = alloc(dt, Shape{t, c});
      ops().combine_rows(s(), ty, inv, tw, k, out);
      ops().combine_rows(s(), ty, inv, Tensor{}, k, out1);
      DVec ro(t * c, 0.0), ro1(t * c, 0.0), rdy(kept * c), rdw(n, 0.0);
      for (int64_t a = 0; a < n; ++a) {
        if (gi[a] < 0) continue;
        for (int64_t j = 0; j < c; ++j) {
          ro[(a / k) * c + j] += double(w[a]) * y[gi[a] * c + j];
          ro1[(a / k) * c + j] += y[gi[a] * c + j];
          rdw[a] += double(dout[(a / k) * c + j]) * y[gi[a] * c + j];
        }
      }
      for (int64_t p = 0; p < kept; ++p) {
        for (int64_t j = 0; j < c; ++j)
          rdy[p * c + j] = double(w[gp[p]]) * dout[(gp[p] / k) * c + j];
      }
      // k-term sums: f32 ~1e-6; bf16 output rounding 2^-9.
      const Tol tl = tol_for(dt, k, 1.0);
      EXPECT_TRUE(all_close(download(out), ro, tl.rtol, tl.atol)) << "combine";
      EXPECT_TRUE(all_close(download(out1), ro1, tl.rtol, tl.atol)) << "combine, no weights";
      TensorBuffer tdo = upload(dout, dt, Shape{t, c}), dy = alloc(dt, Shape{kept, c});
      TensorBuffer dw = alloc(DType::F32, Shape{t, k});
      ops().combine_rows_backward(s(), tdo, ty, perm, inv, tw, k, dy, dw);
      EXPECT_TRUE(all_close(download(dy), rdy, tl.rtol, tl.atol)) << "dy";
      // dweights: C-term f32 dot products (f32 for both dtypes).
      EXPECT_TRUE(
          all_close(download(dw), rdw, 1e-5 * std::sqrt(double(c)), 1e-5 * std::sqrt(double(c))))
          << "dweights";
      // Without weights: dy is the gather of dout (the backward of gather_rows is combine).
      ops().combine_rows_backward(s(), tdo, ty, perm, inv, Tensor{}, k, dy, Tensor{});
      Vec rdy1(kept * c);
      const Vec dor = download(tdo);
      for (int64_t p = 0; p < kept; ++p) {
        for (int64_t j = 0; j < c; ++j) rdy1[p * c + j] = dor[(gp[p] / k) * c + j];
      }
      EXPECT_EQ(download(dy), rdy1) << "dy without weights";
    }
  }
}

TEST_P(MoeFixture, BadIdsFailOnTheStream) {
  TensorBuffer tid = upload_i32({0, 3, -1}, Shape{3});
  TensorBuffer counts = alloc(DType::I32, Shape{3});
  ops().expert_histogram(s(), tid, 3, counts);
  EXPECT_MOEZERO_ERROR(sync(), "expert_histogram: expert_ids[1] = 3");
}

TEST_P(MoeFixture, ValidationNamesTheOp) {
  TensorBuffer ids = alloc(DType::I32, Shape{6}), c4 = alloc(DType::I32, Shape{4});
  EXPECT_MOEZERO_ERROR(ops().expert_histogram(s(), ids, 3, c4),
                       "expert_histogram: counts is i32(4) but must be i32(3)");
  EXPECT_MOEZERO_ERROR(ops().sort_by_expert(s(), ids, 4, ids, ids, c4),
                       "sort_by_expert: offsets is i32(4) but must be i32(5)");
  TensorBuffer x = alloc(DType::F32, Shape{3, 8}), out = alloc(DType::F32, Shape{7, 8});
  EXPECT_MOEZERO_ERROR(ops().gather_rows(s(), x, ids, 2, out),
                       "gather_rows: out is f32(7, 8) but perm is i32(6)");
  EXPECT_MOEZERO_ERROR(ops().gather_rows(s(), x, ids, 3, out), "gather_rows: perm is i32(6)");
  TensorBuffer w = alloc(DType::F32, Shape{2, 3});
  EXPECT_MOEZERO_ERROR(ops().combine_rows(s(), out, ids, w, 2, x),
                       "combine_rows: weights is f32(2, 3) but must be f32(3, 2)");
  sync();
}

MOEZERO_INSTANTIATE_BACKENDS(MoeFixture);

}  // namespace
}  // namespace moezero::test
