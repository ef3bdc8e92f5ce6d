// tools/hf_cmd.cpp — `moezero export` (a checkpoint as a Hugging Face directory) and
// `moezero score` (mean next-token cross-entropy of an exported model on a text file).
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "core/error.h"
#include "hf/hf_export.h"
#include "hf/hf_score.h"
#include "hf/hf_tokenizer_export.h"
#include "hf/safetensors.h"
#include "tools/cli.h"
#include "train/checkpoint.h"

namespace moezero::cli {

namespace {

int64_t parse_positive(const std::string& flag, const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MOEZERO_REQUIRE(used == text.size() && v >= 1, flag, " '", text, "' is not a positive integer");
  return v;
}

hf::SafetensorsDType parse_export_dtype(const std::string& text) {
  if (text == "f32") return hf::SafetensorsDType::F32;  // the spellings of train --export-dtype
  if (text == "bf16") return hf::SafetensorsDType::BF16;
  MOEZERO_USER_ERROR("export: --dtype must be f32 or bf16, got '", text, "'");
}

}  // namespace

int export_model(const std::vector<std::string>& args) {
  std::string checkpoint, out;
  hf::HfExportOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      MOEZERO_USAGE_REQUIRE(i + 1 < args.size(), "export: ", flag, " needs a value");
      return args[++i];
    };
    if (args[i] == "--checkpoint")
      checkpoint = value("--checkpoint");
    else if (args[i] == "--out")
      out = value("--out");
    else if (args[i] == "--dtype")
      opt.dtype = parse_export_dtype(value("--dtype"));
    else
      MOEZERO_USAGE_ERROR("export: unknown option '", args[i], "'");
  }
  MOEZERO_USAGE_REQUIRE(!checkpoint.empty(), "export: --checkpoint DIR is required");
  MOEZERO_USAGE_REQUIRE(!out.empty(), "export: --out HF_DIR is required");
  export_checkpoint(checkpoint, out, opt);
  return 0;
}

void export_checkpoint(const std::string& checkpoint, const std::string& out,
                       const hf::HfExportOptions& opt) {
  checkpoint::FullParams full = checkpoint::load_full_params(checkpoint);
  std::vector<hf::GroupValues> groups;
  groups.reserve(full.groups.size());
  for (checkpoint::NamedGroup& g : full.groups) groups.push_back({g.name, std::move(g.data)});
  hf::export_hf(full.config, groups, out, opt);
  const std::string tok = find_tokenizer(checkpoint, full.config.data.tokenizer);
  if (!tok.empty())  // transformers' AutoTokenizer and generate read these beside the weights
    hf::export_hf_tokenizer(tok, out, full.config.model.seq_len, full.config.model.vocab_size);
  std::printf("exported %s (step %lld, %s) to %s\n", checkpoint.c_str(),
              static_cast<long long>(full.step),
              hf::hf_architecture_name(hf::hf_architecture(full.config)), out.c_str());
}

int score(const std::vector<std::string>& args) {
  std::string model, text, logits_out;
  bool bytes = false;  // --bytes: the text's bytes even when the directory has a tokenizer
  hf::ScoreOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      MOEZERO_USAGE_REQUIRE(i + 1 < args.size(), "score: ", flag, " needs a value");
      return args[++i];
    };
    if (args[i] == "--model")
      model = value("--model");
    else if (args[i] == "--text")
      text = value("--text");
    else if (args[i] == "--seq-len")
      opt.seq_len = parse_positive("--seq-len", value("--seq-len"));
    else if (args[i] == "--batch")
      opt.batch_windows = parse_positive("--batch", value("--batch"));
    else if (args[i] == "--logits-out")
      logits_out = value("--logits-out");
    else if (args[i] == "--tokenizer")
      opt.tokenizer = value("--tokenizer");
    else if (args[i] == "--bytes")
      bytes = true;
    else
      MOEZERO_USAGE_ERROR("score: unknown option '", args[i], "'");
  }
  MOEZERO_USAGE_REQUIRE(!model.empty(), "score: --model HF_DIR is required");
  MOEZERO_USAGE_REQUIRE(!text.empty(), "score: --text FILE is required");
  MOEZERO_USAGE_REQUIRE(!bytes || opt.tokenizer.empty(),
                        "score: --bytes and --tokenizer exclude each other");
  // Tokens as the model was trained on: the directory's tokenizer.json, as generate reads it.
  if (opt.tokenizer.empty() && !bytes) opt.tokenizer = find_tokenizer(model, "");
  opt.keep_first_logits = !logits_out.empty();
  const hf::ScoreResult r = hf::score_hf_dir(model, text, opt);
  if (!logits_out.empty()) {  // window 0's logits, (T, V) f32, for comparisons (tests/hf)
    const int64_t vocab = static_cast<int64_t>(r.first_logits.size()) / r.seq_len;
    hf::write_safetensors(logits_out, {{"logits", {r.seq_len, vocab}, r.first_logits.data()}},
                          hf::SafetensorsDType::F32, {{"format", "pt"}});
  }
  std::cout << hf::score_json(r) << std::endl;  // stdout: the JSON alone
  std::cerr << "score: tokens "
            << (opt.tokenizer.empty() ? std::string("are the text's bytes") +
                                            (bytes ? "" : " (no tokenizer.json in " + model + ")")
                                      : "from " + opt.tokenizer)
            << "\n";
  return 0;
}

}  // namespace moezero::cli
