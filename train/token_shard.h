// train/token_shard.h — llm.c token shards, memory-mapped.
//
// Layout (llm.c dev/data/data_common.py write_datafile): a header of 256 little-endian int32
// words — [0] magic, [1] version, [2] token count, the rest zero — then the tokens:
//   magic 20240520, version 1: uint16 tokens (GPT-2 style vocabularies, < 65536);
//   magic 20240801, version 7: uint32 tokens (larger vocabularies, e.g. Llama 3).
// The file size must be exactly 1024 + count * width bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moezero::train {

inline constexpr int32_t kShardMagicU16 = 20240520, kShardVersionU16 = 1;
inline constexpr int32_t kShardMagicU32 = 20240801, kShardVersionU32 = 7;
inline constexpr int64_t kShardHeaderBytes = 256 * 4;

// One shard file mapped read-only (RAII: unmapped on destruction). Throws moezero::Error naming
// the file and what is wrong: unreadable, shorter than the header, a wrong magic or version, a
// size that does not match the header's token count.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path);
  ~TokenShard();
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  int64_t count() const { return count_; }    // tokens
  int width_bytes() const { return width_; }  // 2 or 4
  const uint8_t* tokens() const { return tokens_; }
  uint32_t at(int64_t i) const;  // token i, i in [0, count)

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const uint8_t* tokens_ = nullptr;
  int64_t count_ = 0;
  int width_ = 2;
};

// Writes `tokens` as an llm.c shard (width 2: magic 20240520; width 4: magic 20240801).
// Throws when a token does not fit the width or the file cannot be written. (Tests, tools.)
void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                       int width_bytes);

// The files `pattern` names: itself when it has no glob characters (it need not exist yet: the
// reader names it), else the sorted matches. Throws "<key>: no file matches '<pattern>'" when a
// glob matches nothing.
std::vector<std::string> expand_shard_paths(const std::string& pattern, const std::string& key);

}  // namespace moezero::train
