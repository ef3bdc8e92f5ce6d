// hf/safetensors: write/read round trips (F32, BF16, metadata, header alignment) and every
// refusal of a malformed file, each naming the file and, where there is one, the tensor.
#include "hf/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/dtype.h"
#include "core/error.h"

namespace moezero::hf {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("moezero_st_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

std::vector<uint8_t> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A file made of a given header text and data buffer.
std::vector<uint8_t> craft(const std::string& header, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> b(8 + header.size() + data.size());
  const uint64_t n = header.size();
  std::memcpy(b.data(), &n, 8);
  std::copy(header.begin(), header.end(), b.begin() + 8);
  std::copy(data.begin(), data.end(), b.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return b;
}

// Expects parse to throw with every piece of `parts` in the message.
void expect_refused(const std::vector<uint8_t>& bytes, const std::vector<std::string>& parts) {
  try {
    SafetensorsFile::parse(bytes, "bad.safetensors");
    ADD_FAILURE() << "accepted; expected an error with '" << parts.front() << "'";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("bad.safetensors"), std::string::npos) << e.message();
    for (const auto& p : parts)
      EXPECT_NE(e.message().find(p), std::string::npos)
          << "missing '" << p << "' in: " << e.message();
  }
}

TEST(Safetensors, F32RoundTripKeepsOrderValuesAndMetadata) {
  const fs::path path = temp_dir() / "roundtrip.safetensors";
  std::vector<float> a(12), b(5), c(1);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.1f * float(i) - 0.7f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = -3.5f + float(i) * 1e-7f;
  c[0] = 42.0f;
  write_safetensors(
      path.string(),
      {{"z.weight", {3, 4}, a.data()}, {"a.bias", {5}, b.data()}, {"scalar", {}, c.data()}},
      SafetensorsDType::F32, {{"format", "pt"}, {"note", "x"}});
  const std::vector<uint8_t> bytes = file_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "header padded to 8 bytes";
  EXPECT_EQ(bytes.size(), 8 + n + (12 + 5 + 1) * 4);
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));

  const SafetensorsFile f = SafetensorsFile::read(path.string());
  ASSERT_EQ(f.entries().size(), 3u);
  EXPECT_EQ(f.entries()[0].name, "z.weight");  // file order = offset order
  EXPECT_EQ(f.entries()[1].name, "a.bias");
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.metadata().at("note"), "x");
  const SafetensorsEntry* e = f.find("z.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, "F32");
  EXPECT_EQ(e->shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(f.to_f32(*e), a);
  EXPECT_EQ(f.to_f32(*f.find("a.bias")), b);
  EXPECT_EQ(f.find("scalar")->shape.size(), 0u);
  EXPECT_EQ(f.to_f32(*f.find("scalar")), c);
  EXPECT_EQ(f.find("missing"), nullptr);
}

TEST(Safetensors, Bf16RoundTripRoundsToNearestEven) {
  const fs::path path = temp_dir() / "bf16.safetensors";
  std::vector<float> a = {1.0f, 1.00390625f, -2.718281828f, 3.14159265f, 1e-20f, 65504.0f};
  write_safetensors(path.string(), {{"w", {2, 3}, a.data()}}, SafetensorsDType::BF16, {});
  const SafetensorsFile f = SafetensorsFile::read(path.string());
  EXPECT_EQ(f.find("w")->dtype, "BF16");
  EXPECT_EQ(f.find("w")->end - f.find("w")->begin, 12u);
  const std::vector<float> back = f.to_f32(*f.find("w"));
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(back[i], bf16_to_float(float_to_bf16(a[i]))) << i;
  EXPECT_NE(back[3], a[3]);  // it really is bf16
}

TEST(Safetensors, ReadsF16AndF64AndRefusesIntegersAsParameters) {
  // F16 1.5 = 0x3E00, F64 -0.25; I32 7.
  std::vector<uint8_t> data(2 + 8 + 4);
  const uint16_t h = 0x3E00;
  const double d = -0.25;
  const int32_t i = 7;
  std::memcpy(data.data(), &h, 2);
  std::memcpy(data.data() + 2, &d, 8);
  std::memcpy(data.data() + 10, &i, 4);
  const auto f = SafetensorsFile::parse(
      craft(
          R"({"h":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"d":{"dtype":"F64","shape":[1],"data_offsets":[2,10]},"i":{"dtype":"I32","shape":[1],"data_offsets":[10,14]}})",
          data),
      "mixed.safetensors");
  EXPECT_EQ(f.to_f32(*f.find("h")), std::vector<float>{1.5f});
  EXPECT_EQ(f.to_f32(*f.find("d")), std::vector<float>{-0.25f});
  try {
    f.to_f32(*f.find("i"));
    ADD_FAILURE() << "I32 loaded as a parameter";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("mixed.safetensors: tensor 'i' has dtype I32"), std::string::npos)
        << e.message();
  }
}

