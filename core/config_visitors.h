// core/config_visitors.h — inside the config (not a public header): the value checks, the three
// visitors that walk a section's key table (Reader: JSON -> struct, with checks; Writer: struct ->
// JSON; Documenter: the reference table), the key tables' declarations (config_keys_*.cpp, one
// visit function per section, instantiated for the three visitors), for_each_section, and the
// rules between keys and the --set overrides (config_checks.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/config_choices.h"
#include "core/error.h"

namespace moezero::config_detail {

using nlohmann::json;

// ---- value checks (return "" when fine, else the reason) --------------------------------
template <typename T>
std::function<std::string(const T&)> at_least(T lo) {
  return [lo](const T& v) {
    return v >= lo ? std::string() : detail::concat("must be >= ", lo, ", got ", v);
  };
}
template <typename T>
std::function<std::string(const T&)> greater_than(T lo) {
  return [lo](const T& v) {
    return v > lo ? std::string() : detail::concat("must be > ", lo, ", got ", v);
  };
}
template <typename T>
std::function<std::string(const T&)> in_range(T lo, T hi) {
  return [lo, hi](const T& v) {
    return (v >= lo && v <= hi) ? std::string()
                                : detail::concat("must be in [", lo, ", ", hi, "], got ", v);
  };
}
template <typename T>
std::function<std::string(const T&)> below(T lo, T hi) {  // [lo, hi)
  return [lo, hi](const T& v) {
    return (v >= lo && v < hi) ? std::string()
                               : detail::concat("must be in [", lo, ", ", hi, "), got ", v);
  };
}

template <typename E>
using Choices = std::vector<std::pair<const char*, E>>;

size_t edit_distance(const std::string& a, const std::string& b);
std::string json_type_name(const json& j);

// ---- Reader ----------------------------------------------------------------------------
class Reader {
 public:
  Reader(const json& obj, std::string source, std::string section)
      : obj_(obj), source_(std::move(source)), section_(std::move(section)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    MOEZERO_USER_ERROR(source_, ": ", section_, ".", key, ": ", why);
  }

