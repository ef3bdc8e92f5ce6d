// TrainOptions::stop_flag (SIGTERM / SIGINT through `moezero train`, train/stop_signal.h): the
// ranks agree on the stop through the step's counters exchange, so all stop after the same
// step even when only one rank saw the flag in time; a checkpoint of that step is saved when
// train.save_dir is set; a stop at the last step is a normal end.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>

#include "core/config.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

namespace moezero::train {
namespace {

namespace fs = std::filesystem;

Config tiny(std::vector<std::string> overrides) {
  std::vector<std::string> o = {
      "model.d_model=32",         "model.n_layers=2",      "model.n_heads=4",
      "model.n_kv_heads=2",       "model.d_ff=48",         "model.seq_len=16",
      "model.num_experts=4",      "parallel.world_size=2", "parallel.ep_size=2",
      "train.micro_batch_size=4", "train.steps=6",         "train.warmup_steps=1",
      "comm.timeout_s=60"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return parse_config("{}", "tiny", o);
}

TEST(Stop, AFlagSetBeforeTheRunStopsAfterStepOneAndSaves) {
  const fs::path dir = fs::path(::testing::TempDir()) / "stop_saved";
  fs::remove_all(dir);
  std::atomic<int> flag{15};
  TrainOptions opt;
  opt.stop_flag = &flag;
  const TrainResult r = train(tiny({"train.save_dir=" + dir.string()}), opt);
  EXPECT_EQ(r.stop_signal, 15);
  EXPECT_EQ(r.stopped_after_step, 1);
  EXPECT_TRUE(r.stop_saved);
  ASSERT_EQ(r.steps.size(), 1u);
  std::ifstream latest(dir / "latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "step_00000001");
}

// Rank 1 raises the flag during step 3's backward; rank 0 may have read it before: the
// exchange makes both stop after step 3 (without it, rank 0 would go on alone and the run
// would fail at its next collective).
TEST(Stop, TheRanksAgreeOnTheStep) {
  std::atomic<int> flag{0};
  TrainOptions opt;
  opt.stop_flag = &flag;
  opt.grad_hook = [&](const GradHookInfo& gi) {
    if (gi.rank == 1 && gi.step == 3) flag.store(2);
  };
  const TrainResult r = train(tiny({}), opt);
  EXPECT_EQ(r.stop_signal, 2);
  EXPECT_EQ(r.stopped_after_step, 3);
  EXPECT_FALSE(r.stop_saved);  // no train.save_dir
  EXPECT_EQ(r.steps.size(), 3u);
}

TEST(Stop, NoFlagRunsToTheEnd) {
  std::atomic<int> flag{0};
  TrainOptions opt;
  opt.stop_flag = &flag;
  const TrainResult r = train(tiny({}), opt);
  EXPECT_EQ(r.stop_signal, 0);
  EXPECT_EQ(r.steps.size(), 6u);
}

TEST(Stop, AStopAtTheLastStepIsANormalEnd) {
  std::atomic<int> flag{0};
  TrainOptions opt;
  opt.stop_flag = &flag;
  opt.grad_hook = [&](const GradHookInfo& gi) {
    if (gi.step == 6) flag.store(15);
  };
  const TrainResult r = train(tiny({}), opt);
  EXPECT_EQ(r.stop_signal, 0);
  EXPECT_EQ(r.steps.size(), 6u);
}

TEST(Stop, SignalNames) {
  EXPECT_STREQ(signal_name(15), "SIGTERM");
  EXPECT_STREQ(signal_name(2), "SIGINT");
  EXPECT_EQ(kExitStopped, 3);
}

}  // namespace
}  // namespace moezero::train
