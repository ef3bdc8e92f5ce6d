// tests/moe/router_test.cpp — the top-k router (moe/router.h) against a float64 reference written
// here: routing choices, weights (renormalised and raw), capacity drops (lowest probability
// first; ties: the higher token index first), stats, aux and z values, and the full backward
// (dx, dWg through weights + aux + z) against central finite differences of the reference loss
//   L = Σ_t Σ_j c_tj w_tj + scale · (aux_coef · aux + z_coef · z)
// with the top-k choices and drops held fixed (they are constants of the smooth function).
// Also: jitter noise keyed by the global token, no host sync on the default path, two "ranks"
// with summed stats equal one rank, bf16 close to f32, config validation.
#include "moe/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <future>
#include <iostream>
#include <numeric>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "kernels/backend.h"
#include "tests/moe/router_reference.h"

namespace moezero::test {
namespace {

using layers::ModuleContext;
using moe::Router;
using moe::RouterConfig;
using moe::RouterMode;

// ---- the device side ------------------------------------------------------------------------

struct DevOut {
  std::vector<int32_t> kept_ids;
  std::vector<float> w, probs, stats, dx, dwg;
  float loss = 0.0f, aux = 0.0f, z = 0.0f;
};

class RouterTest : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    if (GetParam() == DeviceKind::Cuda) {
      std::string why;
      if (!cuda_available(&why)) GTEST_SKIP() << why;
    }
    dev_ = make_device(GetParam());
    const char* env = std::getenv("MOEZERO_TEST_SEED");
    const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::cout << "[ seed     ] MOEZERO_TEST_SEED=" << seed << std::endl;
    rng_.seed(seed);
  }
  Stream& s() { return dev_->default_stream(); }
  Ops& ops() { return dev_->ops(); }
  ModuleContext ctx(DType dt) {
    ModuleContext c;
    c.stream = &s();
    c.dtype = dt;
    return c;
  }

  Vec randn(int64_t n, double stddev) {
    std::normal_distribution<double> d(0.0, stddev);
    Vec v(static_cast<size_t>(n));
    for (double& x : v) x = d(rng_);
    return v;
  }
  TensorBuffer up(const Vec& v, Shape shape, DType dt) {
    TensorBuffer b(*dev_, dt, shape, MemTag::Other, s(), "test");
    std::vector<float> f(v.begin(), v.end());
    std::vector<bf16> h;
    for (float x : f) h.push_back(float_to_bf16(x));
    dev_->memcpy_async(b.view().data(), dt == DType::F32 ? static_cast<void*>(f.data()) : h.data(),
                       b.view().size_bytes(), s());
    s().synchronize();
    return b;
  }
  TensorBuffer zeros(Shape shape, DType dt) {
    TensorBuffer b(*dev_, dt, shape, MemTag::Other, s(), "test");
    ops().fill(s(), b, 0.0);
    return b;
  }
  template <typename T>
  std::vector<T> down(const Tensor& t) {
    std::vector<T> v(static_cast<size_t>(t.numel()));
    dev_->memcpy_async(v.data(), t.data(), t.size_bytes(), s());
    s().synchronize();
    return v;
  }
  std::vector<float> down_f32(const Tensor& t) {
    if (t.dtype() == DType::F32) return down<float>(t);
    std::vector<float> f;
    for (bf16 h : down<bf16>(t)) f.push_back(bf16_to_float(h));
    return f;
  }

