// Generation (hf/generate.h): the KV-cache forward gives the Transformer's logits at every
// position (dense and MoE layers), greedy KV-cache generation equals greedy generation by full
// recomputation with the Transformer, sampling is a pure function of the seed, and bad prompts
// are refused.
#include "hf/generate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/param_group.h"
#include "hf/hf_score.h"
#include "kernels/backend.h"

namespace moezero::hf {
namespace {

ModelConfig tiny_model() {
  ModelConfig m;
  m.vocab_size = 256;
  m.d_model = 32;
  m.d_ff = 48;
  m.n_layers = 3;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.seq_len = 24;
  m.num_experts = 4;
  m.top_k = 2;
  m.moe_every = 2;  // layer 1 is MoE, layers 0 and 2 dense
  return m;
}

// Random parameters, large enough that logits differ clearly between tokens.
std::vector<GroupValues> random_groups(const ModelConfig& m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<GroupValues> out;
  for (const GroupSpec& spec : full_param_groups(m)) {
    const GroupLayout layout(spec);
    GroupValues g{spec.name, std::vector<float>(size_t(layout.numel()), 0.0f)};
    for (size_t i = 0; i < spec.params.size(); ++i) {
      const bool norm = spec.params[i].name.find("norm") != std::string::npos;
      for (int64_t j = 0; j < spec.params[i].shape.numel(); ++j)
        g.data[size_t(layout.offset(i) + j)] = norm ? 1.0f + 0.1f * n(rng) : 0.15f * n(rng);
    }
    out.push_back(std::move(g));
  }
  return out;
}

// The Transformer's logits (T, V) for `tokens` (T of them), through hf_score's forward.
std::vector<float> transformer_logits(const ModelConfig& m, const std::vector<GroupValues>& g,
                                      const std::vector<int32_t>& tokens) {
  std::vector<uint8_t> text(tokens.begin(), tokens.end());
  text.push_back(0);  // a target for the last position
  ScoreOptions opt;
  opt.seq_len = int64_t(tokens.size());
  opt.batch_windows = 1;
  opt.keep_first_logits = true;
  MoeConfig moe;
  moe.normalize_top_k = true;
  return score_bytes(m, moe, g, text, opt).first_logits;
}

// The KV-cache logits of every position against the Transformer's forward on the whole prefix.
void expect_kv_logits_equal_forward(const ModelConfig& m) {
  const auto groups = random_groups(m, 11);
  const std::vector<int32_t> tokens = {72,  101, 108, 108, 111, 44,  32, 119, 111, 114,
                                       108, 100, 33,  10,  0,   255, 7,  7,   7,   7};
  const std::vector<float> ref = transformer_logits(m, groups, tokens);
  ASSERT_EQ(ref.size(), tokens.size() * 256);
  KvGenerator gen(m, true, groups);
  double worst = 0, scale = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::vector<float>& got = gen.feed(tokens[t]);
    for (size_t v = 0; v < 256; ++v) {
      worst = std::max(worst, double(std::abs(got[v] - ref[t * 256 + v])));
      scale = std::max(scale, double(std::abs(ref[t * 256 + v])));
    }
  }
  EXPECT_GT(scale, 1.0) << "logits should not be trivially small";
  // f32 sums in other orders (blocked GEMMs vs plain loops): rounding only.
  EXPECT_LT(worst, 2e-4 * scale) << "worst |diff| " << worst << " of logits up to " << scale;
  EXPECT_EQ(gen.position(), int64_t(tokens.size()));
}

TEST(Generate, KvCacheLogitsEqualTheTransformerForward) {
  expect_kv_logits_equal_forward(tiny_model());
}

// Issue 17's layers: fine-grained experts (width 24 beside dense 48), two gated shared experts
// of width 8, Qwen2's q/k/v biases (random, like every other weight here); and ungated.
TEST(Generate, KvCacheLogitsEqualTheTransformerForwardWithSharedExpertsAndQkvBias) {
  ModelConfig m = tiny_model();
  m.expert_d_ff = 24;
  m.num_shared_experts = 2;
  m.shared_expert_d_ff = 8;
  m.shared_expert_gate = true;
  m.qkv_bias = true;
  expect_kv_logits_equal_forward(m);
  m.shared_expert_gate = false;
  m.shared_expert_d_ff = 0;  // the routed experts' width
  expect_kv_logits_equal_forward(m);
}

TEST(Generate, GreedyKvCacheEqualsGreedyFullRecompute) {
  const ModelConfig m = tiny_model();
  const auto groups = random_groups(m, 5);
  const std::vector<int32_t> prompt = {84, 104, 101};
  KvGenerator gen(m, true, groups);
  Sampling greedy;
  greedy.temperature = 0.0;
  const std::vector<int32_t> kv = generate(gen, prompt, 12, greedy);
  ASSERT_EQ(kv.size(), 12u);
  std::vector<int32_t> seq = prompt, full;
  for (int i = 0; i < 12; ++i) {
    const std::vector<float> logits = transformer_logits(m, groups, seq);
    const auto last = logits.begin() + std::ptrdiff_t((seq.size() - 1) * 256);
    const auto next = int32_t(std::max_element(last, last + 256) - last);
    full.push_back(next);
    seq.push_back(next);
  }
  EXPECT_EQ(kv, full);
  // The context bounds the generation: 24 positions, 3 of them the prompt.
  EXPECT_EQ(generate(gen, prompt, 100, greedy).size(), 24u - 3u + 1u);
}

TEST(Generate, SamplingIsAPureFunctionOfTheSeed) {
  const ModelConfig m = tiny_model();
  const auto groups = random_groups(m, 3);
  KvGenerator gen(m, true, groups);
  Sampling s;
  s.temperature = 1.0;
  s.seed = 7;
  const auto a = generate(gen, {65}, 16, s), b = generate(gen, {65}, 16, s);
  EXPECT_EQ(a, b);
  s.seed = 8;
  EXPECT_NE(generate(gen, {65}, 16, s), a);
  // top_k 1 and a tiny top_p are greedy.
  Sampling greedy;
  greedy.temperature = 0.0;
  const auto g = generate(gen, {65}, 16, greedy);
  s.top_k = 1;
  EXPECT_EQ(generate(gen, {65}, 16, s), g);
  s.top_k = 0;
  s.top_p = 1e-9;
  EXPECT_EQ(generate(gen, {65}, 16, s), g);
  // Stops at the end-of-text token (here: the first greedy token).
  EXPECT_EQ(generate(gen, {65}, 16, greedy, g[0]).size(), 1u);
}

TEST(Generate, SampleTokenFollowsTheDistribution) {
  std::mt19937_64 rng(1);
  Sampling s;
  s.temperature = 1.0;
  const std::vector<float> logits = {0.0f, std::log(3.0f), -50.0f};
  int ones = 0;
  for (int i = 0; i < 8000; ++i) ones += sample_token(logits, s, rng) == 1;
  EXPECT_NEAR(ones / 8000.0, 0.75, 0.02);  // 4.7 standard deviations
  s.top_k = 1;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sample_token(logits, s, rng), 1);
}

