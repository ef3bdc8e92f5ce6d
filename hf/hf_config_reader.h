// hf/hf_config_reader.h — (internal to hf/) typed reads of a Hugging Face config.json with the
// file and key in every error: what read_hf_dir and the per-architecture readers share.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"

namespace moezero::hf {

struct ConfigReader {
  const nlohmann::json& j;
  std::string file;

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    MOEZERO_USER_ERROR(file, ": ", key, ": ", why);
  }
  const nlohmann::json* find(const std::string& key) const {
    auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  }
  int64_t integer(const std::string& key, int64_t min_value) const {
    const nlohmann::json* v = find(key);
    if (!v) fail(key, "missing");
    if (!v->is_number_integer()) fail(key, "must be an integer, got " + v->dump());
    const auto x = v->get<int64_t>();
    if (x < min_value) fail(key, "must be >= " + std::to_string(min_value) + ", got " + v->dump());
    return x;
  }
  // The key's integer (>= min_value), or `fallback` when it is absent or null.
  int64_t integer_or(const std::string& key, int64_t min_value, int64_t fallback) const {
    const nlohmann::json* v = find(key);
    return !v || v->is_null() ? fallback : integer(key, min_value);
  }
  double number(const std::string& key, double fallback) const {
    const nlohmann::json* v = find(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_number()) fail(key, "must be a number, got " + v->dump());
    return v->get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    const nlohmann::json* v = find(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_boolean()) fail(key, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  // The key must be absent, null, or equal to `expected`.
  void absent_or(const std::string& key, const nlohmann::json& expected,
                 const std::string& why) const {
    const nlohmann::json* v = find(key);
    if (v && !v->is_null() && *v != expected) fail(key, v->dump() + ": " + why);
  }
};

}  // namespace moezero::hf