  template <typename T>
  void field(const char* key, T& value, const char* /*doc*/,
             std::function<std::string(const T&)> check = {}) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end()) return;
    T v = convert<T>(key, *it);
    if (check) {
      std::string why = check(v);
      if (!why.empty()) fail(key, why);
    }
    value = v;
  }

  void bytes(const char* key, uint64_t& value, const char* /*doc*/) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end()) return;
    const std::string what = source_ + ": " + section_ + "." + key;
    if (it->is_string() && value == kAutoBytes && it->get<std::string>() == "auto") {
      return;  // a key whose default is "auto" (kAutoBytes) accepts it by name
    } else if (it->is_string()) {
      value = parse_bytes(it->get<std::string>(), what);
    } else if (it->is_number()) {
      double d = it->get<double>();
      if (!(d >= 0) || d != std::floor(d) || d > 1.8e19)
        fail(key, detail::concat("must be a whole, non-negative byte count, got ", it->dump()));
      value = static_cast<uint64_t>(d);
    } else {
      fail(key,
           "expected a byte count (integer or string like \"64MiB\"), got " + json_type_name(*it));
    }
  }

  template <typename E>
  void choice(const char* key, E& value, const Choices<E>& choices, const char* /*doc*/) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end()) return;
    if (!it->is_string()) fail(key, "expected a string, got " + json_type_name(*it));
    const std::string s = it->get<std::string>();
    std::string names;
    for (auto& [name, e] : choices) {
      if (s == name) {
        value = e;
        return;
      }
      names += (names.empty() ? "" : ", ") + std::string(name);
    }
    fail(key, "must be one of " + names + ", got \"" + s + "\"");
  }

  // A key whose values a layer above core/ registers (core/config_choices.h); none registered in
  // this program: any name.
  void registered(const char* key, std::string& value, const char* /*doc*/) {
    seen_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end()) return;
    if (!it->is_string()) fail(key, "expected a string, got " + json_type_name(*it));
    const std::string s = it->get<std::string>();
    const std::string path = section_ + "." + key;
    const std::vector<ConfigChoice> choices = config_choices(path);
    const bool known =
        choices.empty() || std::any_of(choices.begin(), choices.end(),
                                       [&](const ConfigChoice& c) { return c.name == s; });
    if (!known) fail(key, "must be one of " + config_choice_names(path) + ", got \"" + s + "\"");
    value = s;
  }

  void dtype(const char* key, DType& value, const char* doc) {
    choice<DType>(key, value, {{"fp32", DType::F32}, {"bf16", DType::BF16}, {"f32", DType::F32}},
                  doc);
  }

  // Unknown keys are errors, with the nearest known key as a hint.
  void finish() const;

 private:
  template <typename T>
  T convert(const char* key, const json& j) const {
    if constexpr (std::is_same_v<T, bool>) {
      if (!j.is_boolean()) fail(key, "expected true or false, got " + json_type_name(j));
      return j.get<bool>();
    } else if constexpr (std::is_same_v<T, int64_t>) {
      if (j.is_number_integer() || j.is_number_unsigned()) {
        if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX))
          fail(key, "integer too large: " + j.dump());
        return j.get<int64_t>();
      }
      if (j.is_number_float()) {
        double d = j.get<double>();
        if (d == std::floor(d) && std::abs(d) < 9.0e15) return static_cast<int64_t>(d);
      }
      fail(key, "expected an integer, got " + json_type_name(j) + " " + j.dump());
    } else if constexpr (std::is_same_v<T, double>) {
      if (!j.is_number()) fail(key, "expected a number, got " + json_type_name(j) + " " + j.dump());
      double d = j.get<double>();
      if (!std::isfinite(d)) fail(key, "must be finite");
      return d;
    } else {
      static_assert(std::is_same_v<T, std::string>);
      // A step list may be written as one whole number: "steps": 5 means "5". Any other string
      // key refuses a number (`"metrics_file": 42` is a mistake, not a file named 42); --set
      // gives string keys their text (apply_override).
      if (j.is_number_integer() && section_ == "profile" && std::string(key) == "steps")
        return j.dump();
      if (!j.is_string()) fail(key, "expected a string, got " + json_type_name(j));
      return j.get<std::string>();
    }
  }

  const json& obj_;
  std::string source_;
  std::string section_;
  std::set<std::string> seen_;
};

// ---- Writer ----------------------------------------------------------------------------
class Writer {
 public:
  json out = json::object();
  template <typename T, typename... Rest>
  void field(const char* key, const T& value, const char*, Rest&&...) {
    out[key] = value;
  }
  void bytes(const char* key, const uint64_t& value, const char*) {
    if (value == kAutoBytes)
      out[key] = "auto";
    else
      out[key] = value;
  }
  template <typename E>
  void choice(const char* key, const E& value, const Choices<E>& choices, const char*) {
    for (auto& [name, e] : choices)
      if (e == value) out[key] = name;
  }
  void registered(const char* key, const std::string& value, const char*) { out[key] = value; }
  void dtype(const char* key, const DType& value, const char*) {
    out[key] = value == DType::F32 ? "fp32" : std::string(dtype_name(value));
  }
};

