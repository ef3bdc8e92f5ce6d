// The C++ byte-level BPE encoder against Hugging Face `tokenizers` 0.19.1: the fixture
// (tests/hf/data) holds a tokenizer that scripts/prepare_data.py trained on multilingual.txt
// (vocabulary 420) and the ids `tokenizers` gave for several texts (the whole multilingual
// file, unseen characters, CR/LF and runs of spaces, added tokens inside text, the empty
// string). Every id must match; decoding gives the text back; bad files are refused.
#include "hf/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moezero::hf {
namespace {

const std::string kData = MOEZERO_SOURCE_DIR "/tests/hf/data/";

TEST(BpeTokenizer, EncodesMultilingualTextExactlyAsTokenizers) {
  BpeTokenizer tok(kData + "multilingual_tokenizer.json");
  EXPECT_EQ(tok.vocab_size(), 420);
  EXPECT_EQ(tok.end_of_text(), 0);
  std::ifstream in(kData + "multilingual_ids.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  ASSERT_GE(cases.size(), 5u);
  size_t total = 0;
  for (const nlohmann::json& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const std::vector<int32_t> want = c.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(text);
    EXPECT_EQ(got, want) << "text: " << text.substr(0, 80);
    EXPECT_EQ(tok.decode(got), text);
    total += want.size();
  }
  EXPECT_GT(total, 1000u);
  // Merges were learned: the English sentence takes fewer ids than bytes.
  EXPECT_LT(tok.encode("The quick brown fox jumps over the lazy dog.").size(), 30u);
  // Invalid UTF-8 still round-trips (bytes of the byte-level alphabet).
  const std::string bad = "ok \xff\xfe end";
  EXPECT_EQ(tok.decode(tok.encode(bad)), bad);
}

TEST(BpeTokenizer, RefusesWhatItCannotEncode) {
  const std::string dir = ::testing::TempDir() + "moezero_bpe_tokenizer_test/";
  std::filesystem::create_directories(dir);
  std::ifstream in(kData + "multilingual_tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in);
  auto write = [&](const nlohmann::json& v) {
    std::ofstream(dir + "t.json") << v.dump();
    return dir + "t.json";
  };
  auto error_of = [&](const nlohmann::json& v) {
    try {
      BpeTokenizer t(write(v));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  nlohmann::json wp = j;
  wp["model"]["type"] = "WordPiece";
  EXPECT_NE(error_of(wp).find("model.type: not BPE"), std::string::npos) << error_of(wp);
  nlohmann::json pre = j;
  pre["pre_tokenizer"]["add_prefix_space"] = true;
  EXPECT_NE(error_of(pre).find("pre_tokenizer: must be ByteLevel"), std::string::npos);
  nlohmann::json norm = j;
  norm["normalizer"] = {{"type", "NFC"}};
  EXPECT_NE(error_of(norm).find("normalizer: must be null"), std::string::npos);
  // Wrong inputs that `tokenizers` refuses too (issue 29): one id for two tokens, a merge of
  // three symbols or of a symbol the vocabulary lacks, a byte without its symbol.
  nlohmann::json dup_id = j;
  dup_id["model"]["vocab"]["&"] = 7;
  EXPECT_NE(error_of(dup_id).find("model.vocab / added_tokens: id 7 is given to both"),
            std::string::npos)
      << error_of(dup_id);
  nlohmann::json three = j;
  three["model"]["merges"][0] = "a b c";
  EXPECT_NE(error_of(three).find("model.merges: entry 'a b c' is not 'a b'"), std::string::npos)
      << error_of(three);
  nlohmann::json unknown = j;
  unknown["model"]["merges"][0] = "a zq";
  EXPECT_NE(error_of(unknown).find("model.merges: entry 'a zq': 'zq' is not in model.vocab"),
            std::string::npos)
      << error_of(unknown);
  nlohmann::json no_byte = j;
  no_byte["model"]["vocab"].erase("&");
  EXPECT_NE(error_of(no_byte).find("model.vocab: lacks the byte-level symbol '&' of byte 38"),
            std::string::npos)
      << error_of(no_byte);
  {  // a token listed twice (JSON keeps the last one)
    std::string text = j.dump();
    const std::string vocab_key = "\"vocab\":{";
    text.insert(text.find(vocab_key) + vocab_key.size(), "\"&\":7,");
    std::ofstream(dir + "dup_key.json") << text;
    try {
      BpeTokenizer t(dir + "dup_key.json");
      ADD_FAILURE() << "a token listed twice was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("key 'model.vocab.&' appears twice"), std::string::npos)
          << e.what();
    }
  }
  std::ofstream(dir + "broken.json") << "{\"model\": ";
  EXPECT_THROW(BpeTokenizer(dir + "broken.json"), Error);
  EXPECT_THROW(BpeTokenizer(dir + "missing.json"), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moezero::hf
