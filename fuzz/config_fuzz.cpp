// fuzz/config_fuzz.cpp — libFuzzer target: a config file's text through parse_config (and the
// JSON round trip of what it accepts). Bad input must end in moezero::Error, never in a crash,
// a hang or another exception. scripts/fuzz.sh runs it; tests/ replays fuzz/corpus/config.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/config.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const moezero::Config c = moezero::parse_config(text, "<fuzz>");
    // What was accepted round-trips to the same config.
    const std::string j = moezero::config_to_json(c, -1);
    if (moezero::config_to_json(moezero::parse_config(j, "<round trip>"), -1) != j)
      __builtin_trap();
  } catch (const moezero::Error&) {
  }
  return 0;
}
