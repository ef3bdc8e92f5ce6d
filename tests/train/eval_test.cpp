// Evaluation (train.eval_every): the validation loss does not depend on the world size, the
// expert-parallel width, the ZeRO stage or how experts are gathered; it leaves training
// untouched; it is in the metrics line; and token shards give the same run as the same tokens
// as bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/config.h"
#include "core/error.h"
#include "tests/common/tiny_config.h"
#include "train/data.h"
#include "train/token_shard.h"
#include "train/trainer.h"

namespace moezero::train {
namespace {

Config tiny_moe(std::vector<std::string> overrides = {}) {
  std::vector<std::string> o = {"moe.aux_loss_coef=0.01", "train.steps=4", "data.val_fraction=0.05",
                                "train.eval_every=2", "train.eval_batches=3"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return test::tiny_moe_config("tiny", o);
}

TEST(Eval, ValidationLossIsTheSameAtEveryWorldSizeAndLeavesTrainingAlone) {
  const TrainResult ref = train(tiny_moe({"parallel.world_size=1", "zero.stage=3"}), {});
  ASSERT_EQ(ref.steps.size(), 4u);
  for (size_t s = 0; s < 4; ++s) EXPECT_EQ(ref.steps[s].val_loss.has_value(), s % 2 == 1);
  ASSERT_TRUE(ref.steps[3].val_loss);
  // A loss near log(256) at the start, below it after training.
  EXPECT_GT(*ref.steps[1].val_loss, 3.0);
  EXPECT_LT(*ref.steps[3].val_loss, *ref.steps[1].val_loss);
  struct Case {
    int world, ep, stage;
    const char* gather;
    const char* reshard;
  };
  for (Case c : {Case{2, 2, 3, "experts", "true"}, Case{4, 1, 3, "experts", "false"},
                 Case{4, 2, 3, "fsdp", "true"}, Case{4, 4, 3, "leaf", "true"},
                 Case{4, 2, 0, "experts", "true"}}) {
    const std::string what = "world " + std::to_string(c.world) + " ep " + std::to_string(c.ep) +
                             " stage " + std::to_string(c.stage) + " " + c.gather;
    const TrainResult r = train(tiny_moe({"parallel.world_size=" + std::to_string(c.world),
                                          "parallel.ep_size=" + std::to_string(c.ep),
                                          "zero.stage=" + std::to_string(c.stage),
                                          std::string("zero.moe_gather=") + c.gather,
                                          std::string("zero.reshard_after_forward=") + c.reshard}),
                                {});
    ASSERT_EQ(r.steps.size(), 4u) << what;
    for (size_t s = 0; s < 4; ++s) {
      ASSERT_EQ(r.steps[s].val_loss.has_value(), ref.steps[s].val_loss.has_value()) << what;
      if (r.steps[s].val_loss) {  // sums in other orders: agreement to float rounding
        EXPECT_NEAR(*r.steps[s].val_loss, *ref.steps[s].val_loss, 1e-5 * *ref.steps[s].val_loss)
            << what << " step " << s + 1;
      }
    }
  }
  // Training with evaluation is training without it, bit for bit (world 4, EP 2).
  const TrainResult with = train(tiny_moe({"parallel.world_size=4", "parallel.ep_size=2"}), {});
  const TrainResult without =
      train(tiny_moe({"parallel.world_size=4", "parallel.ep_size=2", "train.eval_every=0"}), {});
  ASSERT_EQ(with.steps.size(), without.steps.size());
  for (size_t s = 0; s < with.steps.size(); ++s) {
    EXPECT_EQ(with.steps[s].loss, without.steps[s].loss) << "step " << s + 1;
    EXPECT_EQ(with.steps[s].grad_norm, without.steps[s].grad_norm) << "step " << s + 1;
    EXPECT_EQ(with.steps[s].tokens_per_expert, without.steps[s].tokens_per_expert);
    EXPECT_FALSE(without.steps[s].val_loss);
  }
}

TEST(Eval, MetricsLineHasValidationLossAndPerplexity) {
  const std::string path = ::testing::TempDir() + "moezero_eval_test_metrics.jsonl";
  TrainOptions opt;
  opt.metrics_path = path;
  train(tiny_moe({"parallel.world_size=2", "train.steps=3"}), opt);  // eval at 2 and the last, 3
  std::ifstream in(path);
  std::string line;
  std::vector<nlohmann::json> lines;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_FALSE(lines[0].contains("val_loss"));
  for (size_t i : {1u, 2u}) {
    ASSERT_TRUE(lines[i].contains("val_loss")) << i;
    EXPECT_NEAR(lines[i]["val_ppl"].get<double>(), std::exp(lines[i]["val_loss"].get<double>()),
                1e-9 * lines[i]["val_ppl"].get<double>());
  }
  std::filesystem::remove(path);
}

TEST(Eval, TokenShardsTrainAndEvaluateLikeTheSameBytes) {
  const std::string dir = ::testing::TempDir() + "moezero_eval_test_shards/";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string c = builtin_corpus();
  const auto total = static_cast<int64_t>(c.size());
  const int64_t cut = total - static_cast<int64_t>(static_cast<double>(total) * 0.05);
  std::vector<uint32_t> train_ids(c.begin(), c.begin() + cut), val_ids(c.begin() + cut, c.end());
  for (uint32_t& t : train_ids) t &= 0xff;
  for (uint32_t& t : val_ids) t &= 0xff;
  write_token_shard(dir + "train_000.bin", train_ids, 2);
  write_token_shard(dir + "val_000.bin", val_ids, 4);
  const TrainResult bytes = train(tiny_moe({"parallel.world_size=2"}), {});
  const TrainResult shards =
      train(tiny_moe({"parallel.world_size=2", "data.format=tokens",
                      "data.path=" + dir + "train_*.bin", "data.val_path=" + dir + "val_000.bin"}),
            {});
  ASSERT_EQ(bytes.steps.size(), shards.steps.size());
  for (size_t s = 0; s < bytes.steps.size(); ++s) {
    EXPECT_EQ(bytes.steps[s].loss, shards.steps[s].loss) << "step " << s + 1;
    EXPECT_EQ(bytes.steps[s].val_loss, shards.steps[s].val_loss) << "step " << s + 1;
  }
  // A held-out part shorter than one sequence is refused before training.
  write_token_shard(dir + "tiny_val.bin", {1, 2, 3}, 2);
  try {
    train(tiny_moe({"parallel.world_size=2", "data.format=tokens",
                    "data.path=" + dir + "train_*.bin", "data.val_path=" + dir + "tiny_val.bin"}),
          {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 3 tokens, fewer than one sequence"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moezero::train
