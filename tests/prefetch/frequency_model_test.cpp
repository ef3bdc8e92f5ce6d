// tests/prefetch/frequency_model_test.cpp — EMA math against hand-computed values, the cold
// prior, co-activation on crafted sequences, update-order checks, bit-identical determinism and
// the exact JSON round trip (with field-named errors for mismatched checkpoints).
#include "prefetch/frequency_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"

namespace moezero::prefetch {
namespace {

using Counts = std::vector<int64_t>;

// Runs f and returns the Error's message ("" when nothing was thrown).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(FrequencyModel, ColdPriorPredictsEveryExpert) {
  FrequencyModel m(3, 4, 0.9);
  EXPECT_EQ(m.micro_batches(), 0);
  for (int l = 0; l < 3; ++l) {
    for (int e = 0; e < 4; ++e) {
      EXPECT_EQ(m.probability(l, e), 1.0);
      EXPECT_EQ(m.share(l, e), 0.25);
      EXPECT_EQ(m.predicted(l, e, nullptr), 1.0);
      if (l > 0) {
        EXPECT_EQ(m.given(l, e), 0.0);
        EXPECT_EQ(m.joint(l, e, 0), 0.0);
        EXPECT_EQ(m.conditional(l, e, 1), 1.0);  // no evidence: the marginal
      }
    }
  }
  std::vector<char> prev = {1, 0, 1, 0};
  EXPECT_EQ(m.predicted(1, 2, &prev), 1.0);
}

TEST(FrequencyModel, EmaMatchesHandComputedValues) {
  // d = 0.5 keeps every value dyadic: exact equality.
  FrequencyModel m(1, 4, 0.5);
  m.update(0, Counts{3, 1, 0, 0});
  EXPECT_EQ(m.share(0, 0), 0.5);    // .5*.25 + .5*.75
  EXPECT_EQ(m.share(0, 1), 0.25);   // .5*.25 + .5*.25
  EXPECT_EQ(m.share(0, 2), 0.125);  // .5*.25
  EXPECT_EQ(m.probability(0, 0), 1.0);
  EXPECT_EQ(m.probability(0, 2), 0.5);
  m.update(0, Counts{0, 0, 0, 4});
  EXPECT_EQ(m.share(0, 0), 0.25);
  EXPECT_EQ(m.share(0, 3), 0.5625);  // .5*.125 + .5*1
  EXPECT_EQ(m.probability(0, 0), 0.5);
  EXPECT_EQ(m.probability(0, 2), 0.25);
  EXPECT_EQ(m.probability(0, 3), 0.75);
  EXPECT_EQ(m.micro_batches(), 2);
  EXPECT_EQ(m.last_active(0), (std::vector<char>{0, 0, 0, 1}));

  // d = 0.9 (the default): decimal hand values, within a few ulps.
  FrequencyModel n(1, 2, 0.9);
  n.update(0, Counts{3, 1});
  n.update(0, Counts{0, 4});
  n.update(0, Counts{2, 2});
  EXPECT_DOUBLE_EQ(n.share(0, 0), 0.47525);     // .5 -> .525 -> .4725 -> .47525
  EXPECT_DOUBLE_EQ(n.share(0, 1), 0.52475);     // .5 -> .475 -> .5275 -> .52475
  EXPECT_DOUBLE_EQ(n.probability(0, 0), 0.91);  // 1 -> 1 -> .9 -> .91
  EXPECT_EQ(n.probability(0, 1), 1.0);
}

TEST(FrequencyModel, ZeroTotalDecaysEverything) {
  FrequencyModel m(1, 2, 0.5);
  m.update(0, Counts{0, 0});
  EXPECT_EQ(m.share(0, 0), 0.25);
  EXPECT_EQ(m.probability(0, 1), 0.5);
  EXPECT_EQ(m.last_active(0), (std::vector<char>{0, 0}));
}

TEST(FrequencyModel, CoActivationOnACraftedSequence) {
  FrequencyModel m(2, 3, 0.5);
  // Micro-batch 1: layer 0 {0}, layer 1 {1}.
  m.update(0, Counts{1, 0, 0});
  m.update(1, Counts{0, 2, 0});
  EXPECT_EQ(m.given(1, 0), 0.5);
  EXPECT_EQ(m.given(1, 1), 0.0);
  EXPECT_EQ(m.joint(1, 0, 1), 0.5);
  EXPECT_EQ(m.joint(1, 0, 0), 0.0);
  EXPECT_EQ(m.conditional(1, 0, 1), 1.0);   // (.5 + .5*1) / (.5 + .5)
  EXPECT_EQ(m.conditional(1, 0, 0), 0.25);  // (0 + .5*.5) / 1
  EXPECT_EQ(m.conditional(1, 1, 0), 0.5);   // no evidence about 1: the marginal
  // Micro-batch 2: layer 0 {0, 1}, layer 1 {2}.
  m.update(0, Counts{2, 2, 0});
  m.update(1, Counts{0, 0, 3});
  EXPECT_EQ(m.probability(1, 0), 0.25);
  EXPECT_EQ(m.probability(1, 1), 0.5);
  EXPECT_EQ(m.probability(1, 2), 0.75);
  EXPECT_EQ(m.given(1, 0), 0.75);
  EXPECT_EQ(m.given(1, 1), 0.5);
  EXPECT_EQ(m.given(1, 2), 0.0);
  EXPECT_EQ(m.joint(1, 0, 1), 0.25);
  EXPECT_EQ(m.joint(1, 0, 2), 0.5);
  EXPECT_EQ(m.joint(1, 1, 2), 0.5);
  EXPECT_EQ(m.joint(1, 1, 1), 0.0);
  EXPECT_DOUBLE_EQ(m.conditional(1, 0, 0), 0.1);  // .125 / 1.25
  EXPECT_DOUBLE_EQ(m.conditional(1, 0, 1), 0.4);  // .5 / 1.25
  EXPECT_DOUBLE_EQ(m.conditional(1, 0, 2), 0.7);  // .875 / 1.25
  EXPECT_EQ(m.conditional(1, 1, 0), 0.125);
  EXPECT_EQ(m.conditional(1, 1, 1), 0.25);
  EXPECT_EQ(m.conditional(1, 1, 2), 0.875);
  EXPECT_EQ(m.conditional(1, 2, 1), 0.5);  // never active: marginal

  // predicted = max over the previous layer's active experts.
  const std::vector<char> both = {1, 1, 0};
  EXPECT_EQ(m.predicted(1, 0, &both), 0.125);
  EXPECT_DOUBLE_EQ(m.predicted(1, 1, &both), 0.4);
  EXPECT_EQ(m.predicted(1, 2, &both), 0.875);
  const std::vector<char> only0 = {1, 0, 0};
  EXPECT_DOUBLE_EQ(m.predicted(1, 2, &only0), 0.7);
  const std::vector<char> none = {0, 0, 0};
  EXPECT_EQ(m.predicted(1, 1, &none), 0.5);  // empty set: marginal
  EXPECT_EQ(m.predicted(1, 1, nullptr), 0.5);
  EXPECT_EQ(m.predicted(0, 1, &both), 0.75);  // layer 0: marginal

  // Micro-batch 3: layer 0 {2}, layer 1 {0}. Rows 0 and 1 (inactive predecessors) do not move.
  m.update(0, Counts{0, 0, 1});
  m.update(1, Counts{1, 0, 0});
  EXPECT_EQ(m.probability(1, 0), 0.625);
  EXPECT_EQ(m.probability(1, 2), 0.375);
  EXPECT_EQ(m.given(1, 0), 0.75);
  EXPECT_EQ(m.given(1, 2), 0.5);
  EXPECT_EQ(m.joint(1, 0, 2), 0.5);
  EXPECT_EQ(m.joint(1, 2, 0), 0.5);
  EXPECT_DOUBLE_EQ(m.conditional(1, 0, 2), 0.55);  // (.5 + .5*.375) / 1.25
  EXPECT_EQ(m.conditional(1, 2, 0), 0.8125);       // (.5 + .5*.625) / 1
  EXPECT_EQ(m.conditional(1, 2, 1), 0.125);        // (0 + .5*.25) / 1
}

TEST(FrequencyModel, ConditionalLearnsAPermutation) {
  // Layer 1 always uses expert (i + 1) % 4 when layer 0 uses i: conditionals approach 1 / 0.
  FrequencyModel m(2, 4, 0.9);
  for (int t = 0; t < 200; ++t) {
    const int i = t % 4;
    Counts c0(4, 0), c1(4, 0);
    c0[size_t(i)] = 5;
    c1[size_t((i + 1) % 4)] = 5;
    m.update(0, c0);
    m.update(1, c1);
  }
  for (int i = 0; i < 4; ++i) {
    EXPECT_GT(m.conditional(1, i, (i + 1) % 4), 0.9) << i;  // (1 + .1 * ~.25) / 1.1
    EXPECT_LT(m.conditional(1, i, (i + 2) % 4), 0.1) << i;
    EXPECT_NEAR(m.probability(1, i), 0.25, 0.1);
  }
}

TEST(FrequencyModel, UpdateOrderAndArgumentsAreChecked) {
  FrequencyModel m(2, 3, 0.9);
  EXPECT_NE(error_of([&] {
              m.update(1, Counts{1, 0, 0});
            }).find("out of order"),
            std::string::npos);
  m.update(0, Counts{1, 0, 0});
  EXPECT_NE(error_of([&] {
              m.update(0, Counts{1, 0, 0});
            }).find("layer 0 updated again"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              m.update(1, Counts{1, 0});
            }).find("expected 3 counts"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              m.update(1, Counts{1, -1, 0});
            }).find("negative count"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              m.update(2, Counts{1, 0, 0});
            }).find("out of range"),
            std::string::npos);
  m.update(1, Counts{1, 0, 0});
  EXPECT_EQ(m.updates(1), 1);
  EXPECT_THROW(FrequencyModel(0, 3, 0.9), Error);
  EXPECT_THROW(FrequencyModel(1, 0, 0.9), Error);
  EXPECT_THROW(FrequencyModel(1, 3, 1.0), Error);
  EXPECT_THROW(m.joint(0, 0, 0), Error);
  EXPECT_THROW(m.probability(0, 3), Error);
  std::vector<char> short_flags = {1};
  EXPECT_THROW(m.predicted(1, 0, &short_flags), Error);
}

