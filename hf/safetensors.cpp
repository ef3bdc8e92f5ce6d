// hf/safetensors.cpp — the safetensors reader (with the reference implementation's checks)
// and writer (see safetensors.h).
#include "hf/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "core/dtype.h"
#include "core/error.h"
#include "core/output_file.h"

namespace moezero::hf {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; this code copies it as is");

namespace {

// Same limit as the reference implementation (a header is names and shapes, never data).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

// Bytes per element of the format's dtype names; 0 when unknown.
uint64_t dtype_bytes(const std::string& dt) {
  static const std::map<std::string, uint64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
  auto it = sizes.find(dt);
  return it == sizes.end() ? 0 : it->second;
}

// The little-endian u64 that opens the file: the header's length, checked against the
// format's limit and the bytes that follow it.
uint64_t read_header_length(const std::vector<uint8_t>& bytes, const std::string& path) {
  const uint64_t size = bytes.size();
  if (size < 8)
    MOEZERO_USER_ERROR(path, ": truncated: ", size,
                       " bytes, fewer than the 8-byte header length that opens a safetensors file");
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes)
    MOEZERO_USER_ERROR(path, ": header length ", n, " exceeds the format's limit of ",
                       kMaxHeaderBytes, " bytes (not a safetensors file?)");
  if (n > size - 8)
    MOEZERO_USER_ERROR(path, ": truncated: the header length says ", n, " bytes but only ",
                       size - 8, " follow the length field");
  return n;
}

// Parses the header text into a JSON object, rejecting duplicate tensor names.
nlohmann::json parse_header_json(const std::string& text, const std::string& path) {
  using nlohmann::json;
  // Duplicate tensor names: the JSON parser would silently keep the last one.
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1) {
      const std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, on_event);
  } catch (const json::exception& e) {
    MOEZERO_USER_ERROR(path, ": the header is not valid JSON: ", e.what());
  }
  if (!duplicate.empty())
    MOEZERO_USER_ERROR(path, ": tensor '", duplicate, "' appears twice in the header");
  if (!header.is_object())
    MOEZERO_USER_ERROR(path, ": the header is ", header.type_name(), ", not a JSON object");
  return header;
}

// Copies the string-to-string "__metadata__" object into `out`.
void read_metadata(const nlohmann::json& v, const std::string& path,
                   std::map<std::string, std::string>& out) {
  if (!v.is_object())
    MOEZERO_USER_ERROR(path, ": __metadata__ is ", v.type_name(), ", not an object");
  for (auto m = v.begin(); m != v.end(); ++m) {
    if (!m.value().is_string())
      MOEZERO_USER_ERROR(path, ": __metadata__ value of '", m.key(), "' is ", m.value().type_name(),
                         ", not a string");
    out[m.key()] = m.value().get<std::string>();
  }
}

// One tensor's header entry, checked: known dtype, a non-negative shape, and data_offsets
// inside the data buffer that hold exactly the shape's bytes.
SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& v, uint64_t data_bytes,
                             const std::string& path) {
  using nlohmann::json;
  auto bad = [&](const auto&... why) {
    MOEZERO_USER_ERROR(path, ": tensor '", name, "': ", why...);
  };
  if (!v.is_object()) bad("header entry is ", v.type_name(), ", not an object");
  SafetensorsEntry e;
  e.name = name;
  if (!v.contains("dtype") || !v["dtype"].is_string()) bad("missing string field 'dtype'");
  e.dtype = v["dtype"].get<std::string>();
  const uint64_t esize = dtype_bytes(e.dtype);
  if (esize == 0) bad("unknown dtype '", e.dtype, "'");
  if (!v.contains("shape") || !v["shape"].is_array()) bad("missing array field 'shape'");
  uint64_t numel = 1;
  for (const json& d : v["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      bad("shape ", v["shape"].dump(), " has an entry that is not a non-negative integer");
    const auto dim = d.get<uint64_t>();
    if (dim != 0 && numel > (uint64_t{1} << 62) / dim)
      bad("shape ", v["shape"].dump(), " overflows");
    numel *= dim;
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  if (!v.contains("data_offsets") || !v["data_offsets"].is_array() ||
      v["data_offsets"].size() != 2 || !v["data_offsets"][0].is_number_unsigned() ||
      !v["data_offsets"][1].is_number_unsigned())
    bad("'data_offsets' must be two non-negative integers [begin, end)");
  e.begin = v["data_offsets"][0].get<uint64_t>();
  e.end = v["data_offsets"][1].get<uint64_t>();
  if (e.end < e.begin) bad("data_offsets [", e.begin, ", ", e.end, ") end before they begin");
  if (e.end > data_bytes)
    bad("data_offsets [", e.begin, ", ", e.end, ") run past the data buffer of ", data_bytes,
        " bytes (file truncated?)");
  // numel <= 2^62 but numel * esize may still wrap (shape [2^62] of F64 "needs" 0 bytes and
  // would pass with offsets [0, 0]; fuzz/corpus/safetensors/huge_shape.safetensors).
  uint64_t need = 0;
  if (__builtin_mul_overflow(numel, esize, &need))
    bad("shape ", v["shape"].dump(), " of dtype ", e.dtype, " needs more than 2^64 bytes");
  if (e.end - e.begin != need)
    bad("data_offsets [", e.begin, ", ", e.end, ") hold ", e.end - e.begin, " bytes but dtype ",
        e.dtype, " with shape ", v["shape"].dump(), " needs ", need);
  return e;
}

// The entries, sorted by offset, must tile the data buffer with no gap or overlap.
void check_contiguous(const std::vector<SafetensorsEntry>& entries, uint64_t data_bytes,
                      const std::string& path) {
  uint64_t pos = 0;
  for (const SafetensorsEntry& e : entries) {
    if (e.begin != pos)
      MOEZERO_USER_ERROR(path, ": tensor '", e.name, "' begins at byte ", e.begin,
                         " of the data buffer but ",
                         pos < e.begin ? "the previous tensor ends at "
                                       : "overlaps the previous one, which ends at ",
                         pos, " (the tensors must cover the buffer contiguously)");
    pos = e.end;
  }
  if (pos != data_bytes)
    MOEZERO_USER_ERROR(path, ": the tensors cover ", pos, " bytes of a ", data_bytes,
                       "-byte data buffer (trailing bytes)");
}

}  // namespace

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) MOEZERO_USER_ERROR(path, ": cannot open the safetensors file");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) MOEZERO_USER_ERROR(path, ": read error");
  return parse(std::move(bytes), path);
}

