// hf/safetensors.h — reader and writer of the safetensors format (Hugging Face's weights file).
//
// Layout of a file:
//   [0, 8)           u64 little-endian N: the header's length in bytes
//   [8, 8 + N)       UTF-8 JSON object: {"NAME": {"dtype": "F32", "shape": [d0, ...],
//                    "data_offsets": [begin, end)}, ..., "__metadata__": {"k": "v", ...}},
//                    padded with spaces so that 8 + N is a multiple of 8
//   [8 + N, size)    the data buffer: raw little-endian tensors, row-major; offsets are relative
//                    to its start
// The reader validates what the Rust reference implementation validates, and names the file
// and the tensor in every error: the header length against the file size, the JSON (an object
// of objects, no duplicate names), known dtypes, non-negative shapes, end - begin equal to
// numel * dtype size, offsets inside the data buffer, and the tensors covering the buffer
// contiguously (sorted by offset: the first begins at 0, each begins where the previous one
// ends, the last ends at the buffer's end).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moezero::hf {

// One tensor of a safetensors header. `dtype` is the format's name ("F32", "BF16", "F16", ...).
struct SafetensorsEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data buffer, [begin, end)
  int64_t numel() const;
};

// A file read whole: header entries sorted by offset, metadata, the data buffer.
class SafetensorsFile {
 public:
  // Parses `bytes` (a whole file); `path` names it in errors. Throws moezero::Error.
  static SafetensorsFile parse(std::vector<uint8_t> bytes, const std::string& path);
  // Reads and parses the file at `path`.
  static SafetensorsFile read(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The entry called `name`, or nullptr.
  const SafetensorsEntry* find(const std::string& name) const;
  // The tensor's values converted to fp32 (F32, BF16, F16 and F64 are supported; another dtype
  // is an error naming the file, the tensor and the dtype).
  std::vector<float> to_f32(const SafetensorsEntry& e) const;

 private:
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
  std::vector<uint8_t> bytes_;
  uint64_t data_start_ = 0;
};

// A tensor to write: fp32 values (row-major, numel(shape) of them).
struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// How the values are stored in the file.
enum class SafetensorsDType : uint8_t { F32, BF16 };

// Writes `tensors` in the given order (offsets contiguous from 0) with `metadata`, converting
// to `dtype` (bf16: round to nearest even). Writes `path`.tmp, then renames it to `path`, so a
// failed write never leaves a truncated file under the final name. Throws naming the path.
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       SafetensorsDType dtype, const std::map<std::string, std::string>& metadata);

// The header a writer of `tensors` produces (exposed for tests that craft bad files).
std::string safetensors_header(const std::vector<SafetensorsTensor>& tensors,
                               SafetensorsDType dtype,
                               const std::map<std::string, std::string>& metadata);

}  // namespace moezero::hf
