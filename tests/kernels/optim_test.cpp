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
  a.grad = alloc(DType::I32, Shape{4});
  EXPECT_MOEZERO_ERROR(ops().adamw(s(), a), "adamw: grad is i32(4) but must be f32 or bf16");
  a.grad = h;  // a bf16 gradient is accepted (widened exactly)
  a.step = 0;
  EXPECT_MOEZERO_ERROR(ops().adamw(s(), a), "adamw: step is 0");
  // adamw_multi names the entry.
  AdamWArgs ok = a;
  ok.grad = p;
  ok.step = 1;
  const std::vector<AdamWArgs> two = {ok, a};
  EXPECT_MOEZERO_ERROR(ops().adamw_multi(s(), two), "adamw_multi: tensor 1: step is 0");
  sync();
}

// adamw_multi over several tensors (own hyper-parameters each, several 16K-element chunks, a bf16
// gradient, bf16 / f32 / no copies) gives exactly the bits of one adamw per tensor, and a bf16
// gradient gives exactly what its f32 widening gives.
TEST_P(OptimTest, AdamwMultiIsBitIdenticalToOneAdamwPerTensor) {
  struct Entry {
    int64_t n;
    float wd, gs;
    int64_t step;
    DType grad, copy;
    bool has_copy;
  };
  const std::vector<Entry> es = {{40000, 0.1f, 0.5f, 3, DType::F32, DType::BF16, true},
                                 {129, 0.0f, 1.0f, 1, DType::BF16, DType::F32, false},
                                 {17, 0.1f, 0.25f, 7, DType::BF16, DType::F32, true},
                                 {16384, 0.0f, 2.0f, 2, DType::F32, DType::BF16, true}};
  struct State {
    TensorBuffer p, g, g32, m, v, copy;
  };
  auto make = [&](bool f32_grads) {
    std::vector<State> st;
    rng().seed(11);
    for (const Entry& e : es) {
      State x;
      const auto n = static_cast<size_t>(e.n);
      const Vec p = rand_vec(n), m = rand_vec(n, -0.01f, 0.01f), v = rand_vec(n, 0.0f, 1e-4f);
      const Vec g = round_to(e.grad, rand_vec(n));
      x.p = upload(p, DType::F32, Shape{e.n});
      x.m = upload(m, DType::F32, Shape{e.n});
      x.v = upload(v, DType::F32, Shape{e.n});
      x.g = upload(g, f32_grads ? DType::F32 : e.grad, Shape{e.n});
      if (e.has_copy) x.copy = alloc(e.copy, Shape{e.n});
      st.push_back(std::move(x));
    }
    return st;
  };
  auto args = [&](std::vector<State>& st) {
    std::vector<AdamWArgs> as;
    for (size_t i = 0; i < es.size(); ++i) {
      AdamWArgs a;
      a.param = st[i].p, a.grad = st[i].g, a.exp_avg = st[i].m, a.exp_avg_sq = st[i].v;
      if (es[i].has_copy) a.param_copy = st[i].copy;
      a.lr = 3e-3f, a.beta1 = 0.9f, a.beta2 = 0.95f, a.eps = 1e-8f;
      a.weight_decay = es[i].wd, a.grad_scale = es[i].gs, a.step = es[i].step;
      as.push_back(a);
    }
    return as;
  };
  std::vector<State> multi = make(false), single = make(false), widened = make(true);
  ops().adamw_multi(s(), args(multi));
  for (const AdamWArgs& a : args(single)) ops().adamw(s(), a);
  for (const AdamWArgs& a : args(widened)) ops().adamw(s(), a);
  sync();
  for (size_t i = 0; i < es.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "tensor " << i);
    for (const std::vector<State>* other : {&single, &widened}) {
      const State& o = (*other)[i];
      EXPECT_EQ(download(multi[i].p), download(o.p));
      EXPECT_EQ(download(multi[i].m), download(o.m));
      EXPECT_EQ(download(multi[i].v), download(o.v));
      if (es[i].has_copy) {
        EXPECT_EQ(download(multi[i].copy), download(o.copy));
      }
    }
  }
}

MOEZERO_INSTANTIATE_BACKENDS(OptimTest);

}  // namespace
}  // namespace moezero::test