SafetensorsFile SafetensorsFile::parse(std::vector<uint8_t> bytes, const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  const uint64_t size = bytes.size();
  const uint64_t n = read_header_length(bytes, path);
  const nlohmann::json header =
      parse_header_json(std::string(reinterpret_cast<const char*>(bytes.data()) + 8, n), path);

  f.data_start_ = 8 + n;
  const uint64_t data_bytes = size - f.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__")
      read_metadata(it.value(), path, f.metadata_);
    else
      f.entries_.push_back(parse_entry(it.key(), it.value(), data_bytes, path));
  }
  std::sort(f.entries_.begin(), f.entries_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  check_contiguous(f.entries_, data_bytes, path);
  for (size_t i = 0; i < f.entries_.size(); ++i) f.index_[f.entries_[i].name] = i;
  f.bytes_ = std::move(bytes);
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

std::vector<float> SafetensorsFile::to_f32(const SafetensorsEntry& e) const {
  const uint8_t* p = bytes_.data() + data_start_ + e.begin;
  const auto n = static_cast<size_t>(e.numel());
  std::vector<float> out(n);
  if (e.dtype == "F32") {
    std::memcpy(out.data(), p, n * 4);
  } else if (e.dtype == "BF16") {
    for (size_t i = 0; i < n; ++i) {
      bf16 h;
      std::memcpy(&h.bits, p + 2 * i, 2);
      out[i] = bf16_to_float(h);
    }
  } else if (e.dtype == "F16") {
    for (size_t i = 0; i < n; ++i) {
      fp16 h;
      std::memcpy(&h.bits, p + 2 * i, 2);
      out[i] = fp16_to_float(h);
    }
  } else if (e.dtype == "F64") {
    for (size_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  } else {
    MOEZERO_USER_ERROR(
        path_, ": tensor '", e.name, "' has dtype ", e.dtype,
        "; only floating-point tensors (F32, BF16, F16, F64) can be loaded as parameters");
  }
  return out;
}

namespace {
const char* dtype_name(SafetensorsDType dt) { return dt == SafetensorsDType::F32 ? "F32" : "BF16"; }
uint64_t dtype_bytes(SafetensorsDType dt) { return dt == SafetensorsDType::F32 ? 4 : 2; }
}  // namespace

std::string safetensors_header(const std::vector<SafetensorsTensor>& tensors,
                               SafetensorsDType dtype,
                               const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the tensors in file order, as Hugging Face's writer does (sorted by
  // offset), which makes the header readable.
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t pos = 0;
  for (const SafetensorsTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      MOEZERO_REQUIRE(d >= 0, "safetensors: tensor '", t.name, "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    const uint64_t bytes = numel * dtype_bytes(dtype);
    MOEZERO_REQUIRE(!h.contains(t.name), "safetensors: tensor '", t.name, "' given twice");
    h[t.name] = {
        {"dtype", dtype_name(dtype)}, {"shape", t.shape}, {"data_offsets", {pos, pos + bytes}}};
    pos += bytes;
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // 8 + N aligned to 8 bytes
  return text;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       SafetensorsDType dtype, const std::map<std::string, std::string>& metadata) {
  const std::string header = safetensors_header(tensors, dtype, metadata);
  const std::string tmp = path + ".tmp";
  try {
    OutputFile out(tmp, /*append=*/false, "safetensors");
    const uint64_t n = header.size();
    out.write({reinterpret_cast<const char*>(&n), 8});
    out.write(header);
    std::vector<bf16> buf;
    for (const SafetensorsTensor& t : tensors) {
      size_t numel = 1;
      for (int64_t d : t.shape) numel *= static_cast<size_t>(d);
      MOEZERO_REQUIRE(numel == 0 || t.data != nullptr, "safetensors: tensor '", t.name,
                      "' has no data");
      if (dtype == SafetensorsDType::F32) {
        out.write({reinterpret_cast<const char*>(t.data), numel * 4});
      } else {
        buf.resize(numel);
        for (size_t i = 0; i < numel; ++i) buf[i] = float_to_bf16(t.data[i]);
        out.write({reinterpret_cast<const char*>(buf.data()), numel * 2});
      }
    }
    out.close();
  } catch (const Error&) {  // no partial file left behind; the error names the file and why
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) MOEZERO_USER_ERROR(path, ": cannot rename ", tmp, " into place: ", ec.message());
}

}  // namespace moezero::hf
