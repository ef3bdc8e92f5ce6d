// hf/hf_export + hf/hf_score + train.init_from: a trained tiny model exported, read back,
// scored, and used to start training; config.json fields; every refusal.
#include "hf/hf_export.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "hf/hf_score.h"
#include "hf/hf_tokenizer_export.h"
#include "train/data.h"
#include "train/trainer.h"

namespace moezero::hf {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("moezero_hf_" + std::to_string(::getpid())) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A tiny Mixtral: 2 layers, 4 experts top-2, GQA 4/2 heads, byte vocabulary.
Config tiny(const std::vector<std::string>& more = {}) {
  std::vector<std::string> o = {
      "model.d_model=32",         "model.d_ff=48",        "model.n_layers=2",
      "model.n_heads=4",          "model.n_kv_heads=2",   "model.seq_len=16",
      "model.num_experts=4",      "model.top_k=2",        "train.steps=6",
      "train.micro_batch_size=4", "train.warmup_steps=2", "train.lr=0.01",
      "parallel.world_size=2",    "parallel.ep_size=2",   "train.log_every=100"};
  o.insert(o.end(), more.begin(), more.end());
  return parse_config("{}", "<test>", o);
}

std::vector<GroupValues> as_groups(train::TrainResult& r) {
  std::vector<GroupValues> g;
  for (size_t i = 0; i < r.params.size(); ++i) g.push_back({r.group_names[i], r.params[i]});
  return g;
}

std::vector<uint8_t> corpus_bytes(size_t n) {
  const std::string c = train::builtin_corpus();
  return {c.begin(), c.begin() + static_cast<std::ptrdiff_t>(n)};
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

TEST(HfExport, ConfigJsonHasMixtralFields) {
  const Config cfg =
      tiny({"moe.aux_loss_coef=0.02", "model.rope_theta=5000", "model.norm_eps=1e-6"});
  const json j = json::parse(hf_config_json(cfg, SafetensorsDType::F32));
  EXPECT_EQ(j["architectures"], json::array({"MixtralForCausalLM"}));
  EXPECT_EQ(j["model_type"], "mixtral");
  EXPECT_EQ(j["hidden_size"], 32);
  EXPECT_EQ(j["intermediate_size"], 48);
  EXPECT_EQ(j["num_hidden_layers"], 2);
  EXPECT_EQ(j["num_attention_heads"], 4);
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["num_local_experts"], 4);
  EXPECT_EQ(j["num_experts_per_tok"], 2);
  EXPECT_EQ(j["vocab_size"], 256);
  EXPECT_EQ(j["max_position_embeddings"], 16);
  EXPECT_EQ(j["rope_theta"], 5000.0);
  EXPECT_EQ(j["rms_norm_eps"], 1e-6);
  EXPECT_EQ(j["router_aux_loss_coef"], 0.02);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["hidden_act"], "silu");
  EXPECT_TRUE(j["sliding_window"].is_null());
  EXPECT_EQ(j["torch_dtype"], "float32");
  EXPECT_EQ(json::parse(hf_config_json(cfg, SafetensorsDType::BF16))["torch_dtype"], "bfloat16");
}

TEST(HfExport, DenseModelIsLlamaAndMixedModelsAreRefused) {
  const Config dense = tiny({"model.num_experts=0", "parallel.ep_size=1"});
  EXPECT_EQ(hf_architecture(dense), HfArchitecture::Llama);
  const json j = json::parse(hf_config_json(dense, SafetensorsDType::F32));
  EXPECT_EQ(j["architectures"], json::array({"LlamaForCausalLM"}));
  EXPECT_FALSE(j.contains("num_local_experts"));
  EXPECT_EQ(j["attention_bias"], false);

  EXPECT_NE(
      error_of([] { hf_architecture(tiny({"model.moe_every=2"})); }).find("model.moe_every = 2"),
      std::string::npos);
  EXPECT_NE(error_of([] {
              hf_architecture(tiny({"moe.normalize_top_k=false"}));
            }).find("moe.normalize_top_k = false"),
            std::string::npos);
}

