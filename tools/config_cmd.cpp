// tools/config_cmd.cpp — `moezero config`: print the reference of every config key as a
// Markdown table (--doc; the README's table is this output), the defaults as JSON
// (--defaults), or check a file and print it resolved (FILE [--set k=v ...]).
#include <iostream>

#include "core/config.h"
#include "core/error.h"
#include "tools/cli.h"

namespace moezero::cli {

int config(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--doc") {
    std::cout << "| key | type | default | meaning |\n|---|---|---|---|\n";
    for (const auto& k : config_reference())
      std::cout << "| `" << k.path << "` | " << k.type << " | " << k.default_value << " | " << k.doc
                << " |\n";
    return 0;
  }
  if (args[0] == "--defaults") {
    std::cout << config_to_json(Config{}) << "\n";
    return 0;
  }
  MOEZERO_USAGE_REQUIRE(args[0].rfind("--", 0) != 0, "config: unknown option '", args[0],
                        "' (expected --doc, --defaults or a config file)");
  std::string file = args[0];
  std::vector<std::string> overrides;
  for (size_t i = 1; i < args.size(); ++i) {
    MOEZERO_USAGE_REQUIRE(args[i] == "--set" && i + 1 < args.size(),
                          "config: expected --set key=value, got '", args[i], "'");
    overrides.push_back(args[++i]);
  }
  std::cout << config_to_json(load_config(file, overrides)) << "\n";
  return 0;
}

}  // namespace moezero::cli