  // forward_local + finish (single rank: global = local) + optional backward.
  DevOut run(const Problem& p, const Vec& x, const Vec& wg, DType dt, const Vec* dweights,
             double scale = 1.0, RouterMode mode = RouterMode::Train) {
    const int64_t E = p.cfg.num_experts, k = p.cfg.top_k, N = p.n, C = p.c;
    Router router(p.cfg, 3);
    router.set_bias(std::vector<float>(p.bias.begin(), p.bias.end()));
    ModuleContext cx = ctx(dt);
    TensorBuffer xt = up(x, Shape{N, C}, dt), gt = up(wg, Shape{E, C}, dt);
    TensorBuffer loss = zeros(Shape{1}, DType::F32), aux = zeros(Shape{1}, DType::F32),
                 z = zeros(Shape{1}, DType::F32);
    Router::Routing& r = router.forward_local(cx, xt, gt, 0, 5, mode);
    DevOut o;
    o.kept_ids = down<int32_t>(r.expert_ids);
    o.w = down<float>(r.weights);
    o.probs = down<float>(r.probs);
    o.stats = down<float>(r.stats);
    router.finish(cx, N, static_cast<float>(scale), loss, aux, z);
    if (dweights) {
      TensorBuffer dw = up(*dweights, Shape{N, k}, DType::F32);
      TensorBuffer dx = zeros(Shape{N, C}, dt), dg = zeros(Shape{E, C}, DType::F32);
      router.backward(cx, dw, xt, gt, dx, dg);
      o.dx = down_f32(dx);
      o.dwg = down<float>(dg);
    }
    o.loss = down<float>(loss)[0];
    o.aux = down<float>(aux)[0];
    o.z = down<float>(z)[0];
    return o;
  }

  static Problem problem(bool normalize, int k, float cap, float aux, float z) {
    Problem p{.n = 24, .c = 16, .cfg = {}, .noise = {}, .bias = {}};
    p.cfg = RouterConfig{.num_experts = 6,
                         .top_k = k,
                         .normalize_top_k = normalize,
                         .aux_coef = aux,
                         .z_coef = z,
                         .capacity_factor = cap,
                         .seed = 11};
    return p;
  }

  std::unique_ptr<Device> dev_;
  std::mt19937_64 rng_;
};

// |a - b| <= rel * max|b| + abs, elementwise.
template <typename A>
void expect_close(const std::vector<A>& a, const Vec& b, double rel, double abs, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double m = 0.0;
  for (double v : b) m = std::max(m, std::abs(v));
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], rel * m + abs) << what << "[" << i << "]";
}

TEST_P(RouterTest, ForwardMatchesReference) {
  for (const bool normalize : {true, false}) {
    for (const int k : {1, 2}) {
      Problem p = problem(normalize, k, 0.0f, 0.01f, 0.001f);
      const Vec x = randn(p.n * p.c, 1.0), wg = randn(6 * p.c, 0.5);
      const Ref r = reference(p, x, wg, nullptr, 0);
      const DevOut o = run(p, x, wg, DType::F32, nullptr);
      SCOPED_TRACE(::testing::Message() << "normalize " << normalize << " k " << k);
      EXPECT_EQ(o.kept_ids, std::vector<int32_t>(r.ids.begin(), r.ids.end()));
      expect_close(o.w, r.w, 1e-5, 1e-7, "weights");
      expect_close(o.probs, r.probs, 1e-5, 1e-7, "probs");
      expect_close(o.stats, r.stats, 1e-5, 1e-6, "stats");
      EXPECT_NEAR(o.aux, r.aux, 1e-5 * r.aux);
      EXPECT_NEAR(o.z, r.z, 1e-5 * r.z);
      EXPECT_NEAR(o.loss, 0.01 * r.aux + 0.001 * r.z, 1e-5);
    }
  }
}