// The MoE layers of issue 17: fine-grained experts export their width as intermediate_size
// (every Mixtral layer is MoE); sigmoid scores, the selection bias and shared experts have no
// place in MixtralForCausalLM and are refused naming the key (shared experts without a gate:
// Qwen2-MoE's refusal; q/k/v biases without shared experts); init_from refuses a Mixtral
// directory for a model with shared experts.
TEST(HfExport, MoeLayersOfTodayExportOrAreRefused) {
  const json j = json::parse(hf_config_json(tiny({"model.expert_d_ff=24"}), SafetensorsDType::F32));
  EXPECT_EQ(j["intermediate_size"], 24);
  EXPECT_NE(error_of([] {
              hf_architecture(tiny({"moe.score_function=sigmoid"}));
            }).find("moe.score_function = sigmoid"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              hf_architecture(tiny({"moe.expert_bias_update_rate=0.001"}));
            }).find("moe.expert_bias_update_rate"),
            std::string::npos);
  // Shared experts go to Qwen2-MoE (tests/hf/hf_qwen2_moe_test.cpp), which gates them.
  EXPECT_NE(error_of([] {
              hf_architecture(tiny({"model.num_shared_experts=1"}));
            }).find("model.shared_expert_gate = false"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              hf_architecture(tiny({"model.qkv_bias=true"}));
            }).find("model.qkv_bias = true: MixtralForCausalLM has no q/k/v biases"),
            std::string::npos);
  HfModel hf;
  hf.arch = HfArchitecture::Mixtral;
  hf.model = tiny({"model.expert_d_ff=24"}).model;
  hf.model.d_ff = 24;  // as read back: intermediate_size
  hf.model.expert_d_ff = 0;
  hf.dir = "exported";
  EXPECT_NO_THROW(check_same_shape(tiny({"model.expert_d_ff=24"}).model, hf, "train.init_from"));
  EXPECT_NE(error_of([&] {
              check_same_shape(tiny({"model.expert_d_ff=24", "model.num_shared_experts=1"}).model,
                               hf, "train.init_from");
            }).find("num_shared_experts"),
            std::string::npos);
}