// The same code on a GPU (kernels/cuda through the Ops interface): the same greedy tokens as on
// the CPU, and logits within rounding (cuBLAS and the CPU GEMM sum in other orders; f32, no TF32).
TEST(Generate, CudaGreedyEqualsCpu) {
  std::string why;
  if (!cuda_available(&why))
    GTEST_SKIP() << "no GPU here (" << why << "): CUDA generation untested";
  const ModelConfig m = tiny_model();
  const auto groups = random_groups(m, 21);
  const std::unique_ptr<Device> gpu = make_cuda_device(0);
  KvGenerator cpu_gen(m, true, groups), cuda_gen(m, true, groups, gpu.get());
  EXPECT_EQ(cuda_gen.device().kind(), DeviceKind::Cuda);
  const std::vector<int32_t> prompt = {84, 104, 101, 32};
  double worst = 0, scale = 0;
  for (int32_t t : prompt) {
    const std::vector<float> a = cpu_gen.feed(t);
    const std::vector<float>& b = cuda_gen.feed(t);
    for (size_t v = 0; v < a.size(); ++v) {
      worst = std::max(worst, double(std::abs(a[v] - b[v])));
      scale = std::max(scale, double(std::abs(a[v])));
    }
  }
  EXPECT_LT(worst, 1e-4 * scale) << "worst |cpu - cuda| " << worst << " of logits up to " << scale;
  Sampling greedy;
  greedy.temperature = 0.0;
  const std::vector<int32_t> on_cpu = generate(cpu_gen, prompt, 20, greedy);
  const std::vector<int32_t> on_cuda = generate(cuda_gen, prompt, 20, greedy);
  ASSERT_EQ(on_cpu.size(), 20u);
  EXPECT_EQ(on_cpu, on_cuda);
}

TEST(Generate, RunsOnTheDeviceItIsGiven) {
  const ModelConfig m = tiny_model();
  const std::unique_ptr<Device> cpu = make_cpu_device(3);
  KvGenerator gen(m, true, random_groups(m, 2), cpu.get());
  EXPECT_EQ(&gen.device(), cpu.get());
  EXPECT_EQ(gen.feed(65).size(), 256u);
  EXPECT_GT(cpu->allocator().stats().current_bytes[size_t(MemTag::FullParam)], 0u)
      << "the weights should live on the given device";
}

TEST(Generate, BadPromptsAreRefused) {
  const ModelConfig m = tiny_model();
  KvGenerator gen(m, true, random_groups(m, 1));
  Sampling s;
  try {
    generate(gen, std::vector<int32_t>(25, 1), 4, s);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the prompt has 25 tokens, longer than the context "
                                         "(model.seq_len = 24)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(generate(gen, {}, 4, s), Error);
  EXPECT_THROW(gen.feed(300), Error);
  auto groups = random_groups(m, 1);
  groups.pop_back();
  EXPECT_THROW(KvGenerator(m, true, groups), Error);
}

}  // namespace
}  // namespace moezero::hf