TEST_P(RouterTest, CapacityDropsLowestProbabilityFirst) {
  Problem p = problem(true, 2, 0.5f, 0.0f, 0.0f);
  const Router router(p.cfg, 0);
  ASSERT_EQ(router.capacity(p.n), 4);  // ceil(2 * 24 * 0.5 / 6)
  const Vec x = randn(p.n * p.c, 1.0), wg = randn(6 * p.c, 0.5);
  const Ref r = reference(p, x, wg, nullptr, 4);
  const DevOut o = run(p, x, wg, DType::F32, nullptr);
  EXPECT_EQ(o.kept_ids, std::vector<int32_t>(r.kept_ids.begin(), r.kept_ids.end()));
  expect_close(o.w, r.w, 1e-5, 1e-7, "weights");
  expect_close(o.stats, r.stats, 1e-5, 1e-6, "stats");
  EXPECT_LT(r.stats[6] + r.stats[7] + r.stats[8] + r.stats[9] + r.stats[10] + r.stats[11], 48.0);

  // Ties: identical tokens have identical probabilities; the higher token index drops first.
  Problem q = problem(false, 1, 1.0f, 0.0f, 0.0f);
  q.n = 12;
  Vec xt = randn(q.c, 1.0), xs;
  for (int64_t t = 0; t < q.n; ++t) xs.insert(xs.end(), xt.begin(), xt.end());
  const DevOut ot = run(q, xs, wg, DType::F32, nullptr);  // cap = ceil(12 / 6) = 2
  for (int64_t t = 0; t < q.n; ++t) EXPECT_EQ(ot.kept_ids[t] == -1, t >= 2) << "token " << t;
  EXPECT_EQ(ot.w[5], 0.0f);
}

