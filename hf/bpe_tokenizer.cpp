// hf/bpe_tokenizer.cpp — byte-level BPE from a tokenizer.json (bpe_tokenizer.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "hf/bpe_tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_duplicates.h"

namespace moezero::hf {

namespace {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to 256 + n.
void byte_alphabet(std::string (&out)[256]) {
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  int n = 0;
  for (int b = 0; b < 256; ++b) out[b] = utf8(printable(b) ? uint32_t(b) : uint32_t(256 + n++));
}

// Splits a UTF-8 string into its characters (bytes of an invalid sequence one by one).
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

struct BpeTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() {
    if (code) pcre2_code_free(code);
  }
};

BpeTokenizer::BpeTokenizer(const std::string& path)
    : path_(path), regex_(std::make_unique<Regex>()) {
  std::ifstream in(path);
  if (!in) MOEZERO_USER_ERROR("tokenizer '", path, "': cannot read");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    MOEZERO_USER_ERROR("tokenizer '", path, "': not valid JSON");
  if (const auto dup = find_duplicate_key(text))  // JSON would keep only the last one
    MOEZERO_USER_ERROR("tokenizer '", path, "': key '", dup->path, "' appears twice (lines ",
                       dup->first_line, " and ", dup->second_line, ")");
  // A field of the wrong type or a missing one (nlohmann's type_error / out_of_range) is refused
  // as the user's error, naming the file (hostile inputs of fuzz/corpus/tokenizer/).
  try {
    load(j);
  } catch (const nlohmann::json::exception& e) {
    MOEZERO_USER_ERROR("tokenizer '", path,
                       "': a field is missing or of the wrong type: ", e.what());
  }
  int err = 0;
  PCRE2_SIZE at = 0;
  regex_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Pattern), PCRE2_ZERO_TERMINATED,
                               PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, nullptr);
  MOEZERO_CHECK(regex_->code != nullptr, "PCRE2 compile error ", err, " at ", at);
}

