#include "train/data.h"

#include <fstream>
#include <iterator>
#include <sstream>

#include "core/error.h"

namespace moezero::moe {

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

TokenData::TokenData(const std::string& path, int64_t vocab_size, int64_t seq_len,
                     double val_fraction)
    : seq_len_(seq_len) {
  if (path.empty()) {
    std::string c = builtin_corpus();
    bytes_.assign(c.begin(), c.end());
    source_ = "<built-in corpus>";
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) MOEZERO_USER_ERROR("data.path: cannot read '", path, "'");
    bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    source_ = path;
    if (bytes_.empty()) MOEZERO_USER_ERROR("data.path: '", path, "' is empty");
  }
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (bytes_[i] >= vocab_size)
      MOEZERO_USER_ERROR("data.path: ", source_, " has byte ", int(bytes_[i]), " at offset ", i,
                         ", outside model.vocab_size (", vocab_size, ")");
  const auto total = static_cast<int64_t>(bytes_.size());
  train_end_ = total - static_cast<int64_t>(static_cast<double>(total) * val_fraction);
  if (train_end_ < seq_len + 1)
    MOEZERO_USER_ERROR("data.path: ", source_, " has ", train_end_,
                       " training bytes, fewer than one ",
                       "sequence of model.seq_len + 1 = ", seq_len + 1);
}

void TokenData::batch(uint64_t seed, int64_t m, int64_t row_begin, int64_t rows,
                      std::vector<int32_t>& tokens, std::vector<int32_t>& targets) const {
  const int64_t T = seq_len_;
  tokens.resize(static_cast<size_t>(rows * T));
  targets.resize(static_cast<size_t>(rows * T));
  const uint64_t starts = static_cast<uint64_t>(train_end_ - T);  // offsets [0, starts)
  for (int64_t r = 0; r < rows; ++r) {
    const uint64_t j = static_cast<uint64_t>(row_begin + r);
    const uint64_t h = mix(mix(seed ^ 0x5eedull) ^ mix(static_cast<uint64_t>(m) * 0x10001ull + j));
    const int64_t off = static_cast<int64_t>(h % starts);
    for (int64_t t = 0; t < T; ++t) {
      tokens[static_cast<size_t>(r * T + t)] = bytes_[static_cast<size_t>(off + t)];
      targets[static_cast<size_t>(r * T + t)] = bytes_[static_cast<size_t>(off + t + 1)];
    }
  }
}

}  // namespace moezero::moe
