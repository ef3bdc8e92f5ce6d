// train/data.h — training data: a byte-level token stream (a text file, or a built-in corpus
// with learnable structure) and the batches every rank takes from it.
//
// Batching rule (what makes runs at different world sizes comparable step by step): the
// global micro-batch m (= step * grad_accum_steps + micro) holds `batch` sequences of
// seq_len + 1 tokens; sequence j starts at a pseudo-random offset that is a pure function of
// (seed, m, j). Rank r of W takes sequences [r * batch / W, (r + 1) * batch / W). The global
// batch is therefore the same whatever the world size; W must divide `batch`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moezero::moe {

class TokenData {
 public:
  // Reads `path` (bytes are tokens, so vocab_size must be >= 256 unless the file's bytes are
  // all below vocab_size); an empty path uses builtin_corpus(). Throws naming the file when it
  // cannot be read, is empty, holds a byte >= vocab_size or is shorter than seq_len + 1.
  // The last `val_fraction` of the stream is held out (validation_tokens()).
  TokenData(const std::string& path, int64_t vocab_size, int64_t seq_len, double val_fraction);

  // Fills tokens and targets (batch_rows, seq_len) for rows [row_begin, row_begin + rows) of
  // global micro-batch m: targets are tokens shifted by one.
  void batch(uint64_t seed, int64_t m, int64_t row_begin, int64_t rows,
             std::vector<int32_t>& tokens, std::vector<int32_t>& targets) const;

  int64_t train_tokens() const { return train_end_; }
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  const std::string& source() const { return source_; }

 private:
  std::vector<uint8_t> bytes_;
  int64_t train_end_ = 0;
  int64_t seq_len_ = 0;
  std::string source_;
};

// A deterministic English-like corpus (~256 KiB) with structure a small model learns within a
// few hundred steps: a fixed vocabulary of words in templated sentences, counting sequences
// and simple sums. Identical on every machine.
std::string builtin_corpus();

}  // namespace moezero::moe
