// train/token_shard.cpp — mapping, checking and writing llm.c token shards (token_shard.h).
#include "train/token_shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace moezero::train {

TokenShard::TokenShard(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0)
    MOEZERO_USER_ERROR("token shard '", path, "': cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    MOEZERO_USER_ERROR("token shard '", path, "': not a regular file");
  }
  const auto size = static_cast<int64_t>(st.st_size);
  if (size < kShardHeaderBytes) {
    ::close(fd);
    MOEZERO_USER_ERROR("token shard '", path, "': truncated: ", size, " bytes, shorter than the ",
                       kShardHeaderBytes, "-byte header");
  }
  map_ = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    MOEZERO_USER_ERROR("token shard '", path, "': mmap failed (", std::strerror(errno), ")");
  }
  map_bytes_ = static_cast<size_t>(size);
  int32_t header[3];
  std::memcpy(header, map_, sizeof header);
  const int32_t magic = header[0], version = header[1];
  if (magic == kShardMagicU16) {
    width_ = 2;
    if (version != kShardVersionU16)
      MOEZERO_USER_ERROR("token shard '", path, "': version ", version, " for magic ", magic,
                         " (uint16 tokens), expected ", kShardVersionU16);
  } else if (magic == kShardMagicU32) {
    width_ = 4;
    if (version != kShardVersionU32)
      MOEZERO_USER_ERROR("token shard '", path, "': version ", version, " for magic ", magic,
                         " (uint32 tokens), expected ", kShardVersionU32);
  } else {
    MOEZERO_USER_ERROR("token shard '", path, "': wrong magic ", magic,
                       " (an llm.c shard starts with ", kShardMagicU16, " for uint16 or ",
                       kShardMagicU32, " for uint32 tokens)");
  }
  count_ = header[2];
  const int64_t want = kShardHeaderBytes + count_ * width_;
  if (count_ < 0 || size != want)
    MOEZERO_USER_ERROR("token shard '", path, "': ", size < want ? "truncated: " : "",
                       "the header says ", count_, " tokens (", want,
                       " bytes with the header) but the file has ", size, " bytes");
  tokens_ = static_cast<const uint8_t*>(map_) + kShardHeaderBytes;
}

TokenShard::~TokenShard() {
  if (map_) ::munmap(map_, map_bytes_);
}

uint32_t TokenShard::at(int64_t i) const {
  if (width_ == 2) {
    uint16_t v;
    std::memcpy(&v, tokens_ + i * 2, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, tokens_ + i * 4, 4);
  return v;
}

void write_token_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                       int width_bytes) {
  MOEZERO_REQUIRE(width_bytes == 2 || width_bytes == 4, "token shard '", path,
                  "': token width must be 2 or 4 bytes, got ", width_bytes);
  MOEZERO_REQUIRE(tokens.size() < (1ull << 31), "token shard '", path, "': ", tokens.size(),
                  " tokens do not fit the header's int32 count");
  int32_t header[256] = {};
  header[0] = width_bytes == 2 ? kShardMagicU16 : kShardMagicU32;
  header[1] = width_bytes == 2 ? kShardVersionU16 : kShardVersionU32;
  header[2] = static_cast<int32_t>(tokens.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) MOEZERO_USER_ERROR("token shard '", path, "': cannot write");
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (width_bytes == 2) {
      MOEZERO_REQUIRE(tokens[i] < 65536, "token shard '", path, "': token ", tokens[i],
                      " at offset ", i, " does not fit uint16");
      const auto v = static_cast<uint16_t>(tokens[i]);
      out.write(reinterpret_cast<const char*>(&v), 2);
    } else {
      out.write(reinterpret_cast<const char*>(&tokens[i]), 4);
    }
  }
  if (!out.flush()) MOEZERO_USER_ERROR("token shard '", path, "': write failed");
}

std::vector<std::string> expand_shard_paths(const std::string& pattern, const std::string& key) {
  if (pattern.find_first_of("*?[") == std::string::npos) return {pattern};
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (out.empty()) MOEZERO_USER_ERROR(key, ": no file matches '", pattern, "'");
  return out;  // glob sorts its matches
}

}  // namespace moezero::train
