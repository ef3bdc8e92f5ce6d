// Qwen2-MoE export and import (hf/hf_qwen2_moe.h): config.json fields, the refusals of what the
// format cannot hold, tensor names, a trained model read back bit for bit and scored like our
// evaluation, train.init_from with and without q/k/v biases, and the refusals of the reader and
// of init_from naming the key. (transformers itself loads these exports in
// hf_transformers_test.py.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hf/hf_export.h"
#include "hf/hf_score.h"
#include "train/data.h"
#include "train/trainer.h"

namespace moezero::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("moezero_qwen2_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A tiny Qwen2-MoE: 2 layers, layer 0 dense (width 48) and layer 1 MoE (moe_every 2) with 4
// experts of width 24, top-2 with raw top-k weights, 2 gated shared experts of width 8 (one of
// width 16 in the file), q/k/v biases; world 2 with EP 2.
Config qwen(const std::vector<std::string>& more = {}) {
  std::vector<std::string> o = {"model.d_model=32",
                                "model.d_ff=48",
                                "model.n_layers=2",
                                "model.n_heads=4",
                                "model.n_kv_heads=2",
                                "model.seq_len=16",
                                "model.num_experts=4",
                                "model.top_k=2",
                                "model.expert_d_ff=24",
                                "model.moe_every=2",
                                "model.num_shared_experts=2",
                                "model.shared_expert_d_ff=8",
                                "model.shared_expert_gate=true",
                                "model.qkv_bias=true",
                                "moe.normalize_top_k=false",
                                "train.steps=4",
                                "train.micro_batch_size=4",
                                "train.warmup_steps=1",
                                "train.lr=0.01",
                                "parallel.world_size=2",
                                "parallel.ep_size=2",
                                "train.log_every=100"};
  o.insert(o.end(), more.begin(), more.end());
  return parse_config("{}", "<test>", o);
}

std::vector<GroupValues> as_groups(const train::TrainResult& r) {
  std::vector<GroupValues> g;
  for (size_t i = 0; i < r.params.size(); ++i) g.push_back({r.group_names[i], r.params[i]});
  return g;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "<no error>";
}

train::TrainResult trained(const Config& cfg) {
  train::TrainOptions opt;
  opt.collect_params = true;
  return train::train(cfg, opt);
}

TEST(HfQwen2Moe, ConfigJsonHasQwen2MoeFields) {
  const Config cfg = qwen({"moe.aux_loss_coef=0.02"});
  ASSERT_EQ(hf_architecture(cfg), HfArchitecture::Qwen2Moe);
  const json j = json::parse(hf_config_json(cfg, SafetensorsDType::F32));
  EXPECT_EQ(j["architectures"], json::array({"Qwen2MoeForCausalLM"}));
  EXPECT_EQ(j["model_type"], "qwen2_moe");
  EXPECT_EQ(j["intermediate_size"], 48);  // the dense layers'
  EXPECT_EQ(j["moe_intermediate_size"], 24);
  EXPECT_EQ(j["shared_expert_intermediate_size"], 16);  // 2 x 8 as one expert
  EXPECT_EQ(j["num_experts"], 4);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_EQ(j["decoder_sparse_step"], 2);
  EXPECT_EQ(j["norm_topk_prob"], false);
  EXPECT_EQ(j["router_aux_loss_coef"], 0.02);
  EXPECT_EQ(j["use_sliding_window"], false);
  EXPECT_TRUE(j["sliding_window"].is_null());
  EXPECT_EQ(json::parse(hf_config_json(qwen({"moe.normalize_top_k=true"}),
                                       SafetensorsDType::F32))["norm_topk_prob"],
            true);
  // A dense model with q/k/v biases: Qwen2-MoE without experts (transformers makes every layer
  // a dense MLP then).
  const Config dense = qwen({"model.num_experts=0", "model.num_shared_experts=0",
                             "parallel.ep_size=1", "model.shared_expert_gate=false"});
  ASSERT_EQ(hf_architecture(dense), HfArchitecture::Qwen2Moe);
  EXPECT_EQ(json::parse(hf_config_json(dense, SafetensorsDType::F32))["num_experts"], 0);
}

TEST(HfQwen2Moe, WhatTheFormatCannotHoldIsRefusedNamingTheReason) {
  auto refusal = [](const std::vector<std::string>& o) {
    return error_of([&] { hf_architecture(qwen(o)); });
  };
  std::string e = refusal({"model.shared_expert_gate=false"});
  EXPECT_NE(e.find("model.shared_expert_gate = false: Qwen2MoeForCausalLM always scales its "
                   "shared expert"),
            std::string::npos)
      << e;
  e = refusal({"moe.score_function=sigmoid"});
  EXPECT_NE(e.find("moe.score_function = sigmoid: Qwen2MoeForCausalLM routes with softmax"),
            std::string::npos)
      << e;
  e = refusal({"moe.expert_bias_update_rate=0.01"});
  EXPECT_NE(e.find("moe.expert_bias_update_rate > 0: the experts' selection bias has no place in "
                   "Qwen2MoeForCausalLM"),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << "one line";
  // Export refuses before it writes anything.
  const fs::path dir = temp_dir("refused");
  EXPECT_NE(error_of([&] {
              export_hf(qwen({"model.shared_expert_gate=false"}), {}, (dir / "x").string());
            }).find("model.shared_expert_gate = false"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "x"));
}

TEST(HfQwen2Moe, TensorNamesAreQwen2MoesInTheMoeBlockOnly) {
  const auto a = HfArchitecture::Qwen2Moe;
  EXPECT_EQ(hf_tensor_name(a, "model.layers.1.block_sparse_moe.gate.weight"),
            "model.layers.1.mlp.gate.weight");
  EXPECT_EQ(hf_tensor_name(a, "model.layers.1.block_sparse_moe.experts.3.w1.weight"),
            "model.layers.1.mlp.experts.3.gate_proj.weight");
  EXPECT_EQ(hf_tensor_name(a, "model.layers.1.block_sparse_moe.experts.3.w2.weight"),
            "model.layers.1.mlp.experts.3.down_proj.weight");
  EXPECT_EQ(hf_tensor_name(a, "model.layers.1.block_sparse_moe.experts.3.w3.weight"),
            "model.layers.1.mlp.experts.3.up_proj.weight");
  EXPECT_EQ(hf_tensor_name(a, "model.layers.1.block_sparse_moe.shared_expert.up_proj.weight"),
            "model.layers.1.mlp.shared_expert.up_proj.weight");
  EXPECT_EQ(hf_tensor_name(a, "model.layers.1.block_sparse_moe.shared_expert_gate.weight"),
            "model.layers.1.mlp.shared_expert_gate.weight");
  EXPECT_EQ(hf_tensor_name(a, "model.layers.0.mlp.gate_proj.weight"),
            "model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(hf_tensor_name(a, "model.layers.0.self_attn.q_proj.bias"),
            "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(hf_tensor_name(HfArchitecture::Mixtral,
                           "model.layers.1.block_sparse_moe.experts.3.w1.weight"),
            "model.layers.1.block_sparse_moe.experts.3.w1.weight");
}

TEST(HfQwen2Moe, TrainedModelRoundTripsAndScoresLikeOurEvaluation) {
  const Config cfg = qwen();
  const train::TrainResult r = trained(cfg);
  const std::vector<GroupValues> groups = as_groups(r);
  const fs::path dir = temp_dir("trained");
  export_hf(cfg, groups, dir.string());

  const HfModel hf = read_hf_dir(dir.string());
  EXPECT_EQ(hf.arch, HfArchitecture::Qwen2Moe);
  EXPECT_TRUE(hf.model.qkv_bias);
  EXPECT_EQ(hf.model.num_shared_experts, 1);
  EXPECT_EQ(hf.model.shared_expert_d_ff, 16);
  EXPECT_TRUE(hf.model.shared_expert_gate);
  EXPECT_EQ(hf.model.expert_d_ff, 24);
  EXPECT_EQ(hf.model.d_ff, 48);
  EXPECT_EQ(hf.model.moe_every, 2);
  EXPECT_FALSE(hf.moe.normalize_top_k);
  ASSERT_NE(hf.weights.find("model.layers.1.mlp.experts.2.down_proj.weight"), nullptr);
  EXPECT_EQ(hf.weights.find("model.layers.1.mlp.experts.2.down_proj.weight")->shape,
            (std::vector<int64_t>{32, 24}));
  EXPECT_EQ(hf.weights.find("model.layers.1.mlp.shared_expert.down_proj.weight")->shape,
            (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(hf.weights.find("model.layers.0.mlp.down_proj.weight")->shape,
            (std::vector<int64_t>{32, 48}));
  EXPECT_EQ(hf.weights.find("model.layers.1.self_attn.k_proj.bias")->shape,
            (std::vector<int64_t>{16}));
  const std::vector<GroupValues> back = hf_group_values(hf);
  ASSERT_EQ(back.size(), groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    EXPECT_EQ(back[g].name, groups[g].name);
    EXPECT_EQ(back[g].data, groups[g].data) << groups[g].name;  // fp32: bit for bit
  }

  // score of the exported directory (one shared expert of width 16) == our evaluation of the
  // trained parameters (two of width 8).
  const std::string c = train::builtin_corpus();
  const std::vector<uint8_t> text(c.begin(), c.begin() + 17 * 9);
  const fs::path text_path = dir / "text.txt";
  std::ofstream(text_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(text.data()), static_cast<std::streamsize>(text.size()));
  ScoreOptions so;
  so.batch_windows = 4;
  const ScoreResult ours = score_bytes(cfg.model, cfg.moe, groups, text, so);
  const ScoreResult s = score_hf_dir(dir.string(), text_path.string(), so);
  EXPECT_EQ(s.tokens, 9 * 16);
  EXPECT_EQ(s.loss, ours.loss);
  EXPECT_LT(s.loss, std::log(256.0));
}

TEST(HfQwen2Moe, InitFromLoadsWithOrWithoutQkvBiasAndRefusesNamingTheKey) {
  const Config cfg = qwen();
  const train::TrainResult r = trained(cfg);
  const fs::path dir = temp_dir("init_from");
  export_hf(cfg, as_groups(r), dir.string());
  train::TrainOptions opt;
  opt.collect_params = true;

  // 0 steps at world 4, EP 2, ZeRO-3: the parameters are the file's.
  const train::TrainResult s =
      train::train(qwen({"train.init_from=" + dir.string(), "train.steps=0",
                         "parallel.world_size=4", "zero.stage=3"}),
                   opt);
  ASSERT_EQ(s.params.size(), r.params.size());
  for (size_t g = 0; g < r.params.size(); ++g)
    EXPECT_EQ(s.params[g], r.params[g]) << r.group_names[g];

  auto init_error = [&](const fs::path& from, const std::vector<std::string>& o) {
    std::vector<std::string> all = {"train.init_from=" + from.string(), "train.steps=0"};
    all.insert(all.end(), o.begin(), o.end());
    return error_of([&] { train::train(qwen(all), opt); });
  };
  // Trained biases are nonzero: a model without them cannot take them.
  std::string e = init_error(dir, {"model.qkv_bias=false"});
  EXPECT_NE(e.find("q_proj.bias' holds nonzero q/k/v biases"), std::string::npos) << e;
  EXPECT_NE(e.find("set model.qkv_bias = true"), std::string::npos) << e;
  e = init_error(dir, {"moe.normalize_top_k=true"});
  EXPECT_NE(e.find("routes with norm_topk_prob = false but moe.normalize_top_k = true"),
            std::string::npos)
      << e;
  e = init_error(dir, {"model.shared_expert_d_ff=4"});
  EXPECT_NE(e.find("shared_expert_intermediate_size = 16 but model.num_shared_experts x "
                   "shared_expert_d_ff = 8"),
            std::string::npos)
      << e;
  e = init_error(dir, {"model.shared_expert_gate=false"});
  EXPECT_NE(e.find("but model.shared_expert_gate = false (set it to true)"), std::string::npos)
      << e;
  e = init_error(dir, {"model.moe_every=1"});
  EXPECT_NE(e.find("decoder_sparse_step = 2 but model.moe_every = 1"), std::string::npos) << e;
  e = init_error(dir, {"model.expert_d_ff=12"});
  EXPECT_NE(e.find("moe_intermediate_size = 24 but model.expert_d_ff (or d_ff) = 12"),
            std::string::npos)
      << e;
  // One shared expert of width 16 is the same parameters as two of width 8.
  const train::TrainResult one =
      train::train(qwen({"train.init_from=" + dir.string(), "train.steps=0",
                         "model.num_shared_experts=1", "model.shared_expert_d_ff=16"}),
                   opt);
  for (size_t g = 0; g < r.params.size(); ++g)
    EXPECT_EQ(one.params[g], r.params[g]) << r.group_names[g];

  // A model without q/k/v biases is exported with zero ones; they load into either form.
  const Config nob = qwen({"model.qkv_bias=false"});
  const train::TrainResult rn = trained(nob);
  const fs::path dir2 = temp_dir("no_bias");
  export_hf(nob, as_groups(rn), dir2.string());
  const HfModel hf2 = read_hf_dir(dir2.string());
  ASSERT_NE(hf2.weights.find("model.layers.0.self_attn.v_proj.bias"), nullptr);
  const train::TrainResult without = train::train(
      qwen({"train.init_from=" + dir2.string(), "train.steps=0", "model.qkv_bias=false"}), opt);
  for (size_t g = 0; g < rn.params.size(); ++g)
    EXPECT_EQ(without.params[g], rn.params[g]) << rn.group_names[g];
  const train::TrainResult with =
      train::train(qwen({"train.init_from=" + dir2.string(), "train.steps=0"}), opt);
  for (size_t g = 0; g < rn.params.size(); ++g) {
    const std::vector<float>& w = with.params[g];
    ASSERT_GE(w.size(), rn.params[g].size());
    EXPECT_TRUE(std::equal(rn.params[g].begin(), rn.params[g].end(), w.begin()))
        << rn.group_names[g];
    EXPECT_TRUE(std::all_of(w.begin() + static_cast<std::ptrdiff_t>(rn.params[g].size()), w.end(),
                            [](float v) { return v == 0.0f; }))
        << rn.group_names[g] << ": the biases load as zeros";
  }
}

TEST(HfQwen2Moe, ReadRefusesWhatOurModelCannotComputeAndTakesTheClassDefaults) {
  const Config cfg = qwen({"train.steps=0"});
  const train::TrainResult r = trained(cfg);
  const fs::path dir = temp_dir("read");
  export_hf(cfg, as_groups(r), dir.string());
  const fs::path cj = dir / "config.json";
  const json good = json::parse(std::ifstream(cj));
  auto with = [&](const std::string& key, const json& value) {
    json j = good;
    if (value.is_discarded())
      j.erase(key);
    else
      j[key] = value;
    std::ofstream(cj) << j.dump();
    return error_of([&] { hf_group_values(read_hf_dir(dir.string())); });
  };
  EXPECT_NE(with("mlp_only_layers", json::array({0})).find("config.json: mlp_only_layers: [0]"),
            std::string::npos);
  EXPECT_EQ(with("mlp_only_layers", json::array()), "<no error>");
  EXPECT_NE(with("sliding_window", 4).find("sliding_window: 4"), std::string::npos);
  EXPECT_EQ(with("sliding_window", 4096), "<no error>");
  EXPECT_NE(with("num_experts_per_tok", 9).find("exceeds num_experts = 4"), std::string::npos);
  EXPECT_NE(with("norm_topk_prob", "yes").find("norm_topk_prob: must be true or false"),
            std::string::npos);
  EXPECT_NE(with("shared_expert_intermediate_size", 0).find("must be >= 1"), std::string::npos);
  std::string e = with("moe_intermediate_size", 12);
  EXPECT_NE(e.find("tensor 'model.layers.1.mlp.experts.0.gate_proj.weight' has shape [24,32]"),
            std::string::npos)
      << e;
  EXPECT_EQ(with("architectures", json(json::value_t::discarded)), "<no error>")
      << "model_type alone names the class";
  // Absent keys: Qwen2MoeConfig's defaults (transformers 4.40.2).
  json j = good;
  for (const char* k : {"num_key_value_heads", "rope_theta", "rms_norm_eps", "norm_topk_prob",
                        "decoder_sparse_step", "router_aux_loss_coef"})
    j.erase(k);
  j["num_attention_heads"] = 16;  // so that 16 key/value heads divide it (config only)
  std::ofstream(cj) << j.dump();
  const HfModel d = read_hf_dir(dir.string());
  EXPECT_EQ(d.model.n_kv_heads, 16);
  EXPECT_EQ(d.model.rope_theta, 10000.0);
  EXPECT_EQ(d.model.norm_eps, 1e-6);
  EXPECT_EQ(d.model.moe_every, 1);
  EXPECT_FALSE(d.moe.normalize_top_k);
  EXPECT_EQ(d.moe.aux_loss_coef, 0.001);
}

}  // namespace
}  // namespace moezero::hf
