// Data: the batching rule (a rank's rows are its slice of one world-size-independent global
// batch), determinism, the built-in corpus, and errors naming the file.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/error.h"
#include "train/data.h"

namespace moezero::moe {
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
  {
    std::ofstream(path) << "short";
  }
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

}  // namespace
}  // namespace moezero::moe
