// tests/kernels/elementwise_test.cpp — add, scale, axpy, fill, cast, sum_squares and SwiGLU
// forward/backward against float64 references (SwiGLU's reference gradient itself checked by
// central finite differences), at odd sizes, f32 and bf16; plus validation errors.
#include "tests/kernels/kernel_test_util.h"

namespace moezero::test {
namespace {

using ElementwiseTest = KernelTest;

const int64_t kSizes[] = {1, 3, 17, 129, 40000};  // 40000 spans several 16K-element blocks

TEST_P(ElementwiseTest, AddScaleAxpy) {
  for (DType t : {DType::F32, DType::BF16}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n " << n);
      const Vec a = round_to(t, rand_vec(n)), b = round_to(t, rand_vec(n));
      TensorBuffer ta = upload(a, t, Shape{n}), tb = upload(b, t, Shape{n});
      TensorBuffer out = alloc(t, Shape{n});
      ops().add(s(), ta, tb, out);
      DVec ref(n);
      for (int64_t i = 0; i < n; ++i) ref[i] = double(a[i]) + b[i];
      const Tol tl = tol_for(t, 1);
      EXPECT_TRUE(all_close(download(out), ref, tl.rtol, tl.atol)) << "add";
      ops().add(s(), ta, tb, ta);  // out aliases a
      EXPECT_TRUE(all_close(download(ta), ref, tl.rtol, tl.atol)) << "add aliased";
      ops().scale(s(), tb, -0.75f);
      for (int64_t i = 0; i < n; ++i) ref[i] = -0.75 * b[i];
      EXPECT_TRUE(all_close(download(tb), ref, tl.rtol, tl.atol)) << "scale";
      // axpy with an f32 y and a t-typed x (the grad accumulation case).
      const Vec y = rand_vec(n);
      TensorBuffer ty = upload(y, DType::F32, Shape{n});
      TensorBuffer tx = upload(a, t, Shape{n});
      ops().axpy(s(), 0.5f, tx, ty);
      for (int64_t i = 0; i < n; ++i) ref[i] = y[i] + 0.5 * a[i];
      EXPECT_TRUE(all_close(download(ty), ref, 1e-6, 1e-6)) << "axpy";
    }
  }
}

TEST_P(ElementwiseTest, FillAndCastRoundToNearestEven) {
  const int64_t n = 17;
  TensorBuffer f = alloc(DType::F32, Shape{n}), h = alloc(DType::BF16, Shape{n});
  TensorBuffer i32 = alloc(DType::I32, Shape{n});
  ops().fill(s(), f, 1.0 / 3.0);
  ops().fill(s(), h, 1.0 / 3.0);
  ops().fill(s(), i32, 7.0);
  EXPECT_EQ(download(f), Vec(n, 1.0f / 3.0f));
  EXPECT_EQ(download(h), Vec(n, round_to(DType::BF16, 1.0f / 3.0f)));
  EXPECT_EQ(download_i32(i32), IVec(n, 7));
  // f32 -> bf16 -> f32 and f32 -> f16: bit-exact RNE (same as core/dtype.h's host conversion),
  // including ties (1 + 2^-8 rounds to 1, 1 + 3 * 2^-8 rounds up) and a subnormal.
  Vec v = rand_vec(129, -100.0f, 100.0f);
  v[0] = 1.0f + 1.0f / 256.0f;
  v[1] = 1.0f + 3.0f / 256.0f;
  v[2] = 1e-40f;
  TensorBuffer src = upload(v, DType::F32, Shape{129});
  TensorBuffer hb = alloc(DType::BF16, Shape{129}), hh = alloc(DType::F16, Shape{3, 43});
  TensorBuffer back = alloc(DType::F32, Shape{129}), copy = alloc(DType::F32, Shape{129});
  ops().cast(s(), src, hb);
  ops().cast(s(), src, hh);
  ops().cast(s(), hb, back);
  ops().cast(s(), src, copy);
  EXPECT_EQ(download(hb), round_to(DType::BF16, v));
  EXPECT_EQ(download(back), round_to(DType::BF16, v));
  EXPECT_EQ(download(hh), round_to(DType::F16, v));
  EXPECT_EQ(download(copy), v);
  EXPECT_EQ(download(hb)[0], 1.0f);
  EXPECT_EQ(download(hb)[1], 1.0f + 4.0f / 256.0f);
}

TEST_P(ElementwiseTest, SumSquaresAccumulates) {
  for (DType t : {DType::F32, DType::BF16}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n " << n);
      const Vec x = round_to(t, rand_vec(n));
      TensorBuffer tx = upload(x, t, Shape{n});
      TensorBuffer out = upload({2.5f}, DType::F32, Shape{1});
      ops().sum_squares(s(), tx, out);
      double ref = 2.5;
      for (float v : x) ref += double(v) * v;
      // One f32 output: the sum of n fp32 products, relative 1e-5 * sqrt(n) (both dtypes: the
      // bf16 inputs were rounded before the reference and the output is f32).
      EXPECT_TRUE(all_close(download(out), {ref}, 1e-5 * std::sqrt(double(n)), 1e-6));
    }
  }
}

