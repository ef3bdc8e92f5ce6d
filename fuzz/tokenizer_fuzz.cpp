// fuzz/tokenizer_fuzz.cpp — libFuzzer target: a tokenizer.json through BpeTokenizer (what
// data.tokenizer, `generate` and prepare_data's output feed it), then, when accepted, an
// encode/decode of a fixed text. Bad input must end in moezero::Error naming the file and key,
// never a crash, a huge allocation or another exception.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "hf/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  static const fs::path file = [] {
    const char* t = std::getenv("TMPDIR");
    fs::path d =
        fs::path(t && *t ? t : "/tmp") / ("moezero_tokenizer_fuzz_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d / "tokenizer.json";
  }();
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const moezero::hf::BpeTokenizer tok(file.string());
    const auto ids = tok.encode("Hello world, it's 2026! <|endoftext|> \xc3\xa9t\xc3\xa9");
    (void)tok.decode(ids);
    (void)tok.decode({0, 1, -1, 1 << 30});
  } catch (const moezero::Error&) {
  }
  return 0;
}
