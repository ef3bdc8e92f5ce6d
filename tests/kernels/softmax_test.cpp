// tests/kernels/softmax_test.cpp — row softmax forward/backward, top-k (order and ties), and
// cross-entropy forward/backward (ignored targets, dlogits aliasing logits, bad targets)
// against float64 references; reference gradients checked by finite differences.
#include <algorithm>
#include <numeric>

#include "tests/kernels/kernel_test_util.h"

namespace moezero::test {
namespace {

using SoftmaxTest = KernelTest;

DVec ref_softmax_row(const double* x, int64_t c) {
  const double mx = *std::max_element(x, x + c);
  DVec p(c);
  double sum = 0;
  for (int64_t j = 0; j < c; ++j) sum += (p[j] = std::exp(x[j] - mx));
  for (auto& v : p) v /= sum;
  return p;
}

TEST_P(SoftmaxTest, SoftmaxForwardBackward) {
  // Reference gradient vs finite differences of sum(dy * softmax(x)).
  {
    const DVec x = to_double(rand_vec(5, -3, 3)), dy = to_double(rand_vec(5));
    const DVec y = ref_softmax_row(x.data(), 5);
    const double dot = std::inner_product(dy.begin(), dy.end(), y.begin(), 0.0);
    for (int j = 0; j < 5; ++j) {
      DVec xp = x, xm = x;
      xp[j] += 1e-6;
      xm[j] -= 1e-6;
      const DVec yp = ref_softmax_row(xp.data(), 5), ym = ref_softmax_row(xm.data(), 5);
      const double fd = (std::inner_product(dy.begin(), dy.end(), yp.begin(), 0.0) -
                         std::inner_product(dy.begin(), dy.end(), ym.begin(), 0.0)) /
                        2e-6;
      EXPECT_NEAR(fd, y[j] * (dy[j] - dot), 1e-8);
    }
  }
  for (DType t : {DType::F32, DType::BF16}) {
    for (auto [r, c] : {std::pair<int64_t, int64_t>{1, 1}, {3, 17}, {17, 129}, {2, 1000}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " (" << r << ", " << c << ")");
      const Vec x = round_to(t, rand_vec(r * c, -5, 5)), dy = round_to(t, rand_vec(r * c));
      DVec ry(r * c), rdx(r * c);
      for (int64_t i = 0; i < r; ++i) {
        const DVec xd = to_double(Vec(x.begin() + i * c, x.begin() + (i + 1) * c));
        const DVec p = ref_softmax_row(xd.data(), c);
        std::copy(p.begin(), p.end(), ry.begin() + i * c);
      }
      TensorBuffer tx = upload(x, t, Shape{r, c}), out = alloc(t, Shape{r, c});
      ops().softmax_forward(s(), tx, out);
      // Probabilities <= 1: f32 error ~ C fp32 terms of the denominator.
      const Tol tl = tol_for(t, c, 1.0);
      EXPECT_TRUE(all_close(download(out), ry, tl.rtol, tl.atol / std::sqrt(double(c)))) << "y";
      ops().softmax_forward(s(), tx, tx);  // in place
      EXPECT_TRUE(all_close(download(tx), ry, tl.rtol, tl.atol / std::sqrt(double(c))))
          << "in place";
      // Backward from the reference y rounded to t.
      const Vec yr = round_to(t, Vec(ry.begin(), ry.end()));
      for (int64_t i = 0; i < r; ++i) {
        double dot = 0;
        for (int64_t j = 0; j < c; ++j) dot += double(dy[i * c + j]) * yr[i * c + j];
        for (int64_t j = 0; j < c; ++j) rdx[i * c + j] = yr[i * c + j] * (dy[i * c + j] - dot);
      }
      TensorBuffer ty = upload(yr, t, Shape{r, c}), tdy = upload(dy, t, Shape{r, c});
      TensorBuffer dx = alloc(t, Shape{r, c});
      ops().softmax_backward(s(), ty, tdy, dx);
      EXPECT_TRUE(all_close(download(dx), rdx, tl.rtol, tl.atol)) << "dx";
    }
  }
}

TEST_P(SoftmaxTest, TopkDescendingTiesToLowerIndex) {
  for (auto [r, c, k] :
       {std::tuple<int64_t, int64_t, int>{1, 1, 1}, {3, 17, 2}, {17, 8, 8}, {5, 129, 7}}) {
    SCOPED_TRACE(::testing::Message() << "(" << r << ", " << c << ") k " << k);
    Vec x(r * c);
    for (auto& v : x) v = static_cast<float>(rand_int(-4, 4));  // many ties
    TensorBuffer tx = upload(x, DType::F32, Shape{r, c});
    TensorBuffer vals = alloc(DType::F32, Shape{r, k}), idx = alloc(DType::I32, Shape{r, k});
    ops().topk(s(), tx, k, vals, idx);
    const Vec gv = download(vals);
    const IVec gi = download_i32(idx);
    for (int64_t i = 0; i < r; ++i) {
      std::vector<int32_t> order(c);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t a, int32_t b) { return x[i * c + a] > x[i * c + b]; });
      for (int j = 0; j < k; ++j) {
        EXPECT_EQ(gi[i * k + j], order[j]) << "row " << i << " rank " << j;
        EXPECT_EQ(gv[i * k + j], x[i * c + order[j]]) << "row " << i << " rank " << j;
      }
    }
  }
}

