// tests/kernels/optim_test.cpp — AdamW against PyTorch's torch.optim.AdamW formula in float64
// over several steps (weight decay, grad_scale, bias correction), the bf16/f32 compute copy,
// and validation.
#include "tests/kernels/kernel_test_util.h"

namespace moezero::test {
namespace {

using OptimTest = KernelTest;

TEST_P(OptimTest, AdamwMatchesPytorchFormula) {
  for (int64_t n : {1, 3, 17, 129, 20000}) {
    SCOPED_TRACE(::testing::Message() << "n " << n);
    AdamWArgs a;
    a.lr = 3e-3f;
    a.beta1 = 0.9f;
    a.beta2 = 0.95f;
    a.eps = 1e-8f;
    a.weight_decay = 0.1f;
    a.grad_scale = 0.5f;
    Vec p = rand_vec(n), m = rand_vec(n, -0.01f, 0.01f), v = rand_vec(n, 0.0f, 1e-4f);
    DVec rp = to_double(p), rm = to_double(m), rv = to_double(v);
    TensorBuffer tp = upload(p, DType::F32, Shape{n}), tm = upload(m, DType::F32, Shape{n});
    TensorBuffer tv = upload(v, DType::F32, Shape{n});
    TensorBuffer copy = alloc(DType::BF16, Shape{n});
    for (int64_t step = 1; step <= 3; ++step) {
      const Vec g = rand_vec(n);
      TensorBuffer tg = upload(g, DType::F32, Shape{n});
      a.param = tp;
      a.grad = tg;
      a.exp_avg = tm;
      a.exp_avg_sq = tv;
      a.param_copy = copy;
      a.step = step;
      ops().adamw(s(), a);
      sync();
      // torch.optim.AdamW (_single_tensor_adamw), in double.
      const double b1 = a.beta1, b2 = a.beta2, lr = a.lr, eps = a.eps;
      const double bc1 = 1 - std::pow(b1, double(step)), bc2 = 1 - std::pow(b2, double(step));
      for (int64_t i = 0; i < n; ++i) {
        const double gi = double(g[i]) * a.grad_scale;
        rp[i] *= 1 - lr * a.weight_decay;
        rm[i] = b1 * rm[i] + (1 - b1) * gi;
        rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
        rp[i] -= lr / bc1 * rm[i] / (std::sqrt(rv[i]) / std::sqrt(bc2) + eps);
      }
    }
    // fp32 state updated 3 times: a few ulps of the terms involved. exp_avg sums terms of up
    // to ~0.05 that may cancel, so its bound is absolute (ulp(0.05) ~ 4e-9, three steps);
    // param ~1 gets 3 roundings of 6e-8 each.
    EXPECT_TRUE(all_close(download(tp), rp, 1e-6, 2e-7)) << "param";
    EXPECT_TRUE(all_close(download(tm), rm, 1e-5, 2e-8)) << "exp_avg";
    EXPECT_TRUE(all_close(download(tv), rv, 1e-5, 1e-12)) << "exp_avg_sq";
    // The compute copy is exactly the RNE rounding of the updated param.
    EXPECT_EQ(download(copy), round_to(DType::BF16, download(tp)));
  }
}

TEST_P(OptimTest, ValidationNamesTheOp) {
  TensorBuffer p = alloc(DType::F32, Shape{4}), g = alloc(DType::F32, Shape{5});
  TensorBuffer h = alloc(DType::BF16, Shape{4});
  AdamWArgs a;
  a.param = p;
  a.grad = g;
  a.exp_avg = p;
  a.exp_avg_sq = p;
  EXPECT_MOEZERO_ERROR(ops().adamw(s(), a), "adamw: grad is f32(5) but param is f32(4)");
  a.grad = h;
  EXPECT_MOEZERO_ERROR(ops().adamw(s(), a), "adamw: grad is bf16(4) but must be f32");
  a.grad = p;
  a.step = 0;
  EXPECT_MOEZERO_ERROR(ops().adamw(s(), a), "adamw: step is 0");
  sync();
}

MOEZERO_INSTANTIATE_BACKENDS(OptimTest);

}  // namespace
}  // namespace moezero::test
