// fuzz/safetensors_fuzz.cpp — libFuzzer target: a whole model.safetensors file through
// SafetensorsFile::parse (header length, JSON, dtypes, shapes, offsets, tiling of the data
// buffer), then every floating-point tensor it accepted through to_f32. Hostile files must end
// in moezero::Error naming what is wrong, never a crash, a huge allocation or another exception.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "hf/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const moezero::hf::SafetensorsFile f =
        moezero::hf::SafetensorsFile::parse(std::vector<uint8_t>(data, data + size), "<fuzz>");
    for (const moezero::hf::SafetensorsEntry& e : f.entries()) {
      // What was accepted lies inside the file: never more values than the file has bytes.
      if (static_cast<uint64_t>(e.numel()) > size && e.end > e.begin) __builtin_trap();
      try {
        const std::vector<float> v = f.to_f32(e);
        if (v.size() != static_cast<size_t>(e.numel())) __builtin_trap();
      } catch (const moezero::Error&) {  // a non-float dtype
      }
    }
  } catch (const moezero::Error&) {
  }
  return 0;
}
