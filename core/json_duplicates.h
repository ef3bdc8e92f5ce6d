// core/json_duplicates.h — finds a key that appears twice in one JSON object. A JSON parser
// keeps only one of them (nlohmann-json: the last), so `{"model": {"d_model": 64}, "model":
// {"n_layers": 1}}` would silently drop the first section; config files are refused instead.
#pragma once

#include <optional>
#include <string>

namespace moezero {

struct DuplicateKey {
  std::string path;                     // "model" or "model.d_model" ("[i]" for an array element)
  int first_line = 0, second_line = 0;  // 1-based
};

// The first duplicate key of `text`, which must already have parsed as JSON (// and /* */
// comments allowed); nullopt when every object's keys are distinct. Keys are compared as
// written (an escaped spelling of the same key is not matched).
std::optional<DuplicateKey> find_duplicate_key(const std::string& text);

}  // namespace moezero
