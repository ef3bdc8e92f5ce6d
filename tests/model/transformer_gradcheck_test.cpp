// tests/model/transformer_gradcheck_test.cpp — the whole model against an independent float64
// reference (tests/model/reference_model.h): the f32 loss, every parameter's gradient against
// central finite differences of the reference loss, and bf16 mode against f32.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tests/model/model_test_util.h"

namespace moezero::test {
namespace {

using moe::Transformer;

// f32 forward loss vs the f64 reference on the same weights: relative 1e-5. The loss is a
// mean of 13 cross-entropies through 2 layers; f32 rounding (2^-24 per op, a few hundred ops
// deep, mostly uncorrelated) lands around 1e-6 relative.
constexpr double kLossRtol = 1e-5;

// Analytic f32 gradients vs central differences of the f64 reference (eps 1e-6: truncation
// O(eps^2) ~ 1e-12, cancellation ~ 1e-16 / 1e-6 ~ 1e-10, both far below the f32 error). What
// remains is the f32 arithmetic of forward and backward: ~1e-6 relative to the typical
// gradient (~1e-2 here), larger for entries that are sums of cancelling terms, hence an
// absolute floor. abs 1e-4 + rel 1e-3 is ~100x what f32 gives and ~100x below what a wrong
// term (a missing scale, a transposed weight, a wrong head mapping: O(1) relative) gives.
constexpr double kGradAtol = 1e-4;
constexpr double kGradRtol = 1e-3;

class GradCheckTest : public ModelTest {
 protected:
  void bf16_matches_f32();  // one draw of Bf16MatchesF32 (from rng_)
  // Zero-initialised parameters (the q/k/v biases) drawn N(0, 0.3^2), so that their use in the
  // forward is tested too.
  void perturb_zeros(SimpleParams& p) {
    std::normal_distribution<float> n(0.0f, 0.3f);
    std::mt19937 rng(99);
    for (int g = 0; g < p.group_count(); ++g) {
      const GroupLayout& lay = p.layout(g);
      std::vector<float> v = p.params_host(g);
      for (size_t i = 0; i < lay.param_count(); ++i) {
        if (lay.spec().params[i].init != ParamInit::Zeros) continue;
        for (int64_t j = 0; j < lay.spec().params[i].shape.numel(); ++j)
          v[static_cast<size_t>(lay.offset(i) + j)] = n(rng);
      }
      p.set_params_host(g, v);
    }
  }
  void check_gradients(const ModelConfig& cfg);
};

TEST_P(GradCheckTest, GradientsMatchFiniteDifferencesOfFloat64Reference) {
  check_gradients(tiny_config());
}

// model.qkv_bias (Qwen2): the three biases per layer, nonzero, through the same check.
TEST_P(GradCheckTest, QkvBiasGradientsMatchFiniteDifferencesOfFloat64Reference) {
  ModelConfig cfg = tiny_config();
  cfg.qkv_bias = true;
  int biases = 0;
  for (const GroupSpec& g : Transformer(cfg).param_groups())
    for (const ParamSpec& p : g.params) biases += p.name.find("_proj.bias") != std::string::npos;
  EXPECT_EQ(biases, 3 * cfg.n_layers);
  check_gradients(cfg);
}

void GradCheckTest::check_gradients(const ModelConfig& cfg) {
  Transformer model(cfg);
  SimpleParams p(dev(), s(), model.param_groups(), DType::F32, 1234);
  perturb_norms(p);
  perturb_zeros(p);
  const Batch b = random_batch(cfg, 2, 7, 2);  // B=2, T=7, 2 ignored targets
  const double scale = 1.0 / static_cast<double>(count_valid(b));

  const RunResult r = run(model, p, b, static_cast<float>(scale));
  RefWeights ws = ref_weights(p);
  const double ref_loss = reference_loss(cfg, ws, b.tokens, b.targets, b.batch, b.seq, scale);
  EXPECT_NEAR(r.loss, ref_loss, kLossRtol * std::fabs(ref_loss)) << "f32 loss vs f64 reference";

  // Every entry of every parameter tensor.
  const double eps = 1e-6;
  int64_t checked = 0, bad = 0, significant = 0;
  double worst_abs = 0.0, worst_excess = -1.0;
  for (int g = 0; g < p.group_count(); ++g) {
    const GroupLayout& lay = p.layout(g);
    for (size_t i = 0; i < lay.param_count(); ++i) {
      const std::string& name = lay.spec().params[i].name;
      std::vector<double>& w = ws.at(name);
      int64_t tensor_bad = 0;
      for (size_t j = 0; j < w.size(); ++j) {
        const double orig = w[j];
        w[j] = orig + eps;
        const double lp = reference_loss(cfg, ws, b.tokens, b.targets, b.batch, b.seq, scale);
        w[j] = orig - eps;
        const double lm = reference_loss(cfg, ws, b.tokens, b.targets, b.batch, b.seq, scale);
        w[j] = orig;
        const double fd = (lp - lm) / (2.0 * eps);
        const double got = r.grads[static_cast<size_t>(g)][static_cast<size_t>(lay.offset(i)) + j];
        const double err = std::fabs(got - fd);
        const double lim = kGradAtol + kGradRtol * std::fabs(fd);
        ++checked;
        significant += std::fabs(fd) > 1e-3;
        worst_abs = std::max(worst_abs, err);
        if (err - lim > worst_excess) worst_excess = err - lim;
        if (!(err <= lim)) {
          if (tensor_bad++ < 3)
            ADD_FAILURE() << name << "[" << j << "]: analytic " << got << ", finite difference "
                          << fd << " (|diff| " << err << " > " << lim << ")";
          ++bad;
        }
      }
    }
  }
  std::printf("[ gradchk  ] %lld entries, %lld with |grad| > 1e-3, max |analytic - fd| = %.3g\n",
              static_cast<long long>(checked), static_cast<long long>(significant), worst_abs);
  EXPECT_EQ(bad, 0) << "of " << checked << " gradient entries";
  // Not vacuous: most gradients are well above the tolerance floor.
  EXPECT_GT(significant, checked / 2);
}

double cosine(const std::vector<float>& a, const std::vector<float>& b, size_t begin, size_t n) {
  double ab = 0.0, aa = 0.0, bb = 0.0;
  for (size_t i = begin; i < begin + n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

// bf16 compute (weights rounded to bf16, bf16 activations, f32 accumulation) on the same
// master weights: the loss within 2e-2 relative of f32 (bf16 has 8 significant bits, 4e-3
// relative per rounding, partly averaging out over the tokens) and the gradients pointing the
// same way: cosine > 0.99 over all parameters together, and > 0.97 for each parameter tensor
// (seen over 300 seeds: loss within 5e-3, cosine >= 0.995 overall and >= 0.986 per tensor,
// the lowest for k_proj, whose gradient comes through the attention softmax as a difference
// of nearly equal terms).
//
// Fixed draws, not the fixture's random seed: about one draw in 150 perturbs the norms and picks
// tokens so that layer 0's attention is nearly one-hot, and bf16 rounding then dominates that
// layer's small gradients (MOEZERO_TEST_SEED=1399000777: q_proj cosine 0.67, all parameters
// 0.96, loss still within 1.5e-3). That is bf16's precision, not a kernel fault; these seeds are
// typical draws.
TEST_P(GradCheckTest, Bf16MatchesF32) {
  for (uint64_t seed : {11u, 22u, 33u}) {
    SCOPED_TRACE("draw seed " + std::to_string(seed));
    rng_.seed(seed);
    bf16_matches_f32();
  }
}

void GradCheckTest::bf16_matches_f32() {
  const ModelConfig cfg = tiny_config();
  Transformer model(cfg);
  SimpleParams p32(dev(), s(), model.param_groups(), DType::F32, 77);
  perturb_norms(p32);
  SimpleParams p16(dev(), s(), model.param_groups(), DType::BF16, 0);
  for (int g = 0; g < p32.group_count(); ++g) p16.set_params_host(g, p32.params_host(g));
  const Batch b = random_batch(cfg, 2, 7, 1);
  const float scale = 1.0f / static_cast<float>(count_valid(b));

  const RunResult r32 = run(model, p32, b, scale);
  const RunResult r16 = run(model, p16, b, scale);
  EXPECT_NEAR(r16.loss, r32.loss, 2e-2 * std::fabs(r32.loss));
  double min_cos = 1.0;
  std::vector<float> all32, all16;
  for (int g = 0; g < p32.group_count(); ++g) {
    const auto& g32 = r32.grads[static_cast<size_t>(g)];
    const auto& g16 = r16.grads[static_cast<size_t>(g)];
    all32.insert(all32.end(), g32.begin(), g32.end());
    all16.insert(all16.end(), g16.begin(), g16.end());
    const GroupLayout& lay = p32.layout(g);
    for (size_t i = 0; i < lay.param_count(); ++i) {
      const auto n = static_cast<size_t>(lay.spec().params[i].shape.numel());
      const double c = cosine(g32, g16, static_cast<size_t>(lay.offset(i)), n);
      EXPECT_GT(c, 0.97) << lay.spec().params[i].name;
      min_cos = std::min(min_cos, c);
    }
  }
  const double total_cos = cosine(all32, all16, 0, all32.size());
  EXPECT_GT(total_cos, 0.99);
  std::printf(
      "[ bf16     ] loss %.6f vs f32 %.6f (rel %.2g); gradient cosine %.5f, per tensor "
      ">= %.5f\n",
      r16.loss, r32.loss, std::fabs(r16.loss - r32.loss) / std::fabs(r32.loss), total_cos, min_cos);
}

INSTANTIATE_TEST_SUITE_P(Backends, GradCheckTest, ::testing::ValuesIn(compiled_backends()),
                         [](const auto& info) {
                           return std::string(device_kind_name(info.param));
                         });

}  // namespace
}  // namespace moezero::test