// A random but reproducible routing sequence for L layers of E experts.
void feed(FrequencyModel& m, uint64_t seed, int micro_batches) {
  std::mt19937_64 rng(seed);
  for (int t = 0; t < micro_batches; ++t) {
    for (int l = 0; l < m.layers(); ++l) {
      Counts c(size_t(m.experts()));
      for (auto& x : c) x = int64_t(rng() % 4 == 0 ? 0 : rng() % 1000);
      m.update(l, c);
    }
  }
}

TEST(FrequencyModel, SameSequenceGivesBitIdenticalModels) {
  const uint64_t seed = 20240601;
  SCOPED_TRACE(seed);
  FrequencyModel a(3, 8, 0.93), b(3, 8, 0.93);
  feed(a, seed, 100);
  feed(b, seed, 100);
  EXPECT_TRUE(a == b);
  for (int l = 0; l < 3; ++l) {
    for (int e = 0; e < 8; ++e) {
      const double pa = a.probability(l, e), pb = b.probability(l, e);
      EXPECT_EQ(std::memcmp(&pa, &pb, sizeof pa), 0);
    }
  }
  b.update(0, Counts(8, 1));
  EXPECT_FALSE(a == b);
}

TEST(FrequencyModel, JsonRoundTripIsExact) {
  FrequencyModel a(3, 5, 0.87);
  feed(a, 7, 37);
  a.update(0, Counts{1, 2, 3, 0, 0});  // mid micro-batch: the round trip keeps that too
  const std::string text = a.to_json().dump();
  const FrequencyModel b = FrequencyModel::from_json(nlohmann::json::parse(text));
  EXPECT_TRUE(a == b);
  EXPECT_EQ(b.to_json().dump(), text);
  // Continuing both gives the same model (the ordering state survived).
  FrequencyModel c = b;
  a.update(1, Counts{0, 0, 1, 1, 0});
  c.update(1, Counts{0, 0, 1, 1, 0});
  EXPECT_TRUE(a == c);

  // restore() keeps the model's own ema_decay (the resumed run's config) and takes the state.
  FrequencyModel d(3, 5, 0.5);
  d.restore(nlohmann::json::parse(text));
  EXPECT_EQ(d.ema_decay(), 0.5);
  EXPECT_EQ(d.probability(2, 3), b.probability(2, 3));
  EXPECT_EQ(d.micro_batches(), b.micro_batches());
}

