// tests/kernels/router_ops_test.cpp — the ops the router is written with: mul (elementwise
// product), logsumexp (z-loss), gather_cols and scatter_add_cols (moves between (N, E) and
// (N, k) rows), cast of i32 counts to f32, against float64 references on every backend; absent (-1) indices, bad indices
// failing on the stream, and validation errors that name the op.
#include <algorithm>
#include <cmath>

#include "tests/kernels/kernel_test_util.h"

namespace moezero::test {
namespace {

using RouterOpsTest = KernelTest;

TEST_P(RouterOpsTest, MulMatchesReferenceAndMayAlias) {
  for (DType t : {DType::F32, DType::BF16}) {
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{40000}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n " << n);
      const Vec a = round_to(t, rand_vec(n, -3.0f, 3.0f)), b = round_to(t, rand_vec(n));
      TensorBuffer ta = upload(a, t, Shape{n}), tb = upload(b, t, Shape{n});
      TensorBuffer out = alloc(t, Shape{n});
      ops().mul(s(), ta, tb, out);
      DVec ref(n);
      for (int64_t i = 0; i < n; ++i) ref[i] = double(a[i]) * b[i];
      const Tol tl = tol_for(t, 1);
      EXPECT_TRUE(all_close(download(out), ref, tl.rtol, tl.atol)) << "mul";
      ops().mul(s(), ta, tb, tb);  // out aliases b
      EXPECT_TRUE(all_close(download(tb), ref, tl.rtol, tl.atol)) << "mul aliased";
    }
  }
  TensorBuffer a = alloc(DType::F32, Shape{4}), b = alloc(DType::F32, Shape{5});
  EXPECT_MOEZERO_ERROR(ops().mul(s(), a, b, a), "mul: b is f32(5) but must match a f32(4)");
}

TEST_P(RouterOpsTest, LogsumexpIsStable) {
  for (int64_t c : {int64_t{1}, int64_t{8}, int64_t{1000}}) {
    SCOPED_TRACE(::testing::Message() << "C " << c);
    const int64_t r = 5;
    Vec x = rand_vec(r * c, -4.0f, 4.0f);
    for (int64_t j = 0; j < c; ++j) x[4 * c + j] += 500.0f;  // exp would overflow unshifted
    TensorBuffer tx = upload(x, DType::F32, Shape{r, c});
    TensorBuffer out = alloc(DType::F32, Shape{r});
    ops().logsumexp(s(), tx, out);
    DVec ref(r);
    for (int64_t i = 0; i < r; ++i) {
      double mx = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < c; ++j) mx = std::max(mx, double(x[i * c + j]));
      for (int64_t j = 0; j < c; ++j) sum += std::exp(double(x[i * c + j]) - mx);
      ref[i] = mx + std::log(sum);
    }
    // fp32 exp/log of c terms: a few ulps of the result, relative.
    EXPECT_TRUE(all_close(download(out), ref, 1e-6 * std::sqrt(double(c)) + 1e-6, 1e-6));
  }
  TensorBuffer x = alloc(DType::F32, Shape{3, 4}), out = alloc(DType::F32, Shape{4});
  EXPECT_MOEZERO_ERROR(ops().logsumexp(s(), x, out), "logsumexp: out is f32(4) but must be f32(3)");
  TensorBuffer xb = alloc(DType::BF16, Shape{3, 4}), o3 = alloc(DType::F32, Shape{3});
  EXPECT_MOEZERO_ERROR(ops().logsumexp(s(), xb, o3), "logsumexp: x is bf16(3, 4) but must be f32");
}

