// Config parsing: defaults, every kind of bad input rejected with the key path and reason,
// --set overrides, byte counts with units, the JSON round trip, and docs/config.md documenting
// every key.
#include "core/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/config_choices.h"
#include "core/error.h"
#include "core/json_duplicates.h"

namespace moezero {
namespace {

// Expects parse_config(text) to throw an Error whose message contains every fragment.
void expect_rejected(const std::string& text, std::vector<std::string> fragments,
                     std::vector<std::string> overrides = {}) {
  try {
    parse_config(text, "cfg.json", overrides);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    for (const auto& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
          << "message lacks '" << f << "': " << e.what();
  }
}

TEST(Config, EmptyObjectGivesDefaults) {
  Config c = parse_config("{}", "cfg.json");
  EXPECT_EQ(c.model.vocab_size, 256);
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_EQ(c.prefetch.policy, "cost");
  EXPECT_EQ(c.shard_cache.eviction, "value");
  EXPECT_EQ(c.train.dtype, DType::F32);
}

TEST(Config, ReadsValuesOfEveryKind) {
  Config c = parse_config(R"({
    // comments are allowed
    "model": {"d_model": 64, "n_heads": 4, "n_kv_heads": 1, "num_experts": 4},
    "train": {"lr": 1e-3, "dtype": "bf16", "metrics_file": "m.jsonl", "on_nonfinite": "skip"},
    "zero": {"stage": 2, "max_live_parameters": "2MiB", "reduce_bucket_size": 5e5},
    "moe": {"normalize_top_k": false},
    "parallel": {"world_size": 4, "ep_size": 2}
  })",
                          "cfg.json");
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  EXPECT_EQ(c.train.dtype, DType::BF16);
  EXPECT_EQ(c.train.metrics_file, "m.jsonl");
  EXPECT_EQ(c.train.on_nonfinite, NonFinitePolicy::Skip);
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_EQ(c.zero.max_live_parameters, 2u << 20);
  EXPECT_EQ(c.zero.reduce_bucket_size, 500000u);
  EXPECT_FALSE(c.moe.normalize_top_k);
  EXPECT_EQ(c.parallel.ep_size, 2);
}

TEST(Config, MoeLayerKeys) {
  Config d = parse_config("{}", "cfg.json");
  EXPECT_EQ(d.model.expert_d_ff, 0);
  EXPECT_EQ(d.model.expert_width(), d.model.d_ff);  // default: the dense width
  EXPECT_EQ(d.moe.score_function, ScoreFunction::Softmax);
  EXPECT_EQ(d.moe.expert_bias_update_rate, 0.0);
  Config c = parse_config(
      R"({"model": {"d_ff": 256, "expert_d_ff": 64},
          "moe": {"score_function": "sigmoid", "expert_bias_update_rate": 0.001}})",
      "cfg.json");
  EXPECT_EQ(c.model.expert_width(), 64);
  EXPECT_EQ(c.moe.score_function, ScoreFunction::Sigmoid);
  EXPECT_DOUBLE_EQ(c.moe.expert_bias_update_rate, 0.001);
  const Config r = parse_config(config_to_json(c), "round trip");
  EXPECT_EQ(config_to_json(r), config_to_json(c));
}

TEST(Config, RejectsUnknownKeysWithPathAndHint) {
  expect_rejected(R"({"train": {"lrr": 0.1}})",
                  {"cfg.json", "unknown key 'train.lrr'", "did you mean 'train.lr'"});
  expect_rejected(R"({"trian": {}})", {"unknown section 'trian'"});
}

// JSON keeps only the last of two equal keys: a config with one is refused, naming the key's
// path and both lines (issue 29: a second "model" section silently dropped the first).
TEST(Config, RejectsDuplicateKeysWithPathAndLines) {
  expect_rejected(R"({"model": {"d_model": 64}, "model": {"n_layers": 1}})",
                  {"cfg.json", "key 'model' appears twice (lines 1 and 1)"});
  expect_rejected(
      "{\n  \"train\": {\n    \"lr\": 0.1,\n    // a comment \"lr\": 1\n"
      "    \"steps\": 3,\n    \"lr\": 0.2\n  }\n}",
      {"key 'train.lr' appears twice (lines 3 and 6)"});
  expect_rejected(
      "{\"profile\": {\"steps\": \"1\"}, /* \"x\" */\n\"data\": {\"path\": "
      "\"a\\\"b\"},\n\"data\": {}}",
      {"key 'data' appears twice (lines 2 and 3)"});
  // The same key in different objects, in strings and in comments is fine.
  EXPECT_NO_THROW(parse_config(R"({"model": {"d_model": 64}, "train": {"steps": 2},
      "data": {"path": "model"} /* "model": 1 */})",
                               "cfg.json"));
  EXPECT_FALSE(find_duplicate_key(R"([{"a": 1}, {"a": 2}, [{"b": 1, "c": {"b": 2}}]])"));
  const auto in_array = find_duplicate_key("[{\"a\": 1},\n {\"a\": 2, \"a\": 3}]");
  ASSERT_TRUE(in_array);
  EXPECT_EQ(in_array->path, "[1].a");
  EXPECT_EQ(in_array->first_line, 2);
  EXPECT_EQ(in_array->second_line, 2);
}

