// fuzz/manifest_fuzz.cpp — libFuzzer target: a checkpoint's manifest.json through
// read_manifest (format, versions, field types, segments tiling groups and inside files).
// Hostile manifests must end in moezero::Error naming what is wrong, never a crash or another
// exception. The manifest is written into a scratch directory ($TMPDIR) per process.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "train/checkpoint_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const fs::path dir = [] {
    const char* t = std::getenv("TMPDIR");
    fs::path d =
        fs::path(t && *t ? t : "/tmp") / ("moezero_manifest_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  {
    std::ofstream out(dir / "manifest.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    (void)moezero::checkpoint::io::read_manifest(dir.string());
  } catch (const moezero::Error&) {
  }
  return 0;
}
