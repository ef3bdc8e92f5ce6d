// tools/generate_cmd.cpp — `moezero generate`: text from a checkpoint or an exported Hugging
// Face directory, with a KV cache (hf/generate.h), on a GPU when the build has CUDA and one is
// present (--device auto, the default; it says on stderr when it falls back to the CPU), or on
// the device --device names (cuda without a GPU is an error). Tokens: the directory's
// tokenizer.json (byte-level BPE, hf/bpe_tokenizer.h) when there is one (or --tokenizer FILE),
// then generation also stops at its <|endoftext|>; else bytes (a model with vocab_size > 256
// prints ids >= 256 as "<id>").
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>

#include "core/error.h"
#include "hf/bpe_tokenizer.h"
#include "hf/generate.h"
#include "hf/hf_export.h"
#include "kernels/backend.h"
#include "tools/cli.h"
#include "train/checkpoint.h"

namespace moezero::cli {

namespace {

double parse_number(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MOEZERO_REQUIRE(used == text.size() && std::isfinite(v), "generate: ", flag, " '", text,
                  "' is not a number");
  return v;
}

int64_t parse_count(const std::string& flag, const std::string& text, int64_t lo) {
  const double v = parse_number(flag, text);
  MOEZERO_REQUIRE(v == std::floor(v) && v >= double(lo) && v < 9e18, "generate: ", flag, " '", text,
                  "' must be a whole number >= ", lo);
  return static_cast<int64_t>(v);
}

struct LoadedModel {
  ModelConfig model;
  bool normalize_top_k = true;
  std::vector<hf::GroupValues> groups;
  std::string tokenizer;  // the run's data.tokenizer (checkpoints), else ""
};

LoadedModel load(const std::string& checkpoint, const std::string& hf_dir) {
  LoadedModel out;
  if (!checkpoint.empty()) {
    checkpoint::FullParams full = checkpoint::load_full_params(checkpoint);
    // The KV-cache generator routes with softmax probabilities and no selection bias.
    MOEZERO_REQUIRE(full.config.model.num_experts == 0 ||
                        (full.config.moe.score_function == ScoreFunction::Softmax &&
                         full.config.moe.expert_bias_update_rate <= 0.0),
                    "generate: ", checkpoint, " routes with ",
                    full.config.moe.score_function == ScoreFunction::Sigmoid
                        ? "sigmoid scores (moe.score_function = sigmoid)"
                        : "a selection bias (moe.expert_bias_update_rate > 0)",
                    ", which the generator does not compute (it routes with softmax "
                    "probabilities only)");
    out.model = full.config.model;
    out.normalize_top_k = full.config.moe.normalize_top_k;
    out.tokenizer = full.config.data.tokenizer;
    for (checkpoint::NamedGroup& g : full.groups) out.groups.push_back({g.name, std::move(g.data)});
    return out;
  }
  const hf::HfModel hf = hf::read_hf_dir(hf_dir);
  out.model = hf.model;
  out.normalize_top_k = hf.moe.normalize_top_k;
  out.groups = hf::hf_group_values(hf);
  return out;
}

enum class DeviceChoice : uint8_t { Auto, Cpu, Cuda };

DeviceChoice parse_device(const std::string& text) {
  if (text == "auto") return DeviceChoice::Auto;
  if (text == "cpu") return DeviceChoice::Cpu;
  if (text == "cuda") return DeviceChoice::Cuda;
  MOEZERO_USER_ERROR("generate: --device must be auto, cpu or cuda, got '", text, "'");
}

// The device generation runs on, and the line (for stderr, after the text: stdout is the text
// alone) that names it.
std::unique_ptr<Device> open_device(DeviceChoice choice, std::string& says) {
  std::string why;
  const bool cuda = choice != DeviceChoice::Cpu && cuda_available(&why);
  if (choice == DeviceChoice::Cuda && !cuda)
    MOEZERO_USER_ERROR("generate: --device cuda but CUDA is unavailable: ", why);
  std::unique_ptr<Device> dev = cuda ? make_cuda_device(0) : make_cpu_device();
  says = choice == DeviceChoice::Auto && !cuda
             ? "generate: no GPU (" + why + "): running on the CPU"
             : "generate: running on " + dev->name();
  return dev;
}

std::string decode(const std::vector<int32_t>& tokens) {
  std::string s;
  for (int32_t t : tokens)
    s += t < 256 ? std::string(1, static_cast<char>(t)) : "<" + std::to_string(t) + ">";
  return s;
}

}  // namespace

std::string find_tokenizer(const std::string& dir, const std::string& configured) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  for (const fs::path& p : {d / "tokenizer.json", d.parent_path() / "tokenizer.json"})
    if (fs::is_regular_file(p) && (p.parent_path() == d || fs::exists(d / "manifest.json")))
      return p.string();
  return !configured.empty() && fs::is_regular_file(configured) ? configured : std::string();
}

