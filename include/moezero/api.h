// moezero/api.h — small conveniences for programs that drive moezero from C++ (the rest of
// the API is the library's own headers, gathered by moezero/moezero.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

namespace moezero {

// A checked Config from JSON text (defaults for every key it leaves out; "" means "{}") and
// "section.key=value" overrides, exactly as `moezero train --config F --set ...` would parse
// them. Throws moezero::Error naming the key path on an unknown key or a bad value.
//   Config cfg = make_config(R"({"model": {"num_experts": 4}})", {"train.steps=30"});
Config make_config(const std::string& json_text = "{}",
                   const std::vector<std::string>& overrides = {});

// `cfg` (built or edited in code) after every check the JSON parser makes (it round-trips
// through the parser; the values come back unchanged). Throws like make_config.
Config validate_config(const Config& cfg);

// Parameters (elements) of the model `cfg` describes, every group counted once.
int64_t parameter_count(const ModelConfig& cfg);

}  // namespace moezero