TEST(Safetensors, RefusesTruncatedFiles) {
  expect_refused({1, 2, 3}, {"truncated: 3 bytes"});
  expect_refused({100, 0, 0, 0, 0, 0, 0, 0, '{', '}'},
                 {"header length says 100 bytes but only 2 follow"});
  // A valid file with its last bytes cut off: the last tensor runs past the buffer.
  const fs::path path = temp_dir() / "cut.safetensors";
  std::vector<float> a(8, 1.0f);
  write_safetensors(path.string(), {{"w", {8}, a.data()}}, SafetensorsDType::F32, {});
  std::vector<uint8_t> bytes = file_bytes(path);
  bytes.resize(bytes.size() - 4);
  expect_refused(bytes,
                 {"tensor 'w'", "data_offsets [0, 32) run past the data buffer of 28 bytes"});
  std::vector<uint8_t> huge(8, 0xff);
  expect_refused(huge, {"exceeds the format's limit"});
}

TEST(Safetensors, RefusesBadHeaders) {
  expect_refused(craft("{not json", {}), {"not valid JSON"});
  expect_refused(craft("[1, 2]", {}), {"the header is array, not a JSON object"});
  expect_refused(craft(R"({"w": 3})", {}), {"tensor 'w'", "not an object"});
  expect_refused(craft(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", std::vector<uint8_t>(4)),
                 {"tensor 'w'", "missing string field 'dtype'"});
  expect_refused(craft(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", std::vector<uint8_t>(4)),
                 {"tensor 'w'", "missing array field 'shape'"});
  expect_refused(
      craft(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::vector<uint8_t>(4)),
      {"tensor 'w'", "not a non-negative integer"});
  expect_refused(
      craft(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", std::vector<uint8_t>(4)),
      {"tensor 'w'", "'data_offsets' must be two non-negative integers"});
  expect_refused(
      craft(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", std::vector<uint8_t>(4)),
      {"tensor 'w'", "unknown dtype 'Q4'"});
  expect_refused(craft(R"({"__metadata__":{"format":1}})", {}),
                 {"__metadata__ value of 'format' is number"});
  expect_refused(
      craft(
          R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
          std::vector<uint8_t>(4)),
      {"tensor 'w' appears twice"});
}

TEST(Safetensors, RefusesOffsetsThatDoNotMatchTheData) {
  // Wrong dtype size: F32 (3) needs 12 bytes, the offsets give 8.
  expect_refused(
      craft(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::vector<uint8_t>(8)),
      {"tensor 'w'", "hold 8 bytes but dtype F32 with shape [3] needs 12"});
  // BF16 (3) is 6 bytes, not 12.
  expect_refused(craft(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,12]}})",
                       std::vector<uint8_t>(12)),
                 {"tensor 'w'", "needs 6"});
  // Out of range.
  expect_refused(
      craft(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", std::vector<uint8_t>(8)),
      {"tensor 'w'", "run past the data buffer of 8 bytes"});
  // End before begin.
  expect_refused(
      craft(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", std::vector<uint8_t>(8)),
      {"tensor 'w'", "end before they begin"});
  // A gap between tensors.
  expect_refused(
      craft(
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
          std::vector<uint8_t>(12)),
      {"tensor 'b' begins at byte 8", "the previous tensor ends at 4"});
  // Overlap.
  expect_refused(
      craft(
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          std::vector<uint8_t>(8)),
      {"overlaps the previous one"});
  // Trailing bytes no tensor covers.
  expect_refused(
      craft(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::vector<uint8_t>(6)),
      {"the tensors cover 4 bytes of a 6-byte data buffer"});
}

TEST(Safetensors, MissingFileIsNamed) {
  try {
    SafetensorsFile::read("/nonexistent/dir/model.safetensors");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("/nonexistent/dir/model.safetensors: cannot open"),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace moezero::hf
