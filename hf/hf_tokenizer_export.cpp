// hf/hf_tokenizer_export.cpp — tokenizer files of an export (hf_tokenizer_export.h).
#include "hf/hf_tokenizer_export.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/output_file.h"
#include "hf/bpe_tokenizer.h"

namespace moezero::hf {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

void write_json(const fs::path& path, const ordered_json& j) {
  write_output_file(path.string(), j.dump(2) + "\n", "export");
}

}  // namespace

void export_hf_tokenizer(const std::string& tokenizer_json, const std::string& out_dir,
                         int64_t context, int64_t vocab_size) {
  const BpeTokenizer tok(tokenizer_json);  // refuses what transformers would read otherwise
  MOEZERO_REQUIRE(tok.vocab_size() <= vocab_size, "export: the tokenizer '", tokenizer_json,
                  "' has ", tok.vocab_size(), " token ids, more than the model's vocab_size (",
                  vocab_size, ")");
  const fs::path dir(out_dir);
  std::error_code ec;
  fs::copy_file(tokenizer_json, dir / "tokenizer.json", fs::copy_options::overwrite_existing, ec);
  if (ec) MOEZERO_THROW("export: cannot copy the tokenizer '", tokenizer_json, "': ", ec.message());

  const bool has_eot = tok.end_of_text() >= 0;
  const std::string eot = "<|endoftext|>";
  ordered_json cfg;
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  cfg["model_max_length"] = context;
  cfg["clean_up_tokenization_spaces"] = false;
  ordered_json special = ordered_json::object();
  if (has_eot) {
    special["bos_token"] = eot;
    special["eos_token"] = eot;
    cfg["bos_token"] = eot;
    cfg["eos_token"] = eot;
  }
  write_json(dir / "tokenizer_config.json", cfg);
  write_json(dir / "special_tokens_map.json", special);

  ordered_json gen;
  gen["_from_model_config"] = false;
  if (has_eot) {
    gen["bos_token_id"] = tok.end_of_text();
    gen["eos_token_id"] = tok.end_of_text();
  }
  gen["transformers_version"] = "4.40.2";
  write_json(dir / "generation_config.json", gen);
}

}  // namespace moezero::hf
