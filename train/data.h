// train/data.h — training data: a token stream (a text file whose bytes are tokens, the built-in
// corpus, or llm.c token shards, train/token_shard.h), its held-out part, and the batches every
// rank takes from them.
//
// Batching rule (what makes runs at different world sizes comparable step by step): the
// global micro-batch m (= step * grad_accum_steps + micro) holds `batch` sequences of
// seq_len + 1 tokens; sequence j starts at a pseudo-random offset that is a pure function of
// (seed, m, j). Rank r of W takes sequences [r * batch / W, (r + 1) * batch / W). The global
// batch is therefore the same whatever the world size; W must divide `batch`.
// A window never crosses a file (shard) boundary: the offsets are drawn from the windows that
// fit inside one piece of the stream.
//
// Held-out part: data.val_path (files of the same format) or else the last data.val_fraction
// of the training stream (cut from the end of the concatenated files). Evaluation batch b is
// fixed (no seed): its global row j is window b * rows + j of the held-out part, windows taken
// every seq_len tokens (wrapping around), so every evaluation and every world size sees the
// same tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"

namespace moezero::train {

class TokenShard;

class TokenData {
 public:
  // Reads data.path / data.val_path in data.format (bytes: one file, its bytes are tokens; an
  // empty path is builtin_corpus(); tokens: a shard file or a glob of shards, mapped). Throws
  // naming the key, the file and what is wrong: unreadable or empty, a bad shard
  // (token_shard.h), a glob that matches nothing, a token >= vocab_size (with its offset), or
  // no window of seq_len + 1 tokens in the training part.
  TokenData(const DataConfig& data, int64_t vocab_size, int64_t seq_len);
  // Bytes format shorthand (tests): path, no val_path.
  TokenData(const std::string& path, int64_t vocab_size, int64_t seq_len, double val_fraction);
  ~TokenData();
  TokenData(const TokenData&) = delete;
  TokenData& operator=(const TokenData&) = delete;

  // Fills tokens and targets (rows, seq_len) for rows [row_begin, row_begin + rows) of global
  // micro-batch m: targets are tokens shifted by one.
  void batch(uint64_t seed, int64_t m, int64_t row_begin, int64_t rows,
             std::vector<int32_t>& tokens, std::vector<int32_t>& targets) const;
  // Rows [row_begin, row_begin + rows) of evaluation batch b, which has batch_rows rows in all
  // (the held-out part; see above). Requires has_validation().
  void val_batch(int64_t b, int64_t batch_rows, int64_t row_begin, int64_t rows,
                 std::vector<int32_t>& tokens, std::vector<int32_t>& targets) const;

  // True when the held-out part holds at least one window of seq_len + 1 tokens.
  bool has_validation() const { return val_.starts > 0; }
  int64_t train_tokens() const { return train_.tokens; }
  int64_t val_tokens() const { return val_.tokens; }
  const std::string& source() const { return source_; }
  const std::string& val_source() const { return val_source_; }

  // A contiguous run of tokens inside one file (a window never crosses two pieces).
  struct Piece {
    const uint8_t* base = nullptr;  // token 0 of the file
    int width_bytes = 1;            // 1 (bytes), 2 or 4
    int64_t begin = 0, count = 0;   // tokens [begin, begin + count) of the file
  };
  struct Split {
    std::vector<Piece> pieces;
    int64_t tokens = 0;
    int64_t starts = 0;  // window starts: sum over pieces of max(0, count - seq_len)
  };

 private:
  void load(const std::string& pattern, const std::string& key, DataFormat format,
            int64_t vocab_size, std::vector<Piece>& pieces, std::string& name);
  void fill_window(const Split& split, int64_t start, int64_t row, int32_t* tokens,
                   int32_t* targets) const;

  std::vector<std::vector<uint8_t>> byte_files_;     // bytes format: the files' contents
  std::vector<std::unique_ptr<TokenShard>> shards_;  // tokens format: the mapped shards
  Split train_, val_;
  int64_t seq_len_ = 0;
  std::string source_, val_source_;
};

// Copies data.tokenizer (when set) to save_dir/tokenizer.json (when save_dir is set), so that
// `moezero generate --checkpoint` and `moezero export` find it. Throws naming the files.
void keep_tokenizer(const DataConfig& data, const std::string& save_dir);

// A deterministic English-like corpus (~256 KiB) with structure a small model learns within a
// few hundred steps: a fixed vocabulary of words in templated sentences, counting sequences
// and simple sums. Identical on every machine.
std::string builtin_corpus();

}  // namespace moezero::train