void BpeTokenizer::load(const nlohmann::json& j) {
  const std::string& path = path_;
  auto refuse = [&](const std::string& key, const std::string& why) {
    MOEZERO_USER_ERROR(
        "tokenizer '", path, "': ", key, ": ", why,
        " (only byte-level BPE tokenizers, as scripts/prepare_data.py writes, are read)");
  };
  const nlohmann::json& m = j.value("model", nlohmann::json());
  if (!m.is_object() || m.value("type", "") != "BPE") refuse("model.type", "not BPE");
  if (!j.value("normalizer", nlohmann::json()).is_null()) refuse("normalizer", "must be null");
  const nlohmann::json& pre = j.value("pre_tokenizer", nlohmann::json());
  if (!pre.is_object() || pre.value("type", "") != "ByteLevel" || !pre.value("use_regex", true) ||
      pre.value("add_prefix_space", false))
    refuse("pre_tokenizer", "must be ByteLevel with use_regex and no add_prefix_space");
  for (const char* k : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"})
    if (m.contains(k) && !m[k].is_null()) refuse(std::string("model.") + k, "must be null");
  if (m.value("byte_fallback", false)) refuse("model.byte_fallback", "must be false");
  if (m.value("ignore_merges", false)) refuse("model.ignore_merges", "must be false");
  byte_alphabet(byte_char_);
  std::map<std::string, unsigned char> char_byte;
  for (int b = 0; b < 256; ++b) char_byte[byte_char_[b]] = static_cast<unsigned char>(b);
  // Ids are dense (0 .. tokens - 1): an id beyond the number of tokens the file lists would
  // make id_bytes_ huge (2^31 strings for one hostile id).
  const size_t max_tokens =
      m.at("vocab").size() + j.value("added_tokens", nlohmann::json::array()).size();
  // An id is a JSON integer in [0, 2^31): a float (1e89) or a larger integer would be
  // converted to int32 out of range (undefined behaviour; found by fuzz/tokenizer_fuzz.cpp).
  auto id_of = [&](const nlohmann::json& v, const char* key) {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX) ||
        (!v.is_number_unsigned() && (v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)))
      refuse(key, "id " + v.dump() + " is not an integer in [0, 2^31)");
    return static_cast<int32_t>(v.get<int64_t>());
  };
  std::vector<std::string> id_token;  // who holds each id, for the duplicate check
  auto set_id = [&](int32_t id, std::string bytes, const std::string& token) {
    if (id < 0) refuse("model.vocab", "negative id");
    if (size_t(id) >= max_tokens)
      refuse("model.vocab / added_tokens", "id " + std::to_string(id) + " is not below the " +
                                               std::to_string(max_tokens) +
                                               " tokens the file lists (ids must be dense)");
    if (size_t(id) >= id_bytes_.size()) {
      id_bytes_.resize(size_t(id) + 1);
      id_token.resize(size_t(id) + 1);
    }
    // One id, one token (an added token may repeat its own vocab entry).
    if (!id_token[size_t(id)].empty() && id_bytes_[size_t(id)] != bytes)
      refuse("model.vocab / added_tokens", "id " + std::to_string(id) + " is given to both '" +
                                               id_token[size_t(id)] + "' and '" + token + "'");
    id_bytes_[size_t(id)] = std::move(bytes);
    id_token[size_t(id)] = token;
  };
  for (const auto& [token, id] : m.at("vocab").items()) {
    vocab_[token] = id_of(id, "model.vocab");
    std::string bytes;
    for (const std::string& c : utf8_chars(token)) {
      auto it = char_byte.find(c);
      bytes += it != char_byte.end() ? std::string(1, static_cast<char>(it->second)) : c;
    }
    set_id(vocab_[token], std::move(bytes), token);
  }
  int rank = 0;
  for (const nlohmann::json& mg : m.at("merges")) {
    std::string a, b;
    if (mg.is_string()) {  // "a b"
      const std::string s = mg.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        refuse("model.merges", "entry '" + s + "' is not 'a b' (two symbols, one space)");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {  // ["a", "b"]
      if (!mg.is_array() || mg.size() != 2)
        refuse("model.merges", "entry " + mg.dump() + " is not a pair [\"a\", \"b\"]");
      a = mg.at(0).get<std::string>();
      b = mg.at(1).get<std::string>();
    }
    // Both symbols and what they merge into are tokens (what `tokenizers` requires).
    for (const std::string& sym : {a, b, a + b})
      if (!vocab_.count(sym))
        refuse("model.merges", "entry '" + a + " " + b + "': '" + sym + "' is not in model.vocab");
    merge_rank_.emplace(std::make_pair(a, b), rank++);
  }
  for (const nlohmann::json& t : j.value("added_tokens", nlohmann::json::array())) {
    const std::string content = t.at("content").get<std::string>();
    const int32_t id = id_of(t.at("id"), "added_tokens.id");
    added_.emplace_back(content, id);
    set_id(id, content, content);
    if (content == "<|endoftext|>") eot_ = id;
  }
  // Every byte is a symbol of the vocabulary: else a text with that byte cannot be encoded.
  for (int b = 0; b < 256; ++b)
    if (!vocab_.count(byte_char_[b]))
      refuse("model.vocab", "lacks the byte-level symbol '" + byte_char_[b] + "' of byte " +
                                std::to_string(b) + " (every byte must be a token)");
  std::stable_sort(added_.begin(), added_.end(),
                   [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
}

BpeTokenizer::~BpeTokenizer() = default;

int64_t BpeTokenizer::vocab_size() const { return static_cast<int64_t>(id_bytes_.size()); }

// One pre-tokenized piece: its bytes in the alphabet, merged by rank, looked up.
void BpeTokenizer::encode_piece(const std::string& piece, std::vector<int32_t>& out) const {
  std::vector<std::string> sym;
  for (unsigned char c : piece) sym.push_back(byte_char_[c]);
  while (sym.size() > 1) {
    int best = INT_MAX;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = merge_rank_.find({sym[i], sym[i + 1]});
      if (it != merge_rank_.end()) best = std::min(best, it->second);
    }
    if (best == INT_MAX) break;
    std::vector<std::string> next;
    for (size_t i = 0; i < sym.size(); ++i) {
      if (i + 1 < sym.size()) {
        auto it = merge_rank_.find({sym[i], sym[i + 1]});
        if (it != merge_rank_.end() && it->second == best) {
          next.push_back(sym[i] + sym[i + 1]);
          ++i;
          continue;
        }
      }
      next.push_back(sym[i]);
    }
    sym = std::move(next);
  }
  for (const std::string& s : sym) {
    auto it = vocab_.find(s);
    MOEZERO_REQUIRE(it != vocab_.end(), "tokenizer '", path_, "': symbol '", s,
                    "' is not in the vocabulary (the byte-level alphabet must be)");
    out.push_back(it->second);
  }
}

std::vector<int32_t> BpeTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> out;
  // Freed also when encode_piece throws (a symbol missing from the vocabulary).
  const std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md_owner(
      pcre2_match_data_create_from_pattern(regex_->code, nullptr), pcre2_match_data_free);
  pcre2_match_data* md = md_owner.get();
  auto split = [&](const std::string& seg) {  // regex pieces of text without added tokens
    size_t pos = 0;
    while (pos < seg.size()) {
      const int rc = pcre2_match(regex_->code, reinterpret_cast<PCRE2_SPTR>(seg.data()), seg.size(),
                                 pos, 0, md, nullptr);
      if (rc < 0) {  // no match left (only invalid UTF-8 remains): bytes as one piece
        encode_piece(seg.substr(pos), out);
        return;
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      if (ov[0] > pos) encode_piece(seg.substr(pos, ov[0] - pos), out);  // invalid bytes
      if (ov[1] == ov[0]) break;                                         // (not reached)
      encode_piece(seg.substr(ov[0], ov[1] - ov[0]), out);
      pos = ov[1];
    }
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t best = std::string::npos;
    const std::pair<std::string, int32_t>* tok = nullptr;
    for (const auto& a : added_) {  // the earliest added token; the longest at a tie
      const size_t f = a.first.empty() ? std::string::npos : text.find(a.first, pos);
      if (f < best) best = f, tok = &a;
    }
    split(text.substr(pos, best == std::string::npos ? std::string::npos : best - pos));
    if (!tok) break;
    out.push_back(tok->second);
    pos = best + tok->first.size();
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  for (int32_t id : ids)
    s += id >= 0 && size_t(id) < id_bytes_.size() ? id_bytes_[size_t(id)]
                                                  : "<" + std::to_string(id) + ">";
  return s;
}

}  // namespace moezero::hf
