// tests/train/pregate_train_test.cpp — prefetch.pregate through the trainer: the lookahead (each
// MoE layer applying the next one's router to its own input, all-reduced with its agreement)
// never changes a loss, keeps every rank's collectives matched (the runs finish), and its
// counters are agreed (identical on every rank) and consistent; off, they stay 0.
#include <gtest/gtest.h>

#include "tests/common/tiny_config.h"
#include "train/trainer.h"

namespace moezero::train {
namespace {

TrainResult run(bool pregate, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {
      "parallel.world_size=4",     "model.n_layers=3",
      "model.num_experts=8",       "train.micro_batch_size=4",
      "train.grad_accum_steps=2",  "comm_emulation.link_gbps=10",
      "prefetch.speculate=priced", std::string("prefetch.pregate=") + (pregate ? "true" : "false")};
  o.insert(o.end(), extra.begin(), extra.end());
  return train(test::tiny_moe_config("pregate", o), TrainOptions{});
}

void check(const std::vector<std::string>& extra, const std::string& what) {
  SCOPED_TRACE(what);
  const TrainResult off = run(false, extra), on = run(true, extra);
  ASSERT_EQ(off.steps.size(), on.steps.size());
  uint64_t predicted = 0, hits = 0, active = 0, all_active = 0;
  for (size_t s = 0; s < on.steps.size(); ++s) {
    EXPECT_EQ(on.steps[s].loss, off.steps[s].loss) << "step " << s + 1;
    const RankStepStats& r0 = on.steps[s].ranks[0];
    for (const RankStepStats& r : on.steps[s].ranks) {  // agreed: the same on every rank
      EXPECT_EQ(r.pregate_predicted, r0.pregate_predicted);
      EXPECT_EQ(r.pregate_hits, r0.pregate_hits);
      EXPECT_EQ(r.pregate_active, r0.pregate_active);
    }
    for (const RankStepStats& r : off.steps[s].ranks)
      EXPECT_EQ(r.pregate_predicted + r.pregate_hits + r.pregate_active, 0u);
    predicted += r0.pregate_predicted;
    hits += r0.pregate_hits;
    active += r0.pregate_active;
    all_active += r0.active_layer_experts;
  }
  // Two of the three MoE layers have a lookahead, each micro-batch: at least one expert each.
  const uint64_t lookaheads = on.steps.size() * 2 * 2;
  EXPECT_GE(predicted, lookaheads);
  EXPECT_GE(active, lookaheads);
  EXPECT_LE(hits, predicted);
  EXPECT_LE(hits, active);
  EXPECT_LT(active, all_active);  // layer 0 has no lookahead
  EXPECT_GT(hits, 0u);
}

TEST(Pregate, SameLossesAgreedCounters) { check({}, "ep 1"); }

TEST(Pregate, ExpertParallel) { check({"parallel.ep_size=2"}, "ep 2"); }

TEST(Pregate, Bf16) { check({"train.dtype=bf16"}, "bf16"); }

}  // namespace
}  // namespace moezero::train

namespace moezero::train {
namespace {

// Only moezero's routed expert gathers read a lookahead: with FSDP's block gather (or below
// stage 3) none is computed, so no counter moves and no gate is acquired early.
TEST(Pregate, OffWhereNothingReadsIt) {
  for (const char* extra : {"zero.moe_gather=fsdp", "zero.stage=2"}) {
    const TrainResult on = run(true, {extra});
    for (const StepLog& s : on.steps)
      for (const RankStepStats& r : s.ranks)
        EXPECT_EQ(r.pregate_predicted + r.pregate_hits + r.pregate_active, 0u) << extra;
  }
}

}  // namespace
}  // namespace moezero::train