// ---- Documenter ------------------------------------------------------------------------
class Documenter {
 public:
  explicit Documenter(std::string section) : section_(std::move(section)) {}
  std::vector<ConfigKeyDoc> keys;
  template <typename T, typename... Rest>
  void field(const char* key, const T& value, const char* doc, Rest&&...) {
    std::string type, def;
    if constexpr (std::is_same_v<T, bool>) {
      type = "bool", def = value ? "true" : "false";
    } else if constexpr (std::is_same_v<T, int64_t>) {
      type = "integer", def = std::to_string(value);
    } else if constexpr (std::is_same_v<T, double>) {
      type = "number", def = json(value).dump();
    } else {
      type = "string", def = "\"" + value + "\"";
    }
    keys.push_back({section_ + "." + key, type, def, doc});
  }
  void bytes(const char* key, const uint64_t& value, const char* doc) {
    if (value == kAutoBytes)
      keys.push_back({section_ + "." + key, "bytes or auto", "auto", doc});
    else
      keys.push_back({section_ + "." + key, "bytes", std::to_string(value), doc});
  }
  template <typename E>
  void choice(const char* key, const E& value, const Choices<E>& choices, const char* doc) {
    std::string type = "one of ", def;
    for (auto& [name, e] : choices) {
      type += std::string(type.size() > 7 ? "\\|" : "") + name;
      if (e == value) def = name;
    }
    keys.push_back({section_ + "." + key, type, def, doc});
  }
  // The registered values (core/config_choices.h) as the type, each with its doc line.
  void registered(const char* key, const std::string& value, const char* doc) {
    const std::string path = section_ + "." + key;
    std::string type = "one of ", text = doc;
    const std::vector<ConfigChoice> choices = config_choices(path);
    for (size_t i = 0; i < choices.size(); ++i) {
      type += (i ? "\\|" : "") + choices[i].name;
      text += (i ? "; `" : ": `") + choices[i].name + "` " + choices[i].doc;
    }
    keys.push_back({path, choices.empty() ? "string" : type, value, text});
  }
  void dtype(const char* key, const DType& value, const char* doc) {
    keys.push_back({section_ + "." + key, "one of fp32\\|bf16",
                    value == DType::F32 ? "fp32" : std::string(dtype_name(value)), doc});
  }

 private:
  std::string section_;
};

// ---- the key tables (config_keys_model.cpp, config_keys_runtime.cpp) ------------------------
constexpr int64_t kMaxI = std::numeric_limits<int32_t>::max();

template <class V>
void visit_model(V& v, ModelConfig& c);
template <class V>
void visit_train(V& v, TrainConfig& c);
template <class V>
void visit_data(V& v, DataConfig& c);
template <class V>
void visit_parallel(V& v, ParallelConfig& c);
template <class V>
void visit_zero(V& v, ZeroConfig& c);
template <class V>
void visit_moe(V& v, MoeConfig& c);
template <class V>
void visit_prefetch(V& v, PrefetchConfig& c);
template <class V>
void visit_shard_cache(V& v, ShardCacheConfig& c);
template <class V>
void visit_comm_emulation(V& v, CommEmulationConfig& c);
template <class V>
void visit_comm(V& v, CommConfig& c);
template <class V>
void visit_profile(V& v, ProfileConfig& c);

// Calls f(section name, visit function, section struct) for every section, in file order.
template <class C, class F>
void for_each_section(C& c, F&& f) {
  f(
      "model", [](auto& v, auto& s) { visit_model(v, s); }, c.model);
  f(
      "train", [](auto& v, auto& s) { visit_train(v, s); }, c.train);
  f(
      "data", [](auto& v, auto& s) { visit_data(v, s); }, c.data);
  f(
      "parallel", [](auto& v, auto& s) { visit_parallel(v, s); }, c.parallel);
  f(
      "zero", [](auto& v, auto& s) { visit_zero(v, s); }, c.zero);
  f(
      "moe", [](auto& v, auto& s) { visit_moe(v, s); }, c.moe);
  f(
      "prefetch", [](auto& v, auto& s) { visit_prefetch(v, s); }, c.prefetch);
  f(
      "shard_cache", [](auto& v, auto& s) { visit_shard_cache(v, s); }, c.shard_cache);
  f(
      "comm_emulation", [](auto& v, auto& s) { visit_comm_emulation(v, s); }, c.comm_emulation);
  f(
      "comm", [](auto& v, auto& s) { visit_comm(v, s); }, c.comm);
  f(
      "profile", [](auto& v, auto& s) { visit_profile(v, s); }, c.profile);
}

// ---- between keys, and overrides (config_checks.cpp) ----------------------------------------
// Rules between keys, checked after every key is valid on its own.
void validate(const Config& c, const std::string& src);
// One --set item (section.key=value) into the JSON root.
void apply_override(json& root, const std::string& item, const std::string& source);

}  // namespace moezero::config_detail