TEST_P(RouterOpsTest, GatherAndScatterAddColsWithAbsentChoices) {
  const int64_t R = 37, C = 9, k = 3;
  // Distinct choices per row (as top-k gives), some absent (-1, a dropped assignment).
  IVec idx(R * k);
  for (int64_t r = 0; r < R; ++r) {
    std::vector<int32_t> cols(C);
    for (int32_t c = 0; c < C; ++c) cols[c] = c;
    std::shuffle(cols.begin(), cols.end(), rng());
    for (int64_t j = 0; j < k; ++j) idx[r * k + j] = rand_int(0, 4) == 0 ? -1 : cols[j];
  }
  const Vec x = rand_vec(R * C), src = rand_vec(R * k), base = rand_vec(R * C);
  TensorBuffer tx = upload(x, DType::F32, Shape{R, C}), ti = upload_i32(idx, Shape{R, k});
  TensorBuffer tsrc = upload(src, DType::F32, Shape{R, k});
  TensorBuffer out = upload(rand_vec(R * k), DType::F32, Shape{R, k});  // `=`: old values ignored
  TensorBuffer acc = upload(base, DType::F32, Shape{R, C});
  ops().gather_cols(s(), tx, ti, out);
  ops().scatter_add_cols(s(), tsrc, ti, acc);
  DVec gref(R * k), sref(base.begin(), base.end());
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = idx[r * k + j];
      gref[r * k + j] = e < 0 ? 0.0 : x[r * C + e];
      if (e >= 0) sref[r * C + e] += src[r * k + j];
    }
  }
  EXPECT_TRUE(all_close(download(out), gref, 0.0, 0.0)) << "gather_cols is a copy: exact";
  // One fp32 addition per touched element.
  EXPECT_TRUE(all_close(download(acc), sref, 1e-7, 1e-7)) << "scatter_add_cols";
}

TEST_P(RouterOpsTest, RepeatedColumnsAccumulateInOrder) {
  // Two choices of one row on the same column both add (the op does not assume distinct ids).
  TensorBuffer src = upload({1.0f, 2.0f, 0.5f}, DType::F32, Shape{1, 3});
  TensorBuffer idx = upload_i32({2, 2, 0}, Shape{1, 3});
  TensorBuffer out = upload({0.0f, 0.0f, 10.0f, 0.0f}, DType::F32, Shape{1, 4});
  ops().scatter_add_cols(s(), src, idx, out);
  EXPECT_EQ(download(out), (Vec{0.5f, 0.0f, 13.0f, 0.0f}));
}

TEST_P(RouterOpsTest, CastsCountsToF32Exactly) {
  const IVec counts = {0, 1, 7, 16777215, -3};
  TensorBuffer ti = upload_i32(counts, Shape{5}), out = alloc(DType::F32, Shape{5});
  ops().cast(s(), ti, out);
  EXPECT_EQ(download(out), (Vec{0.0f, 1.0f, 7.0f, 16777215.0f, -3.0f}));
  TensorBuffer bf = alloc(DType::BF16, Shape{5});
  EXPECT_MOEZERO_ERROR(ops().cast(s(), ti, bf), "cast: src is i32(5) and dst is bf16(5)");
}

TEST_P(RouterOpsTest, BadColumnFailsOnTheStream) {
  TensorBuffer x = alloc(DType::F32, Shape{2, 4}), out = alloc(DType::F32, Shape{2, 2});
  TensorBuffer idx = upload_i32({0, 1, 4, -1}, Shape{2, 2});
  ops().gather_cols(s(), x, idx, out);
  EXPECT_MOEZERO_ERROR(sync(), "gather_cols: idx[2] = 4 is outside [0, C = 4)");
}

TEST_P(RouterOpsTest, BadColumnFailsOnTheStreamInScatter) {
  TensorBuffer out = alloc(DType::F32, Shape{2, 4}), src = alloc(DType::F32, Shape{2, 2});
  TensorBuffer idx = upload_i32({0, -2, 1, 3}, Shape{2, 2});
  ops().scatter_add_cols(s(), src, idx, out);
  EXPECT_MOEZERO_ERROR(sync(), "scatter_add_cols: idx[1] = -2 is outside [0, C = 4)");
}

TEST_P(RouterOpsTest, ColsValidationNamesTheOp) {
  TensorBuffer x = alloc(DType::F32, Shape{3, 5}), idx = alloc(DType::I32, Shape{3, 2});
  TensorBuffer out_bad = alloc(DType::F32, Shape{3, 3}), idx_rows = alloc(DType::I32, Shape{4, 2});
  TensorBuffer idx_f = alloc(DType::F32, Shape{3, 2});
  EXPECT_MOEZERO_ERROR(ops().gather_cols(s(), x, idx, out_bad),
                       "gather_cols: out is f32(3, 3) but must be f32(3, 2)");
  EXPECT_MOEZERO_ERROR(ops().gather_cols(s(), x, idx_rows, out_bad), "gather_cols: idx is i32(4, 2)");
  EXPECT_MOEZERO_ERROR(ops().scatter_add_cols(s(), out_bad, idx_f, x),
                       "scatter_add_cols: idx is f32(3, 2) but must be i32");
  sync();
}

MOEZERO_INSTANTIATE_BACKENDS(RouterOpsTest);

}  // namespace
}  // namespace moezero::test