// silu(g) u and its gradient, in double.
double silu(double g) { return g / (1.0 + std::exp(-g)); }
double dsilu(double g) {
  const double sg = 1.0 / (1.0 + std::exp(-g));
  return sg * (1.0 + g * (1.0 - sg));
}

TEST_P(ElementwiseTest, SwigluForwardBackward) {
  // The analytic reference gradient agrees with central differences of the f64 forward.
  for (double g : {-3.0, -0.5, 0.0, 0.7, 4.0}) {
    const double h = 1e-6;
    EXPECT_NEAR((silu(g + h) - silu(g - h)) / (2 * h), dsilu(g), 1e-8) << "g " << g;
  }
  for (DType t : {DType::F32, DType::BF16}) {
    for (int64_t r : {1, 3, 17}) {
      const int64_t f = r == 17 ? 129 : r;
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " (" << r << ", " << f << ")");
      const int64_t n = r * f;
      const Vec g = round_to(t, rand_vec(n, -4, 4)), u = round_to(t, rand_vec(n, -2, 2));
      const Vec d = round_to(t, rand_vec(n));
      TensorBuffer tg = upload(g, t, Shape{r, f}), tu = upload(u, t, Shape{r, f});
      TensorBuffer td = upload(d, t, Shape{r, f});
      TensorBuffer out = alloc(t, Shape{r, f}), dg = alloc(t, Shape{r, f});
      TensorBuffer du = alloc(t, Shape{r, f});
      ops().swiglu_forward(s(), tg, tu, out);
      ops().swiglu_backward(s(), tg, tu, td, dg, du);
      DVec ro(n), rdg(n), rdu(n);
      for (int64_t i = 0; i < n; ++i) {
        ro[i] = silu(g[i]) * u[i];
        rdu[i] = d[i] * silu(g[i]);
        rdg[i] = d[i] * u[i] * dsilu(g[i]);
      }
      // Elementwise: f32 within a few ulps of exp; bf16 output rounding.
      const Tol tl = t == DType::F32 ? Tol{1e-5, 1e-6} : Tol{1.0 / 256, 1e-5};
      EXPECT_TRUE(all_close(download(out), ro, tl.rtol, tl.atol)) << "out";
      EXPECT_TRUE(all_close(download(dg), rdg, tl.rtol, tl.atol)) << "dgate";
      EXPECT_TRUE(all_close(download(du), rdu, tl.rtol, tl.atol)) << "dup";
    }
  }
}

TEST_P(ElementwiseTest, ValidationNamesTheOp) {
  TensorBuffer a = alloc(DType::F32, Shape{3, 4}), b = alloc(DType::F32, Shape{4, 3});
  TensorBuffer h = alloc(DType::BF16, Shape{3, 4}), i = alloc(DType::I32, Shape{3, 4});
  EXPECT_MOEZERO_ERROR(ops().add(s(), a, b, a), "add: b is f32(4, 3) but must match a f32(3, 4)");
  EXPECT_MOEZERO_ERROR(ops().add(s(), a, h, a), "add: b is bf16(3, 4)");
  EXPECT_MOEZERO_ERROR(ops().scale(s(), i, 2.0f), "scale: x is i32(3, 4)");
  TensorBuffer c5 = alloc(DType::F32, Shape{5});
  EXPECT_MOEZERO_ERROR(ops().axpy(s(), 1.0f, a, c5), "axpy: x is f32(3, 4) but y is f32(5)");
  EXPECT_MOEZERO_ERROR(ops().cast(s(), a, c5), "cast: src is f32(3, 4) but dst is f32(5)");
  EXPECT_MOEZERO_ERROR(ops().cast(s(), a, i), "cast: src is f32(3, 4) and dst is i32(3, 4)");
  EXPECT_MOEZERO_ERROR(ops().sum_squares(s(), a, c5), "sum_squares: out is f32(5)");
  EXPECT_MOEZERO_ERROR(ops().swiglu_forward(s(), a, a, h), "swiglu_forward: out is bf16(3, 4)");
  EXPECT_MOEZERO_ERROR(ops().swiglu_backward(s(), a, a, a, a, b), "swiglu_backward: dup");
  // Zero-size problems are valid no-ops.
  TensorBuffer z = alloc(DType::F32, Shape{0, 4});
  ops().add(s(), z, z, z);
  ops().swiglu_forward(s(), z, z, z);
  sync();
}

MOEZERO_INSTANTIATE_BACKENDS(ElementwiseTest);

}  // namespace
}  // namespace moezero::test