// Central differences of ref_loss along x (wrt_x) or along the gate weight, the routing held
// fixed (`fixed`).
Vec finite_differences(const Problem& p, Vec x, Vec wg, bool wrt_x, const Ref& fixed, const Vec& c,
                       double scale) {
  Vec& v = wrt_x ? x : wg;
  Vec g(v.size());
  const double h = 1e-5;
  for (size_t i = 0; i < v.size(); ++i) {
    const double v0 = v[i];
    v[i] = v0 + h;
    const double lp = ref_loss(p, x, wg, fixed, c, scale);
    v[i] = v0 - h;
    const double lm = ref_loss(p, x, wg, fixed, c, scale);
    v[i] = v0;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

TEST_P(RouterTest, BackwardMatchesFiniteDifferences) {
  struct Case {
    bool normalize;
    float cap;
    float jitter;
  };
  for (const Case cs : {Case{true, 0.0f, 0.0f}, Case{false, 0.0f, 0.0f}, Case{true, 0.5f, 0.0f},
                        Case{false, 0.75f, 0.0f}, Case{true, 0.0f, 0.3f}}) {
    SCOPED_TRACE(::testing::Message() << "normalize " << cs.normalize << " capacity " << cs.cap
                                      << " jitter " << cs.jitter);
    Problem p = problem(cs.normalize, 2, cs.cap, 0.05f, 0.02f);
    p.cfg.jitter = cs.jitter;
    if (cs.jitter > 0.0f) {
      for (int64_t t = 0; t < p.n; ++t)
        for (int64_t ch = 0; ch < p.c; ++ch)
          p.noise.push_back(Router::jitter_noise(p.cfg.seed, 3, 5, t, ch, cs.jitter));
    }
    const Router shape_only(p.cfg, 3);
    const Vec x = randn(p.n * p.c, 1.0), wg = randn(6 * p.c, 0.5), c = randn(p.n * 2, 1.0);
    const double scale = 0.7;
    const Ref fixed = reference(p, x, wg, nullptr, shape_only.capacity(p.n));
    const DevOut o = run(p, x, wg, DType::F32, &c, scale);
    ASSERT_EQ(o.kept_ids, std::vector<int32_t>(fixed.kept_ids.begin(), fixed.kept_ids.end()));
    EXPECT_NEAR(o.loss, scale * (0.05 * fixed.aux + 0.02 * fixed.z), 1e-5);
    expect_close(o.dx, finite_differences(p, x, wg, true, fixed, c, scale), 2e-5, 1e-6, "dx");
    expect_close(o.dwg, finite_differences(p, x, wg, false, fixed, c, scale), 2e-5, 1e-6, "dWg");
  }
}

// Sigmoid scores (DeepSeek-V3) with and without the selection bias: choices, weights, probs,
// stats and aux against the reference, and the backward against finite differences (weights
// normalised and raw, with capacity, aux and z on).
TEST_P(RouterTest, SigmoidScoresAndBiasMatchReference) {
  struct Case {
    bool normalize;
    float cap;
    bool bias;
  };
  for (const Case cs : {Case{true, 0.0f, false}, Case{false, 0.0f, false}, Case{true, 0.0f, true},
                        Case{false, 0.0f, true}, Case{true, 0.5f, true}}) {
    SCOPED_TRACE(::testing::Message()
                 << "normalize " << cs.normalize << " capacity " << cs.cap << " bias " << cs.bias);
    Problem p = problem(cs.normalize, 2, cs.cap, 0.05f, 0.02f);
    p.cfg.score = ScoreFunction::Sigmoid;
    if (cs.bias) p.bias = {0.3, -0.2, 0.0, 0.15, -0.4, 0.05};
    const Router shape_only(p.cfg, 3);
    const Vec x = randn(p.n * p.c, 1.0), wg = randn(6 * p.c, 0.5), c = randn(p.n * 2, 1.0);
    const double scale = 0.7;
    const Ref fixed = reference(p, x, wg, nullptr, shape_only.capacity(p.n));
    const DevOut o = run(p, x, wg, DType::F32, &c, scale);
    ASSERT_EQ(o.kept_ids, std::vector<int32_t>(fixed.kept_ids.begin(), fixed.kept_ids.end()));
    expect_close(o.w, fixed.w, 1e-5, 1e-7, "weights");
    expect_close(o.probs, fixed.probs, 1e-5, 1e-7, "probs");
    expect_close(o.stats, fixed.stats, 1e-5, 1e-6, "stats");
    EXPECT_NEAR(o.aux, fixed.aux, 1e-5 * fixed.aux);
    EXPECT_NEAR(o.z, fixed.z, 1e-5 * fixed.z);
    EXPECT_NEAR(o.loss, scale * (0.05 * fixed.aux + 0.02 * fixed.z), 1e-5);
    if (cs.normalize && cs.cap == 0.0f) {  // weights of a token sum to 1
      for (int64_t t = 0; t < p.n; ++t) EXPECT_NEAR(o.w[2 * t] + o.w[2 * t + 1], 1.0f, 1e-6);
    }
    expect_close(o.dx, finite_differences(p, x, wg, true, fixed, c, scale), 2e-5, 1e-6, "dx");
    expect_close(o.dwg, finite_differences(p, x, wg, false, fixed, c, scale), 2e-5, 1e-6, "dWg");
  }
}

// The bias changes the choice, never the weights: a large bias on expert 5 makes every token
// choose it, with the weight its unbiased score gives.
TEST_P(RouterTest, BiasSelectsButDoesNotWeigh) {
  for (const ScoreFunction sf : {ScoreFunction::Softmax, ScoreFunction::Sigmoid}) {
    Problem p = problem(false, 1, 0.0f, 0.0f, 0.0f);
    p.cfg.score = sf;
    const Vec x = randn(p.n * p.c, 1.0), wg = randn(6 * p.c, 0.5);
    const Ref plain = reference(p, x, wg, nullptr, 0);
    p.bias = {0, 0, 0, 0, 0, 10.0};
    const DevOut o = run(p, x, wg, DType::F32, nullptr);
    for (int64_t t = 0; t < p.n; ++t) {
      EXPECT_EQ(o.kept_ids[t], 5) << "token " << t;
      EXPECT_NEAR(o.w[t], plain.scores[t * 6 + 5], 1e-6) << "token " << t;
    }
    expect_close(o.probs, plain.probs, 1e-6, 1e-7, "probs do not see the bias");
  }
  Router r(RouterConfig{.num_experts = 4, .top_k = 2}, 0);
  EXPECT_THROW(r.set_bias({1.0f, 2.0f}), Error);
  EXPECT_THROW(r.set_bias({0.0f, 0.0f, NAN, 0.0f}), Error);
}

TEST_P(RouterTest, JitterIsKeyedByGlobalTokenAndOffInEval) {
  EXPECT_EQ(Router::jitter_noise(1, 2, 3, 4, 5, 0.1), Router::jitter_noise(1, 2, 3, 4, 5, 0.1));
  EXPECT_NE(Router::jitter_noise(1, 2, 3, 4, 5, 0.1), Router::jitter_noise(1, 2, 4, 4, 5, 0.1));
  EXPECT_NE(Router::jitter_noise(1, 2, 3, 4, 5, 0.1), Router::jitter_noise(1, 3, 3, 4, 5, 0.1));
  for (int i = 0; i < 1000; ++i) {
    const double u = Router::jitter_noise(7, 0, 0, i, i % 13, 0.1);
    ASSERT_TRUE(u >= 0.9 && u < 1.1) << u;
  }
  Problem p = problem(true, 2, 0.0f, 0.0f, 0.0f);
  p.cfg.jitter = 0.5f;
  const int64_t N = p.n, C = p.c, H = N / 2;
  const Vec x = randn(N * C, 1.0), wg = randn(6 * C, 0.5);
  TensorBuffer xt = up(x, Shape{N, C}, DType::F32), gt = up(wg, Shape{6, C}, DType::F32);
  Router whole(p.cfg, 1), first(p.cfg, 1), second(p.cfg, 1);
  const std::vector<float> pw =
      down<float>(whole.forward_local(ctx(DType::F32), xt, gt, 100, 2, RouterMode::Train).probs);
  std::vector<float> ph = down<float>(
      first
          .forward_local(ctx(DType::F32), xt.view().slice_rows(0, H), gt, 100, 2, RouterMode::Train)
          .probs);
  const std::vector<float> p2 =
      down<float>(second
                      .forward_local(ctx(DType::F32), xt.view().slice_rows(H, N), gt, 100 + H, 2,
                                     RouterMode::Train)
                      .probs);
  ph.insert(ph.end(), p2.begin(), p2.end());
  expect_close(ph, Vec(pw.begin(), pw.end()), 1e-6, 0.0, "probs of halves vs whole");
  for (int64_t t = 0; t < N; ++t)
    for (int64_t ch = 0; ch < C; ++ch)
      p.noise.push_back(Router::jitter_noise(p.cfg.seed, 1, 2, 100 + t, ch, 0.5));
  expect_close(pw, reference(p, x, wg, nullptr, 0).probs, 1e-5, 1e-7, "jittered probs");
  p.noise.clear();
  const std::vector<float> pe = run(p, x, wg, DType::F32, nullptr, 1.0, RouterMode::Eval).probs;
  expect_close(pe, reference(p, x, wg, nullptr, 0).probs, 1e-5, 1e-7, "eval probs");
}

TEST_P(RouterTest, DefaultPathHasNoHostSync) {
  for (const float jitter : {0.0f, 0.2f}) {
    Problem p = problem(true, 2, 0.0f, 0.01f, 0.001f);
    p.cfg.jitter = jitter;
    TensorBuffer xt = up(randn(p.n * p.c, 1.0), Shape{p.n, p.c}, DType::F32);
    TensorBuffer gt = up(randn(6 * p.c, 0.5), Shape{6, p.c}, DType::F32);
    TensorBuffer loss = zeros(Shape{1}, DType::F32), dw = zeros(Shape{p.n, 2}, DType::F32);
    TensorBuffer dx = zeros(Shape{p.n, p.c}, DType::F32), dg = zeros(Shape{6, p.c}, DType::F32);
    Router router(p.cfg, 0);
    std::promise<void> latch;
    std::shared_future<void> opened = latch.get_future().share();
    s().enqueue_host([opened] { opened.wait(); });  // the stream is blocked until latch is set
    auto job = std::async(std::launch::async, [&] {
      router.forward_local(ctx(DType::F32), xt, gt, 0, 0, RouterMode::Train);
      router.finish(ctx(DType::F32), p.n, 1.0f, loss, Tensor());
      router.backward(ctx(DType::F32), dw, xt, gt, dx, dg);
    });
    const bool returned = job.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
    latch.set_value();
    job.get();
    s().synchronize();
    EXPECT_TRUE(returned) << "jitter " << jitter << ": the router waited for the stream";
    EXPECT_GT(down<float>(loss)[0], 0.0f);
  }
}

TEST_P(RouterTest, TwoRanksWithSummedStatsMatchOneRank) {
  Problem p = problem(true, 2, 0.0f, 0.05f, 0.02f);
  p.cfg.jitter = 0.1f;
  const int64_t N = p.n, C = p.c, H = 10;  // uneven halves
  const Vec x = randn(N * C, 1.0), wg = randn(6 * C, 0.5), c = randn(N * 2, 1.0);
  const DevOut one = run(p, x, wg, DType::F32, &c, 0.5);
  const ModuleContext cx = ctx(DType::F32);
  TensorBuffer xt = up(x, Shape{N, C}, DType::F32), gt = up(wg, Shape{6, C}, DType::F32);
  TensorBuffer dw = up(c, Shape{N, 2}, DType::F32), dx = zeros(Shape{N, C}, DType::F32);
  TensorBuffer dg = zeros(Shape{6, C}, DType::F32), loss = zeros(Shape{1}, DType::F32);
  TensorBuffer aux0 = zeros(Shape{1}, DType::F32), aux1 = zeros(Shape{1}, DType::F32);
  Router r0(p.cfg, 3), r1(p.cfg, 3);
  const Tensor s0 =
      r0.forward_local(cx, xt.view().slice_rows(0, H), gt, 0, 5, RouterMode::Train).stats;
  const Tensor s1 =
      r1.forward_local(cx, xt.view().slice_rows(H, N), gt, H, 5, RouterMode::Train).stats;
  ops().add(s(), s0, s1, s0);  // the all-reduce
  ops().cast(s(), s0, s1);
  r0.finish(cx, N, 0.5f, loss, aux0);
  r1.finish(cx, N, 0.5f, loss, aux1);
  r0.backward(cx, dw.view().slice_rows(0, H), xt.view().slice_rows(0, H), gt,
              dx.view().slice_rows(0, H), dg);
  r1.backward(cx, dw.view().slice_rows(H, N), xt.view().slice_rows(H, N), gt,
              dx.view().slice_rows(H, N), dg);
  EXPECT_NEAR(down<float>(aux0)[0], one.aux, 1e-6);
  EXPECT_NEAR(down<float>(aux1)[0], one.aux, 1e-6);
  EXPECT_NEAR(down<float>(loss)[0], one.loss, 1e-6);
  expect_close(down<float>(dx), Vec(one.dx.begin(), one.dx.end()), 1e-5, 0.0, "dx");
  expect_close(down<float>(dg), Vec(one.dwg.begin(), one.dwg.end()), 1e-5, 0.0, "dWg");
}

TEST_P(RouterTest, Bf16IsCloseToF32) {
  // Inputs rounded to bf16 first, so both runs route the same values: the only differences are
  // the bf16 rounding of dx (relative 2^-8) and summation order.
  for (const float cap : {0.0f, 0.5f}) {
    Problem p = problem(true, 2, cap, 0.05f, 0.02f);
    Vec x = randn(p.n * p.c, 1.0), wg = randn(6 * p.c, 0.5), c = randn(p.n * 2, 1.0);
    for (double& v : x) v = bf16_to_float(float_to_bf16(static_cast<float>(v)));
    for (double& v : wg) v = bf16_to_float(float_to_bf16(static_cast<float>(v)));
    const DevOut f = run(p, x, wg, DType::F32, &c), b = run(p, x, wg, DType::BF16, &c);
    EXPECT_EQ(f.kept_ids, b.kept_ids);
    expect_close(b.w, Vec(f.w.begin(), f.w.end()), 1e-5, 0.0, "weights");
    EXPECT_NEAR(b.loss, f.loss, 1e-5 * std::abs(f.loss));
    expect_close(b.dx, Vec(f.dx.begin(), f.dx.end()), 8e-3, 0.0, "dx (bf16 output)");
    expect_close(b.dwg, Vec(f.dwg.begin(), f.dwg.end()), 1e-5, 0.0, "dWg (f32)");
  }
}

TEST_P(RouterTest, EmptyRankAddsNothingButSeesTheGlobalAux) {
  const Problem p = problem(true, 2, 0.0f, 0.05f, 0.02f);
  Router r(p.cfg, 0);
  const ModuleContext cx = ctx(DType::F32);
  TensorBuffer x = zeros(Shape{0, p.c}, DType::F32), g = zeros(Shape{6, p.c}, DType::F32);
  TensorBuffer loss = zeros(Shape{1}, DType::F32), aux = zeros(Shape{1}, DType::F32);
  const Tensor st = r.forward_local(cx, x, g, 0, 0, RouterMode::Train).stats;
  EXPECT_EQ(down<float>(st), std::vector<float>(18, 0.0f));
  ops().fill(s(), st, 2.0);  // as if other ranks had tokens: aux = 6 * 6 * 2 * 2 / 4^2
  r.finish(cx, 4, 1.0f, loss, aux);
  EXPECT_EQ(down<float>(loss)[0], 0.0f);
  EXPECT_NEAR(down<float>(aux)[0], 9.0f, 1e-6);
  TensorBuffer dw = zeros(Shape{0, 2}, DType::F32), dg = zeros(Shape{6, p.c}, DType::F32);
  r.backward(cx, dw, x, g, x, dg);
  EXPECT_THROW(r.routing(), Error);
}

TEST(RouterConfigTest, RejectsBadValuesAndComputesCapacity) {
  EXPECT_THROW(Router(RouterConfig{.num_experts = 4, .top_k = 5}, 0), Error);
  EXPECT_THROW(Router(RouterConfig{.num_experts = 4, .top_k = 0}, 0), Error);
  EXPECT_THROW(Router(RouterConfig{.jitter = 1.0f}, 0), Error);
  EXPECT_THROW(Router(RouterConfig{.aux_coef = -1.0f}, 0), Error);
  EXPECT_THROW(Router(RouterConfig{.capacity_factor = -0.5f}, 0), Error);
  const Router r(RouterConfig{.num_experts = 8, .top_k = 2, .capacity_factor = 1.25f}, 0);
  EXPECT_EQ(r.capacity(64), 20);  // 2 * 64 * 1.25 / 8 exactly
  EXPECT_EQ(r.capacity(3), 1);    // ceil(0.9375)
  EXPECT_EQ(r.capacity(0), 0);
  EXPECT_EQ(Router(RouterConfig{.num_experts = 8, .top_k = 2}, 0).capacity(64), 0);  // dropless
  EXPECT_EQ(
      Router(RouterConfig{.num_experts = 8, .top_k = 2, .capacity_factor = 0.1f}, 0).capacity(40),
      1);  // 2 * 40 * 0.1f / 8 = 1.0000000149 (f32's 0.1): still 1
}

INSTANTIATE_TEST_SUITE_P(Backends, RouterTest, ::testing::ValuesIn(compiled_backends()),
                         [](const auto& info) {
                           return std::string(device_kind_name(info.param));
                         });

}  // namespace
}  // namespace moezero::test
