// tests/api/api_test.cpp — include/moezero/api.h: make_config, validate_config,
// parameter_count, through the umbrella header.
#include <gtest/gtest.h>
#include <moezero/moezero.h>

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

}  // namespace
}  // namespace moezero
