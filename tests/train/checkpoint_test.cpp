// Sharded checkpoints (train/checkpoint.h): resume is bit-exact on the same layout (world 2 with
// EP 2, ZeRO-3, frequency prefetch and the shard cache; world 1 in bf16 with accumulation),
// resumes at other world sizes / EP sizes / stages to float rounding, an interrupted save
// leaves the previous checkpoint loadable, bad checkpoints are refused naming the file and
// the problem, old checkpoints are pruned, and load_full_params assembles every group.
#include "train/checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/checkpoint_io.h"
#include "train/trainer.h"

namespace moezero::train {
namespace {

namespace fs = std::filesystem;

// A tiny MoE run in which the frequency model drives prefetch and the shard cache keeps
// experts (both change only speed, never the math; the frequency model is state to resume).
Config ckpt_config(const std::string& save_dir, std::vector<std::string> overrides = {}) {
  std::vector<std::string> o = {"model.d_model=32",
                                "model.n_layers=2",
                                "model.n_heads=4",
                                "model.n_kv_heads=2",
                                "model.d_ff=48",
                                "model.seq_len=16",
                                "model.num_experts=4",
                                "model.top_k=2",
                                "moe.aux_loss_coef=0.01",
                                "moe.router_jitter=0.05",
                                "train.micro_batch_size=12",
                                "train.steps=6",
                                "train.warmup_steps=2",
                                "train.lr=0.01",
                                "train.min_lr=0.001",
                                "parallel.world_size=2",
                                "parallel.ep_size=2",
                                "zero.stage=3",
                                "zero.param_persistence_threshold=64",
                                "zero.reduce_bucket_size=20000",
                                "zero.prefetch_bucket_size=30000",
                                "prefetch.policy=frequency",
                                "prefetch.min_probability=0.5",
                                "prefetch.budget_bytes=8000",
                                "shard_cache.capacity_bytes=20000",
                                "comm.timeout_s=60",
                                "train.save_dir=" + save_dir};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return parse_config("{}", "checkpoint test", o);
}

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "moezero_ckpt_" + name;
  fs::remove_all(d);
  return d;
}

TrainResult run(const Config& c, const std::string& resume = "", int64_t stop_at = 0) {
  TrainOptions opt;
  opt.collect_params = true;
  opt.resume_from = resume;
  opt.stop_at_step = stop_at;
  return train(c, opt);
}

std::string latest_of(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  std::string s;
  in >> s;
  return s;
}

// Step s of `got` equals step `offset + s` of `ref`, bit for bit, counters included.
void expect_steps_identical(const TrainResult& ref, size_t offset, const TrainResult& got) {
  ASSERT_LE(offset + got.steps.size(), ref.steps.size());
  for (size_t s = 0; s < got.steps.size(); ++s) {
    const StepLog& a = ref.steps[offset + s];
    const StepLog& b = got.steps[s];
    const std::string what = "step " + std::to_string(a.step);
    EXPECT_EQ(b.step, a.step) << what;
    EXPECT_EQ(b.loss, a.loss) << what;
    EXPECT_EQ(b.grad_norm, a.grad_norm) << what;
    EXPECT_EQ(b.lr, a.lr) << what;
    EXPECT_EQ(b.aux_loss, a.aux_loss) << what;
    EXPECT_EQ(b.tokens_per_expert, a.tokens_per_expert) << what;
    ASSERT_EQ(b.ranks.size(), a.ranks.size());
    for (size_t r = 0; r < a.ranks.size(); ++r) {  // prefetch and cache behave identically
      EXPECT_EQ(b.ranks[r].gathered_bytes, a.ranks[r].gathered_bytes) << what << " rank " << r;
      EXPECT_EQ(b.ranks[r].prefetch_hits, a.ranks[r].prefetch_hits) << what << " rank " << r;
      EXPECT_EQ(b.ranks[r].prefetch_misses, a.ranks[r].prefetch_misses) << what << " rank " << r;
      EXPECT_EQ(b.ranks[r].cache_hits, a.ranks[r].cache_hits) << what << " rank " << r;
    }
  }
}

void expect_params_identical(const checkpoint::FullParams& a, const checkpoint::FullParams& b) {
  ASSERT_EQ(a.groups.size(), b.groups.size());
  for (size_t g = 0; g < a.groups.size(); ++g) {
    EXPECT_EQ(a.groups[g].name, b.groups[g].name);
    EXPECT_TRUE(a.groups[g].data == b.groups[g].data) << "group " << a.groups[g].name;
  }
}

// Resumed at another layout, sums are taken in other orders: the tolerances of the trainer's
// world-size equivalence tests (losses 1e-5 relative, gradient norms 1e-4, parameters 1e-5
// with rare outliers: Adam normalises gradients that are pure rounding noise).
void expect_close(const TrainResult& ref, size_t offset, const TrainResult& got,
                  const checkpoint::FullParams& pa, const checkpoint::FullParams& pb,
                  const std::string& what) {
  ASSERT_EQ(offset + got.steps.size(), ref.steps.size()) << what;
  for (size_t s = 0; s < got.steps.size(); ++s) {
    const StepLog& a = ref.steps[offset + s];
    EXPECT_EQ(got.steps[s].step, a.step) << what;
    EXPECT_NEAR(got.steps[s].loss, a.loss, 1e-5 * a.loss) << what << " step " << a.step;
    EXPECT_NEAR(got.steps[s].grad_norm, a.grad_norm, 1e-4 * a.grad_norm)
        << what << " step " << a.step;
    EXPECT_EQ(got.steps[s].lr, a.lr) << what << " step " << a.step;
  }
  ASSERT_EQ(pa.groups.size(), pb.groups.size());
  size_t total = 0, off = 0;
  for (size_t g = 0; g < pa.groups.size(); ++g)
    for (size_t i = 0; i < pa.groups[g].data.size(); ++i, ++total) {
      const double x = pa.groups[g].data[i], y = pb.groups[g].data[i];
      off += std::abs(x - y) > 1e-5 * (1.0 + std::abs(x));
    }
  EXPECT_LE(off, total / 10000 + 1) << what << ": " << off << " of " << total << " differ";
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Checkpoint, ResumeAtWorld2IsBitExact) {
  const std::string a = fresh_dir("w2_full"), b = fresh_dir("w2_split");
  const TrainResult full = run(ckpt_config(a));
  ASSERT_EQ(full.steps.size(), 6u);
  const TrainResult first = run(ckpt_config(b), "", 3);
  ASSERT_EQ(first.steps.size(), 3u);
  EXPECT_EQ(latest_of(b), "step_00000003");
  const TrainResult second = run(ckpt_config(b), b);
  ASSERT_EQ(second.steps.size(), 3u);
  expect_steps_identical(full, 0, first);
  expect_steps_identical(full, 3, second);
  EXPECT_EQ(second.frequency_models, full.frequency_models);  // the prefetcher's state
  EXPECT_EQ(latest_of(b), "step_00000006");
  const checkpoint::FullParams pa = checkpoint::load_full_params(a);
  const checkpoint::FullParams pb = checkpoint::load_full_params(b);
  EXPECT_EQ(pa.step, 6);
  EXPECT_EQ(pb.step, 6);
  expect_params_identical(pa, pb);
  // A specific step directory resumes too (here: step 3 again, to the same end).
  const TrainResult again = run(ckpt_config(fresh_dir("w2_again")), b + "/step_00000003");
  expect_steps_identical(full, 3, again);
}

TEST(Checkpoint, ResumeAtWorld1Bf16WithAccumulationIsBitExact) {
  const std::vector<std::string> o = {"parallel.world_size=1", "parallel.ep_size=1",
                                      "train.dtype=bf16", "train.grad_accum_steps=2"};
  const std::string a = fresh_dir("w1_full"), b = fresh_dir("w1_split");
  const TrainResult full = run(ckpt_config(a, o));
  run(ckpt_config(b, o), "", 2);
  const TrainResult second = run(ckpt_config(b, o), b);
  ASSERT_EQ(second.steps.size(), 4u);
  expect_steps_identical(full, 2, second);
  EXPECT_TRUE(second.params == full.params);  // world 1: rank 0 holds every group
  expect_params_identical(checkpoint::load_full_params(a), checkpoint::load_full_params(b));
}

TEST(Checkpoint, DenseModelAtWorld3Stage2ResumesBitExact) {
  const std::vector<std::string> o = {"model.num_experts=0", "parallel.world_size=3",
                                      "parallel.ep_size=1", "zero.stage=2"};
  const std::string a = fresh_dir("dense_full"), b = fresh_dir("dense_split");
  const TrainResult full = run(ckpt_config(a, o));
  run(ckpt_config(b, o), "", 4);
  EXPECT_FALSE(fs::exists(b + "/step_00000004/frequency_model.json"));  // no experts
  const TrainResult second = run(ckpt_config(b, o), b);
  expect_steps_identical(full, 4, second);
  EXPECT_TRUE(second.params == full.params);
}

TEST(Checkpoint, ResumesAtOtherWorldSizesEpSizesAndStages) {
  const std::string a = fresh_dir("rs_full"), b = fresh_dir("rs_split");
  const TrainResult full = run(ckpt_config(a));
  run(ckpt_config(b), "", 3);
  const checkpoint::FullParams pa = checkpoint::load_full_params(a);
  struct Case {
    int world, ep, stage;
  };
  for (Case c : {Case{4, 2, 3}, Case{4, 4, 1}, Case{1, 1, 3}, Case{2, 1, 0}}) {
    const std::string what = "world " + std::to_string(c.world) + " ep " + std::to_string(c.ep) +
                             " stage " + std::to_string(c.stage);
    const std::string d =
        fresh_dir("rs_" + std::to_string(c.world) + std::to_string(c.ep) + std::to_string(c.stage));
    const TrainResult r = run(ckpt_config(d, {"parallel.world_size=" + std::to_string(c.world),
                                              "parallel.ep_size=" + std::to_string(c.ep),
                                              "zero.stage=" + std::to_string(c.stage)}),
                              b);
    expect_close(full, 3, r, pa, checkpoint::load_full_params(d), what);
    // The frequency model depends only on the agreed counts: the same on every layout.
    ASSERT_FALSE(r.frequency_models.empty());
    const auto fa = nlohmann::json::parse(full.frequency_models[0]);
    const auto fb = nlohmann::json::parse(r.frequency_models[0]);
    EXPECT_EQ(fa["updates"], fb["updates"]) << what;
  }
}

TEST(Checkpoint, InterruptedSaveLeavesThePreviousCheckpointIntact) {
  const std::string a = fresh_dir("int_full"), b = fresh_dir("int_split");
  const TrainResult full = run(ckpt_config(a));
  run(ckpt_config(b), "", 2);
  ASSERT_EQ(latest_of(b), "step_00000002");
  TrainOptions opt;
  opt.resume_from = b;
  opt.stop_at_step = 4;
  opt.save_fault = {1, 1000};  // rank 1's file fails after 1000 bytes
  const std::string err = error_of([&] { train(ckpt_config(b), opt); });
  EXPECT_NE(err.find("checkpoint save of step 4 failed on rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("injected fault"), std::string::npos) << err;
  EXPECT_NE(err.find("the previous checkpoint and 'latest' are intact"), std::string::npos) << err;
  EXPECT_EQ(latest_of(b), "step_00000002");
  EXPECT_FALSE(fs::exists(b + "/step_00000004"));
  EXPECT_EQ(checkpoint::load_full_params(b).step, 2);
  const TrainResult resumed = run(ckpt_config(b), b);  // the interrupted save is redone
  expect_steps_identical(full, 2, resumed);
  EXPECT_EQ(latest_of(b), "step_00000006");
  EXPECT_FALSE(fs::exists(b + "/.tmp_step_00000004"));
  // A fault on rank 0 (the manifest writer) while writing its own rank file: the same.
  opt.resume_from = b + "/step_00000002";
  opt.save_fault = {0, 10};
  opt.stop_at_step = 3;
  const std::string err0 = error_of([&] { train(ckpt_config(b), opt); });
  EXPECT_NE(err0.find("failed on rank 0"), std::string::npos) << err0;
  EXPECT_EQ(latest_of(b), "step_00000006");
}

// A first save that fails does not claim an earlier checkpoint that does not exist.
TEST(Checkpoint, FailedFirstSaveSaysNoCheckpointExists) {
  const std::string d = fresh_dir("first_save_fails");
  TrainOptions opt;
  opt.stop_at_step = 2;
  opt.save_fault = {1, 1000};
  const std::string err = error_of([&] { train(ckpt_config(d), opt); });
  EXPECT_NE(err.find("checkpoint save of step 2 failed on rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("no earlier checkpoint exists in train.save_dir"), std::string::npos) << err;
  EXPECT_EQ(err.find("intact"), std::string::npos) << err;
}

// Saving a step that already has a complete directory (a resume from an older checkpoint)
// replaces that directory whole (swapped in where the file system allows), leaves no
// temporary directory, and the new one resumes like the old one.
TEST(Checkpoint, SavingAnExistingStepReplacesItWhole) {
  const std::string d = fresh_dir("replace");
  run(ckpt_config(d, {"train.save_every=1"}), "", 4);
  ASSERT_EQ(latest_of(d), "step_00000004");
  std::ofstream(d + "/step_00000004/old_marker") << "from the first save\n";
  run(ckpt_config(d, {"train.save_every=1"}), d + "/step_00000003", 4);
  EXPECT_EQ(latest_of(d), "step_00000004");
  EXPECT_FALSE(fs::exists(d + "/step_00000004/old_marker")) << "the old directory stayed";
  EXPECT_TRUE(fs::exists(d + "/step_00000004/manifest.json"));
  for (const auto& e : fs::directory_iterator(d))
    EXPECT_NE(e.path().filename().string().rfind(".tmp_", 0), 0u) << e.path();
  EXPECT_EQ(checkpoint::load_full_params(d).step, 4);
  const TrainResult a = run(ckpt_config(d), d);
  const TrainResult b = run(ckpt_config(fresh_dir("replace_ref")), "", 0);
  expect_steps_identical(b, 4, a);
}

TEST(CheckpointIo, ReplaceDirMovesOrSwapsInTheNewDirectory) {
  const std::string d = fresh_dir("replace_dir");
  fs::create_directories(d + "/new");
  std::ofstream(d + "/new/x") << "new";
  EXPECT_FALSE(checkpoint::io::replace_dir(d + "/new", d + "/to")) << "nothing to replace";
  EXPECT_TRUE(fs::exists(d + "/to/x"));
  EXPECT_FALSE(fs::exists(d + "/new"));
  fs::create_directories(d + "/newer");
  std::ofstream(d + "/newer/y") << "newer";
  const bool atomic = checkpoint::io::replace_dir(d + "/newer", d + "/to");
  RecordProperty("atomic_swap", atomic ? "yes" : "no (file system without RENAME_EXCHANGE)");
  EXPECT_TRUE(fs::exists(d + "/to/y"));
  EXPECT_FALSE(fs::exists(d + "/to/x")) << "the old directory's content stayed";
  EXPECT_FALSE(fs::exists(d + "/newer"));
}

TEST(Checkpoint, KeepsTheNewestCheckpoints) {
  const std::string d = fresh_dir("keep");
  run(ckpt_config(d, {"train.save_every=1", "train.keep_checkpoints=2"}));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step_00000005", "step_00000006"}));
}

TEST(Checkpoint, LoadFullParamsAssemblesEveryGroup) {
  const std::string d = fresh_dir("full");
  // EP 1: rank 0 of the trainer holds every group, so its parameters are the reference.
  const TrainResult r = run(ckpt_config(d, {"parallel.ep_size=1", "train.steps=2"}));
  const checkpoint::FullParams p = checkpoint::load_full_params(d);
  EXPECT_EQ(p.step, 2);
  EXPECT_EQ(p.config.model.num_experts, 4);
  ASSERT_EQ(p.groups.size(), r.group_names.size());
  for (size_t g = 0; g < p.groups.size(); ++g) {
    EXPECT_EQ(p.groups[g].name, r.group_names[g]);
    EXPECT_EQ(p.groups[g].numel, GroupLayout(p.groups[g].spec).numel());
    EXPECT_TRUE(p.groups[g].data == r.params[g]) << p.groups[g].name;
  }
  const auto manifest = nlohmann::json::parse(std::ifstream(d + "/step_00000002/manifest.json"));
  EXPECT_EQ(manifest["format_version"], 1);
  EXPECT_EQ(manifest["world_size"], 2);
  EXPECT_EQ(manifest["zero_stage"], 3);
  EXPECT_EQ(manifest["dtype"], "f32");
}

// ---- Refusals: each names the file and the problem --------------------------------------

class CheckpointRefusal : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    good_ = fresh_dir("good");
    run(ckpt_config(good_, {"train.steps=2"}));
  }
  // A copy of the good checkpoint's step directory to damage.
  std::string copy(const std::string& name) {
    const std::string d = fresh_dir("bad_" + name);
    fs::create_directories(d);
    fs::copy(good_ + "/step_00000002", d, fs::copy_options::recursive);
    return d;
  }
  std::string resume_error(const std::string& dir, std::vector<std::string> o = {}) {
    o.push_back("train.steps=3");
    return error_of([&] { run(ckpt_config(fresh_dir("bad_out"), o), dir); });
  }
  static std::string good_;
};
std::string CheckpointRefusal::good_;

void expect_has(const std::string& err, const std::string& what) {
  EXPECT_NE(err.find(what), std::string::npos) << "expected '" << what << "' in: " << err;
}

TEST_F(CheckpointRefusal, CorruptFile) {
  const std::string d = copy("corrupt");
  {
    std::fstream f(d + "/rank_00001.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(200);
    f.write(&c, 1);
  }
  const std::string err = resume_error(d);
  expect_has(err, "rank_00001.bin': checksum mismatch");
  expect_has(error_of([&] { checkpoint::load_full_params(d); }),
             "rank_00001.bin': checksum mismatch");
}

TEST_F(CheckpointRefusal, CorruptFileIsRefusedByConsolidation) {
  const std::string d = copy("corrupt_header");
  {
    std::fstream f(d + "/rank_00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);  // a header byte: no shard covers it
    f.put('x');
  }
  expect_has(error_of([&] { checkpoint::load_full_params(d); }),
             "rank_00000.bin': checksum mismatch");
  expect_has(resume_error(d), "rank_00000.bin': the header is not that of rank 0");
}

TEST_F(CheckpointRefusal, TruncatedFile) {
  const std::string d = copy("truncated");
  fs::resize_file(d + "/rank_00000.bin", fs::file_size(d + "/rank_00000.bin") - 10);
  expect_has(resume_error(d), "rank_00000.bin' is truncated");
}

TEST_F(CheckpointRefusal, MissingRankFile) {
  const std::string d = copy("missing");
  fs::remove(d + "/rank_00001.bin");
  expect_has(resume_error(d), "rank_00001.bin' is missing");
}

TEST_F(CheckpointRefusal, AnotherModelShape) {
  const std::string err = resume_error(good_, {"model.d_ff=64"});
  expect_has(err, "manifest.json' was saved by another model: model.d_ff is 48 there and 64");
}

TEST_F(CheckpointRefusal, UnknownFormatVersion) {
  const std::string d = copy("version");
  nlohmann::json m = nlohmann::json::parse(std::ifstream(d + "/manifest.json"));
  m["format_version"] = 99;
  std::ofstream(d + "/manifest.json") << m.dump();
  expect_has(resume_error(d), "manifest.json': unknown format_version 99");
}

TEST_F(CheckpointRefusal, NothingLeftToTrainOrInitFromBesides) {
  expect_has(error_of([&] { run(ckpt_config(fresh_dir("bad_out"), {"train.steps=2"}), good_); }),
             "is after step 2: nothing left to train up to step 2 (raise train.steps");
  expect_has(resume_error(good_, {"train.init_from=/some/hf_dir"}),
             "train.init_from (/some/hf_dir) and a resume from");
}

TEST_F(CheckpointRefusal, DirectoryWithoutCheckpoint) {
  const std::string d = fresh_dir("empty");
  fs::create_directories(d);
  expect_has(resume_error(d), "no checkpoint in '" + d + "'");
  std::ofstream(d + "/latest") << "step_00000009\n";
  expect_has(resume_error(d), "names 'step_00000009', but");
  expect_has(resume_error(d + "/nonexistent"), "is not a directory");
}

}  // namespace
}  // namespace moezero::train