namespace {

struct GenerateArgs {
  std::string checkpoint, hf_dir, tokenizer, prompt = "\n";
  int64_t max_new = 200;
  DeviceChoice device = DeviceChoice::Auto;
  hf::Sampling sampling;
  bool ignore_eos = false;  // --ignore-eos: no stop at <|endoftext|> (comparisons)
  bool print_ids = false;   // --ids: the token ids as JSON instead of the text
};

GenerateArgs parse_generate_args(const std::vector<std::string>& args) {
  GenerateArgs g;
  hf::Sampling& s = g.sampling;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      MOEZERO_USAGE_REQUIRE(i + 1 < args.size(), "generate: ", flag, " needs a value");
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--checkpoint")
      g.checkpoint = value("--checkpoint");
    else if (a == "--model")
      g.hf_dir = value("--model");
    else if (a == "--tokenizer")
      g.tokenizer = value("--tokenizer");
    else if (a == "--prompt")
      g.prompt = value("--prompt");
    else if (a == "--max-new-tokens")
      g.max_new = parse_count(a, value("--max-new-tokens"), 0);
    else if (a == "--temperature")
      s.temperature = parse_number(a, value("--temperature"));
    else if (a == "--top-k")
      s.top_k = parse_count(a, value("--top-k"), 0);
    else if (a == "--top-p")
      s.top_p = parse_number(a, value("--top-p"));
    else if (a == "--device")
      g.device = parse_device(value("--device"));
    else if (a == "--seed")
      s.seed = static_cast<uint64_t>(parse_count(a, value("--seed"), 0));
    else if (a == "--ignore-eos")
      g.ignore_eos = true;
    else if (a == "--ids")
      g.print_ids = true;
    else
      MOEZERO_USAGE_ERROR("generate: unknown option '", a, "'");
  }
  MOEZERO_REQUIRE(g.checkpoint.empty() != g.hf_dir.empty(),
                  "generate: give exactly one of --checkpoint DIR and --model HF_DIR");
  MOEZERO_REQUIRE(s.temperature >= 0.0, "generate: --temperature must be >= 0 (0: greedy), got ",
                  s.temperature);
  MOEZERO_REQUIRE(s.top_p > 0.0 && s.top_p <= 1.0, "generate: --top-p must be in (0, 1], got ",
                  s.top_p);
  MOEZERO_REQUIRE(!g.prompt.empty(), "generate: --prompt is empty (give at least one character)");
  return g;
}

std::string ids_json(const std::vector<int32_t>& prompt, const std::vector<int32_t>& out) {
  auto list = [](const std::vector<int32_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  return "{\"prompt_ids\": " + list(prompt) + ", \"new_ids\": " + list(out) + "}";
}

}  // namespace

int generate(const std::vector<std::string>& args) {
  const GenerateArgs g = parse_generate_args(args);
  const LoadedModel m = load(g.checkpoint, g.hf_dir);
  hf::require_finite_params(m.groups, "generate", g.checkpoint.empty() ? g.hf_dir : g.checkpoint);
  std::string tokenizer = g.tokenizer;
  if (tokenizer.empty())
    tokenizer = find_tokenizer(g.checkpoint.empty() ? g.hf_dir : g.checkpoint, m.tokenizer);
  std::unique_ptr<hf::BpeTokenizer> tok;
  std::vector<int32_t> ids;
  if (!tokenizer.empty()) {
    tok = std::make_unique<hf::BpeTokenizer>(tokenizer);
    ids = tok->encode(g.prompt);
  } else {
    for (char c : g.prompt) ids.push_back(static_cast<uint8_t>(c));
  }
  for (size_t i = 0; i < ids.size(); ++i)
    MOEZERO_REQUIRE(ids[i] < m.model.vocab_size, "generate: prompt token ", ids[i], " at ", i,
                    " is outside the model's vocab_size (", m.model.vocab_size, ")",
                    tok ? " (tokenizer " + tokenizer + ")" : std::string(" (tokens are bytes)"));
  std::string device_line;
  const std::unique_ptr<Device> dev = open_device(g.device, device_line);
  hf::KvGenerator gen(m.model, m.normalize_top_k, m.groups, dev.get());
  const int32_t eos = tok && !g.ignore_eos ? tok->end_of_text() : -1;
  const std::vector<int32_t> out = hf::generate(gen, ids, g.max_new, g.sampling, eos);
  if (g.print_ids)
    std::cout << ids_json(ids, out) << std::endl;
  else
    std::cout << g.prompt << (tok ? tok->decode(out) : decode(out)) << std::endl;
  std::cerr << device_line << std::endl;
  if (int64_t(out.size()) < g.max_new && !(eos >= 0 && !out.empty() && out.back() == eos))
    std::cerr << "(stopped after " << out.size()
              << " tokens: the context of model.seq_len = " << m.model.seq_len << " tokens is full)"
              << std::endl;
  return 0;
}

}  // namespace moezero::cli
