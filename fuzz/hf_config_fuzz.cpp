// fuzz/hf_config_fuzz.cpp — libFuzzer target: an exported model directory's config.json through
// read_hf_dir (what train.init_from, `score --model` and `generate --model` read), then, when the
// config is accepted, check_same_shape against a small model. The directory holds a tiny valid
// model.safetensors that never matches, so a config that passes every check ends in the
// weights' error. Bad input must end in moezero::Error naming the key, never a crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/config.h"
#include "core/error.h"
#include "hf/hf_export.h"
#include "hf/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir = [] {
    const char* t = std::getenv("TMPDIR");
    fs::path d =
        fs::path(t && *t ? t : "/tmp") / ("moezero_hf_config_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(d);
    const float one = 1.0f;
    moezero::hf::write_safetensors((d / "model.safetensors").string(), {{"x", {1}, &one}},
                                   moezero::hf::SafetensorsDType::F32, {});
    return d;
  }();
  {
    std::ofstream out(dir / "config.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const moezero::hf::HfModel hf = moezero::hf::read_hf_dir(dir.string());
    moezero::hf::check_same_shape(moezero::ModelConfig{}, hf, "<fuzz>");
  } catch (const moezero::Error&) {
  }
  return 0;
}
