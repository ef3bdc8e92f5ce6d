// tests/core/error_test.cpp — user errors carry no source location in what(); internal errors
// (MOEZERO_THROW, MOEZERO_CHECK) keep "[file:line]".
#include "core/error.h"

#include <gtest/gtest.h>

#include <string>

#include "core/config.h"

namespace moezero {
namespace {

bool has_location(const std::string& what) {
  return what.find("error_test.cpp:") != std::string::npos;
}

TEST(Error, RequireIsAUserErrorWithoutLocation) {
  try {
    MOEZERO_REQUIRE(1 + 1 == 3, "flag --x: got ", 3);
    FAIL() << "no throw";
  } catch (const UserError& e) {
    EXPECT_STREQ(e.what(), "flag --x: got 3");
    EXPECT_TRUE(e.user_error());
    EXPECT_NE(std::string(e.file()).find("error_test.cpp"),
              std::string::npos);  // kept for debugging
  }
}

TEST(Error, InternalErrorsKeepTheLocation) {
  try {
    MOEZERO_CHECK(1 + 1 == 3, "n ", 3);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_FALSE(e.user_error());
    EXPECT_TRUE(has_location(e.what())) << e.what();
  }
  try {
    MOEZERO_THROW("internal ", 1);
  } catch (const Error& e) {
    EXPECT_TRUE(has_location(e.what())) << e.what();
    EXPECT_EQ(e.message(), "internal 1");
  }
}

TEST(Error, OutOfMemoryHasNoLocation) {
  try {
    MOEZERO_THROW_AS(OutOfMemoryError, "out of memory: 5 bytes");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "out of memory: 5 bytes");
  }
}

TEST(Error, ConfigErrorsAreUserErrors) {
  try {
    parse_config(R"({"train": {"lr": 0.1,}})", "bad.json", {});
    FAIL() << "no throw";
  } catch (const UserError& e) {
    EXPECT_FALSE(has_location(e.what()));
    EXPECT_EQ(std::string(e.what()).find("config.cpp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("bad.json: not valid JSON"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace moezero

namespace moezero {
namespace {
// Found by fuzz/config_fuzz.cpp: a number out of double's range escaped as nlohmann's
// out_of_range (no file named); now a UserError naming the source.
TEST(Error, ConfigNumberOverflowNamesTheFile) {
  try {
    parse_config(R"({"model": {"d_model": 1e400}})", "big.json", {});
    FAIL() << "no throw";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("big.json: not valid JSON"), std::string::npos)
        << e.what();
  }
}
}  // namespace
}  // namespace moezero