TEST(HfExport, TrainedModelRoundTripsAndScoresLikeOurEvaluation) {
  Config cfg = tiny();
  train::TrainOptions opt;
  opt.collect_params = true;
  train::TrainResult r = train::train(cfg, opt);
  const std::vector<GroupValues> groups = as_groups(r);
  ASSERT_EQ(groups.size(), full_param_groups(cfg.model).size()) << "every expert of both EP ranks";

  const fs::path dir = temp_dir("trained");
  export_hf(cfg, groups, dir.string());
  const HfModel hf = read_hf_dir(dir.string());
  EXPECT_EQ(hf.arch, HfArchitecture::Mixtral);
  EXPECT_EQ(hf.model.d_model, 32);
  EXPECT_EQ(hf.model.num_experts, 4);
  EXPECT_EQ(hf.model.seq_len, 16);
  EXPECT_EQ(hf.weights.metadata().at("format"), "pt");
  ASSERT_NE(hf.weights.find("model.layers.1.block_sparse_moe.experts.3.w2.weight"), nullptr);
  EXPECT_EQ(hf.weights.find("model.layers.1.block_sparse_moe.experts.3.w2.weight")->shape,
            (std::vector<int64_t>{32, 48}));
  EXPECT_EQ(hf.weights.find("model.layers.0.self_attn.k_proj.weight")->shape,
            (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(hf.weights.find("lm_head.weight")->shape, (std::vector<int64_t>{256, 32}));
  const std::vector<GroupValues> back = hf_group_values(hf);
  ASSERT_EQ(back.size(), groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    EXPECT_EQ(back[g].name, groups[g].name);
    EXPECT_EQ(back[g].data, groups[g].data) << groups[g].name;  // fp32: bit for bit
  }

  // score of the exported directory == our evaluation of the trained parameters.
  const std::vector<uint8_t> text = corpus_bytes(17 * 12 + 5);  // 12 windows of 17, 5 bytes dropped
  const fs::path text_path = dir / "text.txt";
  std::ofstream(text_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(text.data()), static_cast<std::streamsize>(text.size()));
  ScoreOptions so;
  so.batch_windows = 5;  // uneven last batch
  const ScoreResult ours = score_bytes(cfg.model, cfg.moe, groups, text, so);
  const ScoreResult s = score_hf_dir(dir.string(), text_path.string(), so);
  EXPECT_EQ(s.windows, 12);
  EXPECT_EQ(s.tokens, 12 * 16);
  EXPECT_EQ(s.loss, ours.loss);
  EXPECT_TRUE(std::isfinite(s.loss));
  EXPECT_LT(s.loss, std::log(256.0)) << "a trained model beats the uniform guess";
  EXPECT_EQ(score_json(s).rfind("{\"tokens\": 192, \"loss\": ", 0), 0u) << score_json(s);
  ScoreResult bad = s;
  bad.loss = std::nan("");
  EXPECT_EQ(score_json(bad), "{\"tokens\": 192, \"loss\": null}") << "JSON has no NaN";
  // Batching does not change the number beyond float summation order.
  so.batch_windows = 1;
  EXPECT_NEAR(score_hf_dir(dir.string(), text_path.string(), so).loss, s.loss, 1e-6 * s.loss);

  // The trainer's own loss on the same windows (world 2, ZeRO-3, EP 2, started with
  // train.init_from): another code path to the same number.
  Config again =
      tiny({"train.init_from=" + dir.string(), "train.steps=1", "train.micro_batch_size=12",
            "moe.aux_loss_coef=0", "zero.param_persistence_threshold=16"});
  train::TrainOptions topt;
  topt.data = [&](const train::BatchRequest& req, std::vector<int32_t>& tok,
                  std::vector<int32_t>& tgt) {
    tok.resize(static_cast<size_t>(req.rows * req.seq_len));
    tgt.resize(tok.size());
    for (int64_t row = 0; row < req.rows; ++row)
      for (int64_t t = 0; t < req.seq_len; ++t) {
        const size_t at = static_cast<size_t>((req.row_begin + row) * (req.seq_len + 1) + t);
        tok[static_cast<size_t>(row * req.seq_len + t)] = text[at];
        tgt[static_cast<size_t>(row * req.seq_len + t)] = text[at + 1];
      }
  };
  const train::TrainResult t = train::train(again, topt);
  ASSERT_EQ(t.steps.size(), 1u);
  EXPECT_NEAR(t.steps[0].loss, s.loss, 2e-6 * s.loss)
      << "trainer forward vs score on identical windows";
}

TEST(HfExport, InitFromStartsFromTheExportedParameters) {
  Config cfg = tiny({"train.steps=3"});
  train::TrainOptions opt;
  opt.collect_params = true;
  train::TrainResult r = train::train(cfg, opt);
  const fs::path dir = temp_dir("init_from");
  export_hf(cfg, as_groups(r), dir.string());

  // 0 steps at another world size, EP width, stage and compute dtype: the masters are the file's.
  for (const std::string dtype : {"fp32", "bf16"}) {
    Config start = tiny({"train.init_from=" + dir.string(), "train.steps=0",
                         "parallel.world_size=4", "parallel.ep_size=2", "zero.stage=3",
                         "train.dtype=" + dtype, "zero.param_persistence_threshold=100"});
    train::TrainResult s = train::train(start, opt);
    ASSERT_EQ(s.params.size(), r.params.size());
    for (size_t g = 0; g < r.params.size(); ++g)
      EXPECT_EQ(s.params[g], r.params[g]) << dtype << " " << r.group_names[g];
  }
  // Random initialisation differs, so the check above is not vacuous.
  Config fresh = tiny({"train.steps=0"});
  EXPECT_NE(train::train(fresh, opt).params[1], r.params[1]);

  // One step with a learning rate far below float resolution leaves every parameter as loaded,
  // through gathers, gradients and the optimizer (stage 2: replicated compute copies).
  Config one =
      tiny({"train.init_from=" + dir.string(), "train.steps=1", "train.lr=1e-30", "train.min_lr=0",
            "train.warmup_steps=0", "train.weight_decay=0", "zero.stage=2"});
  train::TrainResult o = train::train(one, opt);
  for (size_t g = 0; g < r.params.size(); ++g)
    EXPECT_EQ(o.params[g], r.params[g]) << r.group_names[g];
}

TEST(HfExport, InitFromRefusesAnotherModelNamingTheField) {
  Config cfg = tiny({"train.steps=0"});
  train::TrainOptions opt;
  opt.collect_params = true;
  train::TrainResult r = train::train(cfg, opt);
  const fs::path dir = temp_dir("shape");
  export_hf(cfg, as_groups(r), dir.string());
  const std::string e1 = error_of([&] {
    train::train(tiny({"train.init_from=" + dir.string(), "model.d_model=64"}), opt);
  });
  EXPECT_NE(e1.find("train.init_from"), std::string::npos) << e1;
  EXPECT_NE(e1.find("hidden_size = 32 but model.d_model = 64"), std::string::npos) << e1;
  const std::string e2 = error_of([&] {
    train::train(tiny({"train.init_from=" + dir.string(), "model.top_k=1"}), opt);
  });
  EXPECT_NE(e2.find("num_experts_per_tok = 2 but model.top_k = 1"), std::string::npos) << e2;
  const std::string e3 =
      error_of([&] { train::train(tiny({"train.init_from=/nonexistent/model"}), opt); });
  EXPECT_NE(e3.find("/nonexistent/model: not a directory"), std::string::npos) << e3;
  // Same shapes, another function: the RoPE base and the norm epsilon must match too.
  const std::string e4 = error_of([&] {
    train::train(tiny({"train.init_from=" + dir.string(), "model.rope_theta=500000"}), opt);
  });
  EXPECT_NE(e4.find("rope_theta = 10000 but model.rope_theta = 500000"), std::string::npos) << e4;
  const std::string e5 = error_of([&] {
    train::train(tiny({"train.init_from=" + dir.string(), "model.norm_eps=1e-6"}), opt);
  });
  EXPECT_NE(e5.find("rms_norm_eps = 1e-05 but model.norm_eps = 1e-06"), std::string::npos) << e5;
}

// Keys a hand-written config.json leaves out take the transformers class's defaults.
TEST(HfExport, AbsentKeysTakeTheTransformersDefaults) {
  Config cfg = tiny({"train.steps=0"});
  train::TrainOptions opt;
  opt.collect_params = true;
  train::TrainResult r = train::train(cfg, opt);
  const fs::path dir = temp_dir("defaults");
  export_hf(cfg, as_groups(r), dir.string());
  const fs::path cj = dir / "config.json";
  json j = json::parse(std::ifstream(cj));
  for (const char* k : {"num_key_value_heads", "rope_theta", "rms_norm_eps"}) j.erase(k);
  j["num_attention_heads"] = 16;  // so that 8 key/value heads divide it (config only)
  std::ofstream(cj) << j.dump();
  const HfModel mixtral = read_hf_dir(dir.string());
  EXPECT_EQ(mixtral.model.n_kv_heads, 8);  // MixtralConfig
  EXPECT_EQ(mixtral.model.rope_theta, 1e6);
  EXPECT_EQ(mixtral.model.norm_eps, 1e-5);
  j["architectures"] = json::array({"LlamaForCausalLM"});
  j["model_type"] = "llama";
  std::ofstream(cj) << j.dump();
  const HfModel llama = read_hf_dir(dir.string());
  EXPECT_EQ(llama.model.n_kv_heads, llama.model.n_heads);  // LlamaConfig: every head
  EXPECT_EQ(llama.model.rope_theta, 10000.0);
  EXPECT_EQ(llama.model.norm_eps, 1e-6);
}

TEST(HfExport, ReadRefusesWhatOurModelCannotCompute) {
  Config cfg = tiny({"train.steps=0"});
  train::TrainOptions opt;
  opt.collect_params = true;
  train::TrainResult r = train::train(cfg, opt);
  const fs::path dir = temp_dir("refuse");
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
  EXPECT_NE(with("tie_word_embeddings", true).find("config.json: tie_word_embeddings: true"),
            std::string::npos);
  EXPECT_NE(with("hidden_act", "gelu").find("hidden_act: \"gelu\": only silu"), std::string::npos);
  EXPECT_NE(with("rope_scaling", json{{"type", "linear"}, {"factor", 2.0}}).find("rope_scaling"),
            std::string::npos);
  EXPECT_NE(with("sliding_window", 4).find("sliding_window: 4"), std::string::npos);
  EXPECT_NE(with("architectures", json::array({"GPT2LMHeadModel"})).find("only MixtralForCausalLM"),
            std::string::npos);
  EXPECT_NE(with("architectures", json(json::value_t::discarded)).find("<no error>"),
            std::string::npos)
      << "model_type alone names the class";
  EXPECT_NE(
      with("hidden_size", json(json::value_t::discarded)).find("config.json: hidden_size: missing"),
      std::string::npos);
  EXPECT_NE(with("num_attention_heads", 5).find("model.n_heads"), std::string::npos);
  EXPECT_NE(with("head_dim", 16).find("head_dim: 16"), std::string::npos);
  EXPECT_NE(with("num_experts_per_tok", 9).find("exceeds num_local_experts = 4"),
            std::string::npos);
  // A config that no longer matches the weights: the tensor is named.
  std::string e = with("intermediate_size", 40);
  EXPECT_NE(
      e.find("tensor 'model.layers.0.block_sparse_moe.experts.0.w1.weight' has shape [48,32]"),
      std::string::npos)
      << e;
  std::ofstream(cj) << good.dump();
  HfModel hf = read_hf_dir(dir.string());
  (void)hf_group_values(hf);  // the good config loads

  // Extra and missing tensors.
  std::vector<SafetensorsTensor> ts;
  const float one = 1.0f;
  {
    const HfModel base = read_hf_dir(dir.string());
    std::vector<std::vector<float>> keep;
    for (const SafetensorsEntry& en : base.weights.entries()) {
      keep.push_back(base.weights.to_f32(en));
      ts.push_back({en.name, en.shape, keep.back().data()});
    }
    std::vector<SafetensorsTensor> extra = ts;
    extra.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", {1}, &one});
    write_safetensors((dir / "model.safetensors").string(), extra, SafetensorsDType::F32,
                      {{"format", "pt"}});
    e = error_of([&] { hf_group_values(read_hf_dir(dir.string())); });
    EXPECT_NE(e.find("tensor 'model.layers.0.self_attn.rotary_emb.inv_freq' is not a parameter"),
              std::string::npos)
        << e;
    std::vector<SafetensorsTensor> missing(ts.begin() + 1, ts.end());
    write_safetensors((dir / "model.safetensors").string(), missing, SafetensorsDType::F32,
                      {{"format", "pt"}});
    e = error_of([&] { hf_group_values(read_hf_dir(dir.string())); });
    EXPECT_NE(e.find("tensor '" + ts.front().name + "' is missing"), std::string::npos) << e;
  }
  EXPECT_NE(error_of([&] { read_hf_dir((dir / "nothing").string()); }).find("not a directory"),
            std::string::npos);
}

TEST(HfExport, ExportRefusesMissingOrForeignGroupsAndWritesBf16) {
  Config cfg = tiny({"train.steps=0"});
  train::TrainOptions opt;
  opt.collect_params = true;
  train::TrainResult r = train::train(cfg, opt);
  std::vector<GroupValues> g = as_groups(r);
  const fs::path dir = temp_dir("groups");
  auto missing = g;
  missing.erase(missing.begin() + 3);
  EXPECT_NE(error_of([&] {
              export_hf(cfg, missing, dir.string());
            }).find("'" + g[3].name + "' of the model is missing"),
            std::string::npos);
  auto foreign = g;
  foreign.push_back({"layers.9.attn", {1.0f}});
  EXPECT_NE(error_of([&] {
              export_hf(cfg, foreign, dir.string());
            }).find("'layers.9.attn' is not part of the model"),
            std::string::npos);
  auto short_group = g;
  short_group[0].data.pop_back();
  EXPECT_NE(error_of([&] { export_hf(cfg, short_group, dir.string()); }).find("'embed' has"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors")) << "nothing written on refusal";

  export_hf(cfg, g, dir.string(), HfExportOptions{SafetensorsDType::BF16});
  const HfModel hf = read_hf_dir(dir.string());
  EXPECT_EQ(hf.weights.find("lm_head.weight")->dtype, "BF16");
  const std::vector<GroupValues> back = hf_group_values(hf);
  for (size_t k = 0; k < g.size(); ++k)
    for (size_t i = 0; i < g[k].data.size(); ++i)
      ASSERT_EQ(back[k].data[i], bf16_to_float(float_to_bf16(g[k].data[i])))
          << g[k].name << " " << i;
  const json j = json::parse(std::ifstream(dir / "config.json"));
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
}

// The tokenizer files transformers 4.40 reads (hf/hf_tokenizer_export.h), with and without an
// end-of-text token, and a tokenizer larger than the model refused naming both sizes.
TEST(HfExport, TokenizerFilesForTransformers) {
  const fs::path dir = temp_dir("tokenizer_files");
  const std::string fixture =
      std::string(MOEZERO_SOURCE_DIR) + "/tests/hf/data/multilingual_tokenizer.json";
  export_hf_tokenizer(fixture, dir.string(), 64, 420);
  auto read = [&](const char* name) {
    std::ifstream f(dir / name);
    EXPECT_TRUE(f.good()) << name;
    return json::parse(f);
  };
  const json cfg = read("tokenizer_config.json");
  EXPECT_EQ(cfg.at("tokenizer_class"), "PreTrainedTokenizerFast");
  EXPECT_EQ(cfg.at("model_max_length"), 64);
  EXPECT_EQ(cfg.at("eos_token"), "<|endoftext|>");
  EXPECT_EQ(cfg.at("bos_token"), "<|endoftext|>");
  EXPECT_EQ(cfg.at("clean_up_tokenization_spaces"), false);
  EXPECT_EQ(read("special_tokens_map.json").at("eos_token"), "<|endoftext|>");
  const json gen = read("generation_config.json");
  EXPECT_EQ(gen.at("eos_token_id"), 0);
  EXPECT_EQ(gen.at("bos_token_id"), 0);
  std::ifstream a(fixture), b(dir / "tokenizer.json");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(a), {}),
            std::string(std::istreambuf_iterator<char>(b), {}));

  // Without <|endoftext|>: no special tokens, no stop id.
  json j = json::parse(std::ifstream(fixture));
  j["added_tokens"][0]["content"] = "<|other|>";  // id 0 keeps a name, not end-of-text
  j["model"]["vocab"]["<|other|>"] = j["model"]["vocab"]["<|endoftext|>"];
  j["model"]["vocab"].erase("<|endoftext|>");
  const fs::path plain = dir / "plain.json";
  std::ofstream(plain) << j.dump();
  const fs::path dir2 = temp_dir("tokenizer_files_plain");
  export_hf_tokenizer(plain.string(), dir2.string(), 32, 420);
  std::ifstream c(dir2 / "tokenizer_config.json");
  const json cfg2 = json::parse(c);
  EXPECT_FALSE(cfg2.contains("eos_token"));
  std::ifstream g2(dir2 / "generation_config.json");
  EXPECT_FALSE(json::parse(g2).contains("eos_token_id"));

  try {
    export_hf_tokenizer(fixture, dir.string(), 64, 256);
    FAIL() << "a tokenizer larger than the model was exported";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("has 420 token ids, more than the model's vocab_size (256)"),
        std::string::npos)
        << e.what();
  }
}

TEST(HfScore, RefusesShortTextAndBytesOutsideTheVocabulary) {
  Config cfg = tiny({"train.steps=0", "model.vocab_size=128"});
  train::TrainOptions opt;
  opt.collect_params = true;
  train::TrainResult r = train::train(cfg, opt);
  const auto g = as_groups(r);
  std::vector<uint8_t> text(16, 'a');
  EXPECT_NE(error_of([&] {
              score_bytes(cfg.model, cfg.moe, g, text, {}, "t.txt");
            }).find("t.txt has 16 bytes, fewer than one window of T + 1 = 17 bytes"),
            std::string::npos);
  text.resize(40, 'b');
  text[20] = 200;
  EXPECT_NE(error_of([&] {
              score_bytes(cfg.model, cfg.moe, g, text, {}, "t.txt");
            }).find("t.txt has byte 200 at offset 20, outside the model's vocab_size (128)"),
            std::string::npos);
  // --seq-len beyond max_position_embeddings is fine (RoPE has no table); tokens = windows * T.
  text[20] = 'c';
  ScoreOptions so;
  so.seq_len = 19;
  const ScoreResult s = score_bytes(cfg.model, cfg.moe, g, text, so);
  EXPECT_EQ(s.windows, 2);
  EXPECT_EQ(s.tokens, 38);
  EXPECT_TRUE(std::isfinite(s.loss));
}

}  // namespace
}  // namespace moezero::hf
