// tests/api/api_test.cpp — include/moezero/api.h: make_config, validate_config,
// parameter_count, through the umbrella header; the trainer's deprecated former names.
#include <gtest/gtest.h>
#include <moezero/moezero.h>

#include <type_traits>

namespace moezero {
namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Api, MakeConfigTakesJsonAndOverrides) {
  const Config c = make_config(R"({"model": {"num_experts": 4, "d_model": 32}})",
                               {"train.steps=7", "train.dtype=bf16"});
  EXPECT_EQ(c.model.num_experts, 4);
  EXPECT_EQ(c.model.d_model, 32);
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.train.dtype, DType::BF16);
  EXPECT_EQ(c.model.n_layers, Config{}.model.n_layers);  // untouched keys keep their defaults
  EXPECT_EQ(config_to_json(make_config("")), config_to_json(Config{}));
}

TEST(Api, MakeConfigNamesTheKeyAtFault) {
  EXPECT_NE(error_of([] { make_config(R"({"train": {"lrr": 0.1}})"); }).find("train.lrr"),
            std::string::npos);
  EXPECT_NE(error_of([] { make_config("{}", {"zero.stage=7"}); }).find("zero.stage"),
            std::string::npos);
}

TEST(Api, ValidateConfigKeepsGoodValuesAndRejectsBadOnes) {
  Config c;
  c.model.num_experts = 4;
  c.train.lr = 5e-3;
  c.zero.stage = 2;
  EXPECT_EQ(config_to_json(validate_config(c)), config_to_json(c));
  c.train.lr = -0.1;
  EXPECT_NE(error_of([&] { validate_config(c); }).find("train.lr"), std::string::npos);
}

TEST(Api, ParameterCountOfADenseModel) {
  ModelConfig m;
  m.num_experts = 0;
  m.vocab_size = 64;
  m.d_model = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.d_ff = 64;
  // embed V*C + per layer (2 norms C, q/o C*C, k/v C*(C/2), SwiGLU 3*C*F) + final norm C + head V*C
  const int64_t C = 32, V = 64, F = 64;
  const int64_t layer = 2 * C + 2 * C * C + 2 * C * (C / 2) + 3 * C * F;
  EXPECT_EQ(parameter_count(m), V * C + 2 * layer + C + V * C);
}

// The trainer's former names in moezero::moe (deprecated aliases in moezero/moezero.h) are
// the types of moezero::train, and moe::train runs the same trainer.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static_assert(std::is_same_v<moe::BatchRequest, train::BatchRequest>);
static_assert(std::is_same_v<moe::DataSource, train::DataSource>);
static_assert(std::is_same_v<moe::GradHookInfo, train::GradHookInfo>);
static_assert(std::is_same_v<moe::GradHook, train::GradHook>);
static_assert(std::is_same_v<moe::StepLog, train::StepLog>);
static_assert(std::is_same_v<moe::TrainOptions, train::TrainOptions>);
static_assert(std::is_same_v<moe::TrainResult, train::TrainResult>);

TEST(Api, FormerMoeNamesRunTheSameTrainer) {
  Config c;
  c.model.vocab_size = 16;
  c.model.d_model = 16;
  c.model.n_layers = 1;
  c.model.n_heads = 2;
  c.model.n_kv_heads = 1;
  c.model.d_ff = 16;
  c.model.seq_len = 8;
  c.model.num_experts = 2;
  c.model.top_k = 1;
  c.train.steps = 2;
  c.train.micro_batch_size = 2;
  c = validate_config(c);
  moe::TrainOptions old_options;
  old_options.data = [](const moe::BatchRequest& r, std::vector<int32_t>& tokens,
                        std::vector<int32_t>& targets) {
    tokens.assign(static_cast<size_t>(r.rows * r.seq_len), 0);
    targets.assign(tokens.size(), 0);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i + r.micro_batch + r.row_begin) % 16);
      targets[i] = static_cast<int32_t>((tokens[i] + 1) % 16);
    }
  };
  train::TrainOptions options;
  options.data = old_options.data;
  const moe::TrainResult old_result = moe::train(c, old_options);
  const train::TrainResult result = train::train(c, options);
  ASSERT_EQ(old_result.steps.size(), 2u);
  ASSERT_EQ(result.steps.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(old_result.steps[i].loss, result.steps[i].loss);
}
#pragma GCC diagnostic pop

}  // namespace
}  // namespace moezero