// A number where a file name belongs is a mistake in a file; through --set it is the text.
TEST(Config, StringKeysRefuseNumbersInFilesButNotInOverrides) {
  expect_rejected(R"({"train": {"metrics_file": 42}})",
                  {"train.metrics_file", "expected a string, got an integer"});
  EXPECT_EQ(parse_config("{}", "cfg.json", {"train.metrics_file=42"}).train.metrics_file, "42");
  EXPECT_EQ(parse_config("{}", "cfg.json", {"profile.steps=5"}).profile.steps, "5");
  EXPECT_EQ(parse_config(R"({"profile": {"steps": 5}})", "cfg.json").profile.steps, "5");
}

TEST(Config, RejectsWrongTypesAndValues) {
  expect_rejected(R"({"train": {"lr": "fast"}})", {"train.lr", "expected a number", "string"});
  expect_rejected(R"({"train": {"lr": -0.1}})", {"train.lr", "must be > 0", "-0.1"});
  expect_rejected(R"({"train": {"steps": 1.5}})", {"train.steps", "expected an integer"});
  expect_rejected(R"({"zero": {"stage": 4}})", {"zero.stage", "must be in [0, 3]", "4"});
  // prefetch.policy and shard_cache.eviction take what prefetch/ registers
  // (tests/prefetch/policy_registry_test.cpp); a registered key refuses a non-string here too.
  expect_rejected(R"({"prefetch": {"policy": 3}})", {"prefetch.policy", "expected a string"});
  expect_rejected(R"({"moe": {"normalize_top_k": 1}})", {"moe.normalize_top_k", "true or false"});
  // Keys of the network model, the baselines and the cost plan (issue 13).
  expect_rejected(R"({"zero": {"moe_gather": "magic"}})",
                  {"zero.moe_gather", "experts, leaf, fsdp", "magic"});
  expect_rejected(R"({"zero": {"grad_accum_dtype": "bf16"}})",
                  {"zero.grad_accum_dtype", "fp32, param", "bf16"});
  expect_rejected(R"({"zero": {"reshard_after_forward": "maybe"}})",
                  {"zero.reshard_after_forward", "true or false"});
  // zero.quantized_gradients (issue 27, qgZ): a bool, a stage that reduce-scatters, and the same
  // number of a group's ranks on every node (the world, and the strided EDP groups).
  expect_rejected(R"({"zero": {"quantized_gradients": 1}})",
                  {"zero.quantized_gradients", "true or false"});
  expect_rejected(R"({"zero": {"stage": 0, "quantized_gradients": true}})",
                  {"zero.quantized_gradients needs zero.stage >= 1"});
  expect_rejected(
      R"({"zero": {"quantized_gradients": true}, "parallel": {"world_size": 4},
                      "comm_emulation": {"ranks_per_node": 3}})",
      {"zero.quantized_gradients", "world{0,1,2,3} has 3 rank(s) on node 0 but 1 on node 1",
       "the same number of a group's ranks on every node"});
  expect_rejected(
      R"({"zero": {"quantized_gradients": true}, "comm_emulation": {"ranks_per_node": 3},
                      "parallel": {"world_size": 6, "ep_size": 2}, "train": {"micro_batch_size": 6},
                      "model": {"num_experts": 4}})",
      {"zero.quantized_gradients", "parallel.ep_size 2", "edp0{0,2,4} has 2 rank(s) on node 0"});
  EXPECT_TRUE(parse_config(R"({"zero": {"quantized_gradients": true}, "comm_emulation":
                               {"ranks_per_node": 2}, "parallel": {"world_size": 4, "ep_size": 2},
                               "model": {"num_experts": 4}})",
                           "cfg.json")
                  .zero.quantized_gradients);
  // Quantised weight gathers (issue 27, ZeRO++ qwZ).
  expect_rejected(R"({"zero": {"quantized_weights": "yes"}})",
                  {"zero.quantized_weights", "true or false"});
  expect_rejected(R"({"zero": {"quantization_block": 0}})",
                  {"zero.quantization_block", "must be > 0", "0"});
  expect_rejected(R"({"zero": {"quantization_block": 2.5}})",
                  {"zero.quantization_block", "expected an integer"});
  expect_rejected("{}", {"zero.quantization_block", "must be > 0", "-3"},
                  {"zero.quantization_block=-3"});
  expect_rejected(R"({"comm_emulation": {"ranks_per_node": -1}})",
                  {"comm_emulation.ranks_per_node", "must be >= 0", "-1"});
  expect_rejected(R"({"comm_emulation": {"intra_node_gbps": 10}})",
                  {"comm_emulation.intra_node_gbps", "ranks_per_node > 0"});
  expect_rejected(R"({"comm_emulation": {"nics_per_node": 2}})",
                  {"comm_emulation.nics_per_node", "ranks_per_node > 0"});
  expect_rejected(R"({"comm_emulation": {"ranks_per_node": 2, "nics_per_node": -1}})",
                  {"comm_emulation.nics_per_node", "must be >= 0", "-1"});
  expect_rejected(R"({"comm_emulation": {"ranks_per_node": 2, "intra_node_latency_us": -3}})",
                  {"comm_emulation.intra_node_latency_us", "must be >= 0", "-3"});
  expect_rejected(R"({"prefetch": {"link_gbps": -1}})", {"prefetch.link_gbps", "must be >= 0"});
  expect_rejected(R"({"zero": {"max_live_parameters": "12 parsecs"}})",
                  {"zero.max_live_parameters", "unknown unit 'parsecs'"});
  expect_rejected(R"({"zero": {"max_live_parameters": -5}})",
                  {"zero.max_live_parameters", "non-negative"});
  expect_rejected(R"({"data": {"format": "parquet"}})",
                  {"data.format", "must be one of bytes, tokens", "parquet"});
  expect_rejected(R"({"train": {"eval_every": -1}})", {"train.eval_every", "must be >= 0"});
  expect_rejected(R"({"train": {"eval_batches": 0}})", {"train.eval_batches", "must be in [1"});
  // Keys of the MoE layers (issue 17).
  expect_rejected(R"({"model": {"expert_d_ff": -1}})", {"model.expert_d_ff", "must be in [0"});
  expect_rejected(R"({"moe": {"score_function": "tanh"}})",
                  {"moe.score_function", "softmax, sigmoid", "tanh"});
  expect_rejected(R"({"moe": {"expert_bias_update_rate": -0.001}})",
                  {"moe.expert_bias_update_rate", "must be >= 0"});
  expect_rejected(R"({"train": []})", {"section 'train' must be an object"});
  expect_rejected(R"([1, 2])", {"top level must be a JSON object"});
  expect_rejected(R"({"train": {)", {"cfg.json", "not valid JSON"});
}