TEST_P(SoftmaxTest, CrossEntropyForwardBackward) {
  for (DType t : {DType::F32, DType::BF16}) {
    for (auto [n, v] : {std::pair<int64_t, int64_t>{1, 1}, {3, 17}, {17, 129}, {4, 1000}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " (" << n << ", " << v << ")");
      const Vec x = round_to(t, rand_vec(n * v, -4, 4)), dl = rand_vec(n);
      IVec tg(n);
      for (auto& g : tg) g = rand_int(-1, static_cast<int32_t>(v - 1));
      tg[0] = static_cast<int32_t>(v - 1);
      if (n > 1) tg[1] = -1;
      DVec rl(n), rd(n * v);
      for (int64_t i = 0; i < n; ++i) {
        const DVec xd = to_double(Vec(x.begin() + i * v, x.begin() + (i + 1) * v));
        const DVec p = ref_softmax_row(xd.data(), v);
        if (tg[i] < 0) continue;
        const double mx = *std::max_element(xd.begin(), xd.end());
        double sum = 0;
        for (double z : xd) sum += std::exp(z - mx);
        rl[i] = mx + std::log(sum) - xd[tg[i]];
        for (int64_t j = 0; j < v; ++j) rd[i * v + j] = (p[j] - (j == tg[i] ? 1.0 : 0.0)) * dl[i];
      }
      TensorBuffer tx = upload(x, t, Shape{n, v}), tt = upload_i32(tg, Shape{n});
      TensorBuffer loss = alloc(DType::F32, Shape{n}), tdl = upload(dl, DType::F32, Shape{n});
      ops().cross_entropy_forward(s(), tx, tt, loss);
      // Loss is f32 for both dtypes: log of a V-term fp32 sum; ~|x| 4 magnitudes.
      EXPECT_TRUE(all_close(download(loss), rl, 1e-5 * std::sqrt(double(v)), 1e-5 * 4)) << "loss";
      ops().cross_entropy_backward(s(), tx, tt, tdl, tx);  // dlogits aliases logits
      const Tol tl = tol_for(t, v, 1.0);
      EXPECT_TRUE(all_close(download(tx), rd, tl.rtol, tl.atol / std::sqrt(double(v))))
          << "dlogits";
    }
  }
  // The reference gradient vs finite differences of the reference loss.
  const DVec x = to_double(rand_vec(6, -2, 2));
  auto loss = [](const DVec& z) {
    const double mx = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (double e : z) sum += std::exp(e - mx);
    return mx + std::log(sum) - z[2];
  };
  const DVec p = ref_softmax_row(x.data(), 6);
  for (int j = 0; j < 6; ++j) {
    DVec xp = x, xm = x;
    xp[j] += 1e-6;
    xm[j] -= 1e-6;
    EXPECT_NEAR((loss(xp) - loss(xm)) / 2e-6, p[j] - (j == 2 ? 1.0 : 0.0), 1e-8);
  }
}

TEST_P(SoftmaxTest, BadTargetFailsOnTheStreamAndValidation) {
  TensorBuffer x = alloc(DType::F32, Shape{2, 3}), l = alloc(DType::F32, Shape{2});
  TensorBuffer tg = upload_i32({0, 3}, Shape{2});
  ops().cross_entropy_forward(s(), x, tg, l);
  EXPECT_MOEZERO_ERROR(sync(), "cross_entropy_forward: targets[1] = 3");
  auto dev2 = make_device(GetParam());
  Ops& o = dev2->ops();
  Stream& s2 = dev2->default_stream();
  TensorBuffer y(*dev2, DType::F32, Shape{2, 3}, MemTag::Activation, s2);
  TensorBuffer v(*dev2, DType::F32, Shape{2, 4}, MemTag::Activation, s2);
  TensorBuffer i(*dev2, DType::I32, Shape{2, 4}, MemTag::Activation, s2);
  EXPECT_MOEZERO_ERROR(o.topk(s2, y, 4, v, i), "topk: k is 4 but must be in [1, C = 3]");
  EXPECT_MOEZERO_ERROR(o.softmax_forward(s2, y, v), "softmax_forward: out is f32(2, 4)");
  EXPECT_MOEZERO_ERROR(o.cross_entropy_backward(s2, y, i, i, y), "cross_entropy_backward: targets");
}

MOEZERO_INSTANTIATE_BACKENDS(SoftmaxTest);

}  // namespace
}  // namespace moezero::test