TEST(FrequencyModel, MismatchedJsonIsRefusedNamingTheField) {
  FrequencyModel a(2, 4, 0.9);
  feed(a, 3, 5);
  const nlohmann::json good = a.to_json();
  auto load_error = [](const nlohmann::json& j) {
    return error_of([&] { (void)FrequencyModel::from_json(j); });
  };
  nlohmann::json j = good;
  j.erase("share");
  EXPECT_NE(load_error(j).find("frequency_model.share: missing"), std::string::npos);
  j = good;
  j["probability"].erase(0);
  EXPECT_NE(load_error(j).find("frequency_model.probability: expected 8 values, got 7"),
            std::string::npos);
  j = good;
  j["joint"][5] = 1.5;
  EXPECT_NE(load_error(j).find("frequency_model.joint[5]"), std::string::npos);
  j = good;
  j["given"][1] = "x";
  EXPECT_NE(load_error(j).find("frequency_model.given[1]: expected a number"), std::string::npos);
  j = good;
  j["layers"] = 3;
  EXPECT_NE(load_error(j).find("frequency_model.updates"), std::string::npos);
  j = good;
  j["format"] = "something else";
  EXPECT_NE(load_error(j).find("frequency_model.format"), std::string::npos);
  j = good;
  j["ema_decay"] = 1.0;
  EXPECT_NE(load_error(j).find("frequency_model.ema_decay"), std::string::npos);
  j = good;
  j["updates"][1] = 3;
  EXPECT_NE(load_error(j).find("frequency_model.updates[1]"), std::string::npos);
  j = good;
  j["last_active"][1][2] = 7;
  EXPECT_NE(load_error(j).find("frequency_model.last_active[1][2]"), std::string::npos);
  j = good;  // the cost plan's calibration (optional, but checked when present)
  j["confident_priced"][0] = -1.0;
  EXPECT_NE(load_error(j).find("frequency_model.confident_priced[0]: must be in [0"),
            std::string::npos);
  j = good;
  j["confident_active"] = nlohmann::json::array({1.0});
  EXPECT_NE(load_error(j).find("frequency_model.confident_active: expected 2 values, got 1"),
            std::string::npos);
  EXPECT_NE(load_error(nlohmann::json::array()).find("expected a JSON object"), std::string::npos);

  FrequencyModel wider(2, 5, 0.9);
  EXPECT_NE(
      error_of([&] { wider.restore(good); }).find("frequency_model.experts: checkpoint has 4"),
      std::string::npos);
  FrequencyModel deeper(3, 4, 0.9);
  EXPECT_NE(
      error_of([&] { deeper.restore(good); }).find("frequency_model.layers: checkpoint has 2"),
      std::string::npos);
  EXPECT_TRUE(deeper == FrequencyModel(3, 4, 0.9));  // a refused restore changes nothing
}

}  // namespace
}  // namespace moezero::prefetch