TEST(Config, RejectsInconsistentCombinations) {
  expect_rejected(R"({"train": {"eval_every": 5}})",
                  {"train.eval_every (5) needs held-out data", "data.val_path", "val_fraction"});
  expect_rejected(R"({"data": {"format": "tokens"}})", {"data.format \"tokens\" needs data.path"});
  expect_rejected(R"({"model": {"d_model": 100, "n_heads": 3}})",
                  {"model.d_model (100)", "model.n_heads (3)"});
  expect_rejected(R"({"model": {"n_heads": 4, "n_kv_heads": 3}})", {"model.n_kv_heads (3)"});
  expect_rejected(R"({"model": {"d_model": 12, "n_heads": 4, "n_kv_heads": 2}})",
                  {"head dim 3", "even"});
  expect_rejected(R"({"parallel": {"world_size": 6, "ep_size": 4}})",
                  {"parallel.ep_size (4)", "parallel.world_size (6)"});
  expect_rejected(R"({"model": {"num_experts": 6}, "parallel": {"world_size": 4, "ep_size": 4}})",
                  {"model.num_experts (6)", "parallel.ep_size (4)"});
  expect_rejected(R"({"model": {"num_experts": 2, "top_k": 3}})", {"model.top_k (3)"});
  expect_rejected(R"({"zero": {"stage": 2, "quantized_weights": true}})",
                  {"zero.quantized_weights needs zero.stage = 3", "got 2"});
  expect_rejected(R"({"train": {"micro_batch_size": 10}, "parallel": {"world_size": 4}})",
                  {"train.micro_batch_size (10)", "parallel.world_size (4)"});
}

