// hf/bpe_tokenizer.h — a Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2 style,
// what scripts/prepare_data.py writes), encoded and decoded in C++.
//
// Encoding, as `tokenizers` does it for such a file: the added tokens (e.g. <|endoftext|>) are
// matched first, as whole strings, and become their ids; the rest is split by the GPT-2
// pre-tokenizer regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (PCRE2, UTF-8 with Unicode classes); each piece's bytes are mapped to the byte-level
// alphabet (GPT-2's bytes_to_unicode) and merged by BPE, lowest merge rank first; the merged
// symbols are looked up in the vocabulary. Decoding maps ids back to bytes.
// Refused when loading (naming the file and key): a model other than BPE, a normalizer, a
// pre-tokenizer other than ByteLevel with use_regex and no prefix space, dropout, byte
// fallback, continuing-subword prefixes or end-of-word suffixes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace moezero::hf {

class BpeTokenizer {
 public:
  explicit BpeTokenizer(const std::string& tokenizer_json_path);
  ~BpeTokenizer();
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // unknown ids: "<id>"
  int64_t vocab_size() const;  // largest id + 1 (model vocabulary and added tokens)
  // The id of "<|endoftext|>" when the file has it, else -1.
  int32_t end_of_text() const { return eot_; }
  const std::string& path() const { return path_; }

 private:
  void encode_piece(const std::string& piece, std::vector<int32_t>& out) const;
  void load(const nlohmann::json& j);  // the vocabulary, merges and added tokens of the file

  std::string path_;
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_bytes_;  // id -> its bytes
  std::map<std::pair<std::string, std::string>, int> merge_rank_;
  std::vector<std::pair<std::string, int32_t>> added_;  // longest first
  std::string byte_char_[256];                          // byte -> its alphabet symbol
  int32_t eot_ = -1;
  struct Regex;
  std::unique_ptr<Regex> regex_;
};

}  // namespace moezero::hf
