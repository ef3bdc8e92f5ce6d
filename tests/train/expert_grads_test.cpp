// tests/train/expert_grads_test.cpp — zero.expert_grads (core/config.h ExpertGrads): `all`
// reduces every local expert's gradient, the inactive ones as zeros, as the incumbents do
// (the bench's incumbent rows); `active` (moezero) only the agreed-active ones'. Both give the
// same losses and parameters bit for bit at every stage and gather strategy, and `all` reduces
// more bytes exactly when some expert was inactive.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config.h"
#include "tests/common/tiny_config.h"
#include "train/trainer.h"

namespace moezero::train {
namespace {

// 16 experts, top-1, one 8-token sequence per rank per micro-batch at world 2: about a third of a
// layer's experts get no token in a micro-batch, so `active` skips their reductions.
TrainResult run(const std::string& grads, std::vector<std::string> extra) {
  std::vector<std::string> o = {"model.num_experts=16",     "model.top_k=1",
                                "model.seq_len=8",          "train.micro_batch_size=2",
                                "parallel.world_size=2",    "train.steps=3",
                                "train.grad_accum_steps=2", "zero.expert_grads=" + grads};
  o.insert(o.end(), extra.begin(), extra.end());
  TrainOptions opt;
  opt.collect_params = true;
  return train(test::tiny_config("expert_grads", o), opt);
}

uint64_t reduced_bytes(const TrainResult& r) {
  uint64_t b = 0;
  for (const StepLog& s : r.steps)
    for (const RankStepStats& k : s.ranks) b += k.reduce_scattered_bytes + k.all_reduced_bytes;
  return b;
}

TEST(ExpertGrads, AllReducesTheInactiveExpertsZerosWithTheSameLosses) {
  const std::vector<std::vector<std::string>> cases = {
      {"zero.stage=3"},
      {"zero.stage=3", "zero.moe_gather=fsdp", "prefetch.policy=none"},
      {"zero.stage=3", "zero.moe_gather=leaf", "prefetch.policy=none"},
      {"zero.stage=2"},
      {"zero.stage=1"},
      {"zero.stage=3", "train.dtype=bf16"},
      // Expert parallelism: each rank's 8 experts reduced over its EDP group of 2.
      {"zero.stage=3", "parallel.world_size=4", "parallel.ep_size=2", "train.micro_batch_size=4"}};
  for (const auto& c : cases) {
    std::string what;
    for (const std::string& o : c) what += o + " ";
    const TrainResult active = run("active", c), all = run("all", c);
    ASSERT_EQ(active.steps.size(), 3u) << what;
    ASSERT_EQ(all.steps.size(), 3u) << what;
    uint64_t slots = 0, used = 0;
    for (size_t s = 0; s < active.steps.size(); ++s) {
      EXPECT_EQ(all.steps[s].loss, active.steps[s].loss) << what << "step " << s + 1;
      slots += active.steps[s].ranks[0].layer_expert_slots;
      used += active.steps[s].ranks[0].active_layer_experts;
    }
    ASSERT_EQ(all.params.size(), active.params.size()) << what;
    for (size_t g = 0; g < all.params.size(); ++g)
      EXPECT_EQ(all.params[g], active.params[g]) << what << active.group_names[g];
    ASSERT_LT(used, slots) << what << "every expert was active: the case tests nothing";
    EXPECT_GT(reduced_bytes(all), reduced_bytes(active)) << what;
  }
}

}  // namespace
}  // namespace moezero::train