TEST(Config, OverridesApplyBeforeChecks) {
  Config c = parse_config(
      "{}", "cfg.json",
      {"train.lr=0.5", "train.dtype=bf16", "zero.stage=1", "train.metrics_file=out.jsonl"});
  EXPECT_DOUBLE_EQ(c.train.lr, 0.5);
  EXPECT_EQ(c.train.dtype, DType::BF16);
  EXPECT_EQ(c.zero.stage, 1);
  EXPECT_EQ(c.train.metrics_file, "out.jsonl");
  expect_rejected("{}", {"--set", "section.key=value"}, {"train.lr"});
  expect_rejected("{}", {"--set", "must be section.key"}, {"lr=1"});
  expect_rejected("{}", {"train.lr", "expected a number"}, {"train.lr=abc"});
  expect_rejected("{}", {"unknown key 'zero.stag'"}, {"zero.stag=1"});
}

TEST(Config, ByteCounts) {
  EXPECT_EQ(parse_bytes("4096", "x"), 4096u);
  EXPECT_EQ(parse_bytes("64MiB", "x"), 64u << 20);
  EXPECT_EQ(parse_bytes("1.5GB", "x"), 1500000000u);
  EXPECT_EQ(parse_bytes("2 KiB", "x"), 2048u);
  EXPECT_THROW(parse_bytes("MiB", "x"), Error);
  EXPECT_THROW(parse_bytes("0.5B", "x"), Error);
}

// "auto" sizes: shard_cache.capacity_bytes and prefetch.budget_bytes default to it, accept it by
// name (file or --set) and write it back; a byte count replaces it; a key without an "auto"
// default refuses it as a byte count, naming the key.
TEST(Config, AutoByteCounts) {
  const Config d = parse_config("{}", "d");
  EXPECT_EQ(d.shard_cache.capacity_bytes, kAutoBytes);
  EXPECT_EQ(d.prefetch.budget_bytes, kAutoBytes);
  EXPECT_EQ(d.zero.keep_dense_bytes, kAutoBytes);
  const Config a = parse_config(R"({"shard_cache": {"capacity_bytes": "auto"}})", "a",
                                {"prefetch.budget_bytes=auto"});
  EXPECT_EQ(a.shard_cache.capacity_bytes, kAutoBytes);
  EXPECT_EQ(a.prefetch.budget_bytes, kAutoBytes);
  EXPECT_NE(config_to_json(a).find(R"("capacity_bytes": "auto")"), std::string::npos);
  EXPECT_EQ(config_to_json(parse_config(config_to_json(a), "b")), config_to_json(a));
  const Config n = parse_config("{}", "n", {"shard_cache.capacity_bytes=32MiB"});
  EXPECT_EQ(n.shard_cache.capacity_bytes, uint64_t{32} << 20);
  expect_rejected("{}", {"zero.reduce_bucket_size"}, {"zero.reduce_bucket_size=auto"});
  EXPECT_EQ(parse_config("{}", "k", {"zero.keep_dense_bytes=0"}).zero.keep_dense_bytes, 0u);
  expect_rejected(R"({"shard_cache": {"capacity_bytes": "automatic"}})",
                  {"shard_cache.capacity_bytes"});
}

TEST(Config, JsonRoundTripIsExact) {
  Config a = parse_config(
      R"({"train": {"lr": 0.00123, "dtype": "bf16"}, "shard_cache": {"eviction": "lru"}})", "a");
  Config b = parse_config(config_to_json(a), "b");
  EXPECT_EQ(config_to_json(a), config_to_json(b));
  EXPECT_EQ(b.shard_cache.eviction, "lru");
  EXPECT_DOUBLE_EQ(b.train.lr, 0.00123);
}

// The values a layer above core/ registers for a key (core/config_choices.h): kept in order, once.
TEST(Config, ChoicesRegistryKeepsOrderAndRefusesASecondRegistration) {
  register_config_choices("test.only_here", {{"b", "the second letter"}, {"a", "the first"}});
  EXPECT_EQ(config_choice_names("test.only_here"), "b, a");
  EXPECT_EQ(config_choices("test.only_here").at(0).doc, "the second letter");
  EXPECT_THROW(register_config_choices("test.only_here", {{"c", "again"}}), Error);
  EXPECT_THROW(register_config_choices("test.nothing", {}), Error);
  EXPECT_TRUE(config_choices("test.never_registered").empty());
}

TEST(Config, LoadNamesUnreadableFile) {
  try {
    load_config("/nonexistent/dir/c.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/c.json"), std::string::npos);
  }
}

TEST(Config, DocsDocumentEveryKey) {
  std::ifstream in(MOEZERO_SOURCE_DIR "/docs/config.md");
  ASSERT_TRUE(in) << "docs/config.md not found";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const auto& k : config_reference())
    EXPECT_NE(doc.find("`" + k.path + "`"), std::string::npos)
        << "docs/config.md does not document config key " << k.path
        << " (run `moezero config --doc` for its row)";
}

}  // namespace
}  // namespace moezero
