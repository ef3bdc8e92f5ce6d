#include "train/data.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/error.h"
#include "hf/bpe_tokenizer.h"
#include "train/token_shard.h"

namespace moezero::train {

namespace {
uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

std::string builtin_corpus() {
  static const char* kSubjects[] = {"the cat",  "a dog",       "the old man", "my sister",
                                    "the bird", "a small fox", "the teacher", "our neighbour"};
  static const char* kVerbs[] = {"sees", "likes", "follows", "finds", "paints", "feeds"};
  static const char* kObjects[] = {"the red ball", "a green tree", "the river",
                                   "a wooden box", "the moon",     "a yellow kite"};
  static const char* kPlaces[] = {"in the garden", "by the sea", "at home", "in the park",
                                  "under the bridge"};
  std::string out;
  out.reserve(270000);
  uint64_t s = 42;
  auto pick = [&](uint64_t n) { return (s = mix(s)) % n; };
  while (out.size() < 262144) {
    switch (pick(4)) {
      case 0:
      case 1:
        out += kSubjects[pick(8)];
        out += ' ';
        out += kVerbs[pick(6)];
        out += ' ';
        out += kObjects[pick(6)];
        out += ' ';
        out += kPlaces[pick(5)];
        out += ".\n";
        break;
      case 2: {  // counting: "count 3 4 5 6 7."
        int a = static_cast<int>(pick(20));
        out += "count";
        for (int i = 0; i < 5; ++i) out += ' ' + std::to_string(a + i);
        out += ".\n";
        break;
      }
      default: {  // sums of small numbers: "4 + 3 = 7."
        int a = static_cast<int>(pick(10)), b = static_cast<int>(pick(10));
        out +=
            std::to_string(a) + " + " + std::to_string(b) + " = " + std::to_string(a + b) + ".\n";
        break;
      }
    }
  }
  return out;
}

namespace {

uint32_t token_at(const TokenData::Piece& p, int64_t i) {  // i: index into the file
  const uint8_t* at = p.base + i * p.width_bytes;
  if (p.width_bytes == 1) return *at;
  if (p.width_bytes == 2) {
    uint16_t v;
    std::memcpy(&v, at, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, at, 4);
  return v;
}

TokenData::Split make_split(std::vector<TokenData::Piece> pieces, int64_t seq_len) {
  TokenData::Split s;
  s.pieces = std::move(pieces);
  for (const TokenData::Piece& p : s.pieces) {
    s.tokens += p.count;
    s.starts += std::max<int64_t>(0, p.count - seq_len);
  }
  return s;
}

// Splits `all` at token `cut` of the concatenation: [0, cut) to head, the rest to tail.
void cut_pieces(const std::vector<TokenData::Piece>& all, int64_t cut,
                std::vector<TokenData::Piece>& head, std::vector<TokenData::Piece>& tail) {
  int64_t at = 0;
  for (const TokenData::Piece& p : all) {
    const int64_t keep = std::clamp<int64_t>(cut - at, 0, p.count);
    if (keep > 0) head.push_back({p.base, p.width_bytes, p.begin, keep});
    if (keep < p.count) tail.push_back({p.base, p.width_bytes, p.begin + keep, p.count - keep});
    at += p.count;
  }
}

DataConfig bytes_config(const std::string& path, double val_fraction) {
  DataConfig c;
  c.path = path;
  c.val_fraction = val_fraction;
  return c;
}

}  // namespace

TokenData::TokenData(const std::string& path, int64_t vocab_size, int64_t seq_len,
                     double val_fraction)
    : TokenData(bytes_config(path, val_fraction), vocab_size, seq_len) {}

TokenData::~TokenData() = default;

TokenData::TokenData(const DataConfig& data, int64_t vocab_size, int64_t seq_len)
    : seq_len_(seq_len) {
  std::vector<Piece> all;
  load(data.path, "data.path", data.format, vocab_size, all, source_);
  std::vector<Piece> train, val;
  if (!data.val_path.empty()) {
    train = std::move(all);
    load(data.val_path, "data.val_path", data.format, vocab_size, val, val_source_);
  } else {
    int64_t total = 0;
    for (const Piece& p : all) total += p.count;
    const int64_t held = static_cast<int64_t>(static_cast<double>(total) * data.val_fraction);
    cut_pieces(all, total - held, train, val);
    val_source_ = "the last " + std::to_string(held) + " tokens of " + source_;
  }
  if (!data.tokenizer.empty()) {
    std::unique_ptr<hf::BpeTokenizer> loaded;
    try {
      loaded = std::make_unique<hf::BpeTokenizer>(data.tokenizer);
    } catch (const Error& e) {
      MOEZERO_USER_ERROR("data.tokenizer: ", e.message());
    }
    const hf::BpeTokenizer& tok = *loaded;
    MOEZERO_REQUIRE(tok.vocab_size() <= vocab_size, "data.tokenizer: '", data.tokenizer, "' has ",
                    tok.vocab_size(), " token ids, more than model.vocab_size (", vocab_size, ")");
  }
  train_ = make_split(std::move(train), seq_len);
  val_ = make_split(std::move(val), seq_len);
  if (train_.starts <= 0)
    MOEZERO_USER_ERROR("data.path: ", source_, " has ", train_.tokens,
                       " training tokens, fewer than one sequence of model.seq_len + 1 = ",
                       seq_len + 1, data.format == DataFormat::Tokens ? " in any one shard" : "");
}

namespace {
// A data file that is a directory is refused by name (a read would fail with a raw
// "basic_filebuf::underflow ... Is a directory").
void refuse_directory(const std::string& path, const std::string& key) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    MOEZERO_USER_ERROR(key, ": '", path,
                       "' is a directory, not a file (name the file, or a glob of "
                       "token shards with data.format \"tokens\")");
}
}  // namespace

// Appends the pieces of `pattern` (one piece per file) and checks every token < vocab_size.
void TokenData::load(const std::string& pattern, const std::string& key, DataFormat format,
                     int64_t vocab_size, std::vector<Piece>& pieces, std::string& name) {
  if (format == DataFormat::Bytes) {
    std::vector<uint8_t> bytes;
    if (pattern.empty()) {
      const std::string c = builtin_corpus();
      bytes.assign(c.begin(), c.end());
      name = "<built-in corpus>";
    } else {
      refuse_directory(pattern, key);
      std::ifstream in(pattern, std::ios::binary);
      if (!in) MOEZERO_USER_ERROR(key, ": cannot read '", pattern, "'");
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      name = pattern;
      if (bytes.empty()) MOEZERO_USER_ERROR(key, ": '", pattern, "' is empty");
    }
    for (size_t i = 0; i < bytes.size(); ++i)
      if (bytes[i] >= vocab_size)
        MOEZERO_USER_ERROR(key, ": ", name, " has byte ", int(bytes[i]), " at offset ", i,
                           ", outside model.vocab_size (", vocab_size, ")");
    byte_files_.push_back(std::move(bytes));
    const std::vector<uint8_t>& b = byte_files_.back();
    pieces.push_back({b.data(), 1, 0, static_cast<int64_t>(b.size())});
    return;
  }
  MOEZERO_REQUIRE(!pattern.empty(), key, ": data.format \"tokens\" needs a shard file or glob");
  const std::vector<std::string> files = expand_shard_paths(pattern, key);
  name = files.size() == 1 ? "'" + files[0] + "'"
                           : "'" + pattern + "' (" + std::to_string(files.size()) + " shards)";
  for (const std::string& f : files) {
    refuse_directory(f, key);
    std::unique_ptr<TokenShard> shard;
    try {
      shard = std::make_unique<TokenShard>(f);
    } catch (const Error& e) {
      MOEZERO_USER_ERROR(key, ": ", e.message());
    }
    if (shard->count() == 0) MOEZERO_USER_ERROR(key, ": token shard '", f, "' holds no tokens");
    const Piece p{shard->tokens(), shard->width_bytes(), 0, shard->count()};
    for (int64_t i = 0; i < p.count; ++i)
      if (token_at(p, i) >= static_cast<uint64_t>(vocab_size))
        MOEZERO_USER_ERROR(key, ": token shard '", f, "' has token ", token_at(p, i), " at offset ",
                           i, " (token index), outside model.vocab_size (", vocab_size, ")");
    pieces.push_back(p);
    shards_.push_back(std::move(shard));
  }
}

// Window starting at window-start index `start` of `split` (in [0, split.starts)) into row
// `row` of tokens and targets.
void TokenData::fill_window(const Split& split, int64_t start, int64_t row, int32_t* tokens,
                            int32_t* targets) const {
  const int64_t T = seq_len_;
  for (const Piece& p : split.pieces) {
    const int64_t n = std::max<int64_t>(0, p.count - T);
    if (start >= n) {
      start -= n;
      continue;
    }
    const int64_t off = p.begin + start;
    for (int64_t t = 0; t < T; ++t) {
      tokens[row * T + t] = static_cast<int32_t>(token_at(p, off + t));
      targets[row * T + t] = static_cast<int32_t>(token_at(p, off + t + 1));
    }
    return;
  }
  MOEZERO_CHECK(false, "window start beyond the split");
}

void keep_tokenizer(const DataConfig& data, const std::string& save_dir) {
  if (data.tokenizer.empty() || save_dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(save_dir, ec);
  const std::string to = (std::filesystem::path(save_dir) / "tokenizer.json").string();
  std::filesystem::copy_file(data.tokenizer, to, std::filesystem::copy_options::overwrite_existing,
                             ec);
  if (ec)
    MOEZERO_USER_ERROR("data.tokenizer: cannot copy '", data.tokenizer, "' to '", to,
                       "': ", ec.message());
}

void TokenData::batch(uint64_t seed, int64_t m, int64_t row_begin, int64_t rows,
                      std::vector<int32_t>& tokens, std::vector<int32_t>& targets) const {
  const int64_t T = seq_len_;
  tokens.resize(static_cast<size_t>(rows * T));
  targets.resize(static_cast<size_t>(rows * T));
  const auto starts = static_cast<uint64_t>(train_.starts);
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t j = static_cast<uint64_t>(row_begin + r);
    const uint64_t h = mix(mix(seed ^ 0x5eedull) ^ mix(static_cast<uint64_t>(m) * 0x10001ull + j));
    fill_window(train_, static_cast<int64_t>(h % starts), r, tokens.data(), targets.data());
  }
}

void TokenData::val_batch(int64_t b, int64_t batch_rows, int64_t row_begin, int64_t rows,
                          std::vector<int32_t>& tokens, std::vector<int32_t>& targets) const {
  MOEZERO_CHECK(has_validation(), "val_batch without held-out data");
  const int64_t T = seq_len_;
  tokens.resize(static_cast<size_t>(rows * T));
  targets.resize(static_cast<size_t>(rows * T));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t w = b * batch_rows + row_begin + r;  // global window index
    const auto start = static_cast<int64_t>((static_cast<uint64_t>(w) * static_cast<uint64_t>(T)) %
                                            static_cast<uint64_t>(val_.starts));
    fill_window(val_, start, r, tokens.data(), targets.data());
  }
}

}  // namespace moezero::train
