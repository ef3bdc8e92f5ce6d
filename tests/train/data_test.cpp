// Data: the batching rule (a rank's rows are its slice of one world-size-independent global
// batch), determinism, the built-in corpus, and errors naming the file.
#include "train/data.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "train/token_shard.h"

namespace moezero::train {
namespace {

TEST(TokenData, RankSlicesConcatenateToTheGlobalBatch) {
  TokenData d("", 256, 32, 0.0);
  std::vector<int32_t> all_tok, all_tgt;
  d.batch(7, 3, 0, 12, all_tok, all_tgt);
  for (int world : {2, 3, 4}) {
    std::vector<int32_t> cat;
    for (int r = 0; r < world; ++r) {
      std::vector<int32_t> tok, tgt;
      d.batch(7, 3, r * 12 / world, 12 / world, tok, tgt);
      cat.insert(cat.end(), tok.begin(), tok.end());
    }
    EXPECT_EQ(cat, all_tok) << "world " << world;
  }
  // Targets are the next tokens of the same window.
  for (int r = 0; r < 12; ++r)
    for (int t = 0; t + 1 < 32; ++t) EXPECT_EQ(all_tgt[r * 32 + t], all_tok[r * 32 + t + 1]);
  // Other micro-batches and seeds differ.
  std::vector<int32_t> other, tgt;
  d.batch(7, 4, 0, 12, other, tgt);
  EXPECT_NE(other, all_tok);
  d.batch(8, 3, 0, 12, other, tgt);
  EXPECT_NE(other, all_tok);
}

TEST(TokenData, BuiltinCorpusIsDeterministicText) {
  std::string a = builtin_corpus(), b = builtin_corpus();
  EXPECT_EQ(a, b);
  EXPECT_GE(a.size(), 200000u);
  EXPECT_NE(a.find(" = "), std::string::npos);
  for (unsigned char c : a) ASSERT_LT(c, 128);
}

TEST(TokenData, ErrorsNameTheFileAndTheProblem) {
  const std::string path = ::testing::TempDir() + "moezero_data_test.txt";
  { std::ofstream(path) << "short"; }
  try {
    TokenData d(path, 256, 32, 0.0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("fewer than one sequence"), std::string::npos);
  }
  try {
    TokenData d(path, 100, 2, 0.0);  // 's' = 115 >= vocab 100
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside model.vocab_size (100)"), std::string::npos);
  }
  { std::ofstream(path, std::ios::trunc); }
  EXPECT_THROW(TokenData(path, 256, 4, 0.0), Error);
  std::remove(path.c_str());
  EXPECT_THROW(TokenData("/nonexistent/x.txt", 256, 4, 0.0), Error);
}

// A scratch folder of this test only (tests run in parallel).
std::string scratch(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "moezero_data_test_" + name + "/";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<uint32_t> ramp(int64_t n, uint32_t mod, uint32_t first = 0) {
  std::vector<uint32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (first + uint32_t(i)) % mod;
  return v;
}

DataConfig shards(const std::string& path, const std::string& val_path = "",
                  double val_fraction = 0.0) {
  DataConfig c;
  c.format = DataFormat::Tokens;
  c.path = path;
  c.val_path = val_path;
  c.val_fraction = val_fraction;
  return c;
}

TEST(TokenShards, ReadBothWidthsAndAGlobAsOneStream) {
  const std::string dir = scratch("widths");
  write_token_shard(dir + "a_000.bin", ramp(100, 50000), 2);
  write_token_shard(dir + "a_001.bin", ramp(80, 100000, 70000), 4);
  TokenShard s16(dir + "a_000.bin"), s32(dir + "a_001.bin");
  EXPECT_EQ(s16.width_bytes(), 2);
  EXPECT_EQ(s16.count(), 100);
  EXPECT_EQ(s16.at(99), 99u);
  EXPECT_EQ(s32.width_bytes(), 4);
  EXPECT_EQ(s32.at(5), 70005u);

  TokenData d(shards(dir + "a_*.bin"), 100000, 16);
  EXPECT_EQ(d.train_tokens(), 180);
  EXPECT_NE(d.source().find("2 shards"), std::string::npos) << d.source();
  EXPECT_FALSE(d.has_validation());
  // Every window is consecutive ids inside one shard (ramps), never across the boundary.
  std::vector<int32_t> tok, tgt;
  bool saw16 = false, saw32 = false;
  for (int m = 0; m < 20; ++m) {
    d.batch(3, m, 0, 8, tok, tgt);
    for (int r = 0; r < 8; ++r) {
      const int32_t first = tok[size_t(r * 16)];
      (first >= 70000 ? saw32 : saw16) = true;
      for (int t = 0; t < 16; ++t) {
        EXPECT_EQ(tok[size_t(r * 16 + t)], first + t);
        EXPECT_EQ(tgt[size_t(r * 16 + t)], first + t + 1);
      }
    }
  }
  EXPECT_TRUE(saw16);
  EXPECT_TRUE(saw32);
}

TEST(TokenShards, HeldOutPartIsFixedAndIndependentOfTheRankSplit) {
  const std::string dir = scratch("val");
  write_token_shard(dir + "train.bin", ramp(1000, 60000), 2);
  write_token_shard(dir + "val.bin", ramp(200, 60000, 5000), 2);
  TokenData d(shards(dir + "train.bin", dir + "val.bin"), 60000, 8);
  ASSERT_TRUE(d.has_validation());
  EXPECT_EQ(d.val_tokens(), 200);
  std::vector<int32_t> all, tgt, part;
  d.val_batch(1, 4, 0, 4, all, tgt);
  EXPECT_EQ(all[0], 5000 + 4 * 8);  // window 4 starts at 4 * seq_len
  std::vector<int32_t> cat;
  for (int r = 0; r < 4; r += 2) {
    d.val_batch(1, 4, r, 2, part, tgt);
    cat.insert(cat.end(), part.begin(), part.end());
  }
  EXPECT_EQ(cat, all);
  // val_fraction cuts the tail of the training stream: 10% of 1000 tokens.
  TokenData f(shards(dir + "train.bin", "", 0.1), 60000, 8);
  EXPECT_EQ(f.train_tokens(), 900);
  EXPECT_EQ(f.val_tokens(), 100);
  f.val_batch(0, 1, 0, 1, part, tgt);
  EXPECT_EQ(part[0], 900);
  for (int m = 0; m < 50; ++m) {
    f.batch(1, m, 0, 4, part, tgt);
    for (int32_t t : tgt) EXPECT_LT(t, 900);  // training never reads the held-out tail
  }
}

TEST(TokenShards, BadShardsAreRefusedNamingTheFile) {
  const std::string dir = scratch("bad");
  const std::string good = dir + "good.bin";
  write_token_shard(good, ramp(64, 300), 2);
  auto load = [&](const std::string& path, int64_t vocab = 300, const std::string& val = "") {
    TokenData(shards(path, val), vocab, 8);
  };
  // Wrong magic.
  {
    std::fstream f(dir + "magic.bin", std::ios::out | std::ios::binary);
    std::vector<char> zeros(2048, 0);
    f.write(zeros.data(), zeros.size());
  }
  std::string e = error_of([&] { load(dir + "magic.bin"); });
  EXPECT_NE(e.find("data.path"), std::string::npos) << e;
  EXPECT_NE(e.find(dir + "magic.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("wrong magic 0"), std::string::npos) << e;
  // Truncated: the header says 64 tokens, the file holds fewer.
  std::filesystem::copy_file(good, dir + "trunc.bin");
  std::filesystem::resize_file(dir + "trunc.bin", 1024 + 100);
  e = error_of([&] { load(dir + "trunc.bin"); });
  EXPECT_NE(e.find(dir + "trunc.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated: the header says 64 tokens"), std::string::npos) << e;
  std::filesystem::resize_file(dir + "trunc.bin", 500);
  e = error_of([&] { load(dir + "trunc.bin"); });
  EXPECT_NE(e.find("shorter than the 1024-byte header"), std::string::npos) << e;
  // Ids beyond the vocabulary: the first one, with its offset.
  e = error_of([&] { load(good, 50); });
  EXPECT_NE(e.find("token shard '" + good + "' has token 50 at offset 50"), std::string::npos) << e;
  EXPECT_NE(e.find("model.vocab_size (50)"), std::string::npos) << e;
  // An empty glob, for the training and the held-out key.
  e = error_of([&] { load(dir + "nothing_*.bin"); });
  EXPECT_NE(e.find("data.path: no file matches '" + dir + "nothing_*.bin'"), std::string::npos)
      << e;
  e = error_of([&] { load(good, 300, dir + "nothing_*.bin"); });
  EXPECT_NE(e.find("data.val_path: no file matches"), std::string::npos) << e;
  // A missing file; a wrong version; a shard shorter than one sequence.
  e = error_of([&] { load(dir + "missing.bin"); });
  EXPECT_NE(e.find("token shard '" + dir + "missing.bin': cannot open"), std::string::npos) << e;
  std::filesystem::copy_file(good, dir + "version.bin");
  {
    std::fstream f(dir + "version.bin", std::ios::in | std::ios::out | std::ios::binary);
    const int32_t v = 7;
    f.seekp(4);
    f.write(reinterpret_cast<const char*>(&v), 4);
  }
  e = error_of([&] { load(dir + "version.bin"); });
  EXPECT_NE(e.find("version 7 for magic 20240520"), std::string::npos) << e;
  write_token_shard(dir + "short.bin", ramp(8, 300), 2);
  e = error_of([&] { load(dir + "short.bin"); });
  EXPECT_NE(e.find("fewer than one sequence"), std::string::npos) << e;
}

TEST(TokenData, BytesFormatKeepsItsBatchesAndHoldsOutTheTail) {
  // The bytes format with val_fraction: the training windows never reach the held-out tail and
  // evaluation windows come from it.
  TokenData d("", 256, 32, 0.25);
  const std::string c = builtin_corpus();
  EXPECT_EQ(d.train_tokens() + d.val_tokens(), int64_t(c.size()));
  ASSERT_TRUE(d.has_validation());
  std::vector<int32_t> tok, tgt;
  d.val_batch(0, 2, 0, 2, tok, tgt);
  for (int t = 0; t < 32; ++t) EXPECT_EQ(tok[size_t(t)], uint8_t(c[size_t(d.train_tokens() + t)]));
  EXPECT_FALSE(TokenData("", 256, 32, 0.0).has_validation());
}

}  // namespace
}  // namespace moezero::train
