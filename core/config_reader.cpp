// core/config_reader.cpp — the Reader's out-of-line parts (unknown keys, with the nearest known
// key as a hint), the helpers of its messages, and parse_bytes (byte counts like "64MiB").
#include <string>
#include <vector>

#include "core/config_visitors.h"

namespace moezero {
namespace config_detail {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string json_type_name(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a bool";
  if (j.is_number_integer() || j.is_number_unsigned()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

// Unknown keys are errors, with the nearest known key as a hint.
void Reader::finish() const {
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (seen_.count(it.key())) continue;
    std::string best;
    size_t best_d = 3;  // suggest only near misses
    for (const auto& k : seen_) {
      size_t d = edit_distance(it.key(), k);
      if (d < best_d) best_d = d, best = k;
    }
    std::string known;
    for (const auto& k : seen_) known += (known.empty() ? "" : ", ") + k;
    MOEZERO_USER_ERROR(source_, ": unknown key '", section_, ".", it.key(), "'",
                       best.empty() ? "" : " (did you mean '" + section_ + "." + best + "'?)",
                       "; known keys of '", section_, "': ", known);
  }
}

}  // namespace config_detail

uint64_t parse_bytes(const std::string& text, const std::string& what) {
  size_t pos = 0;
  double number = 0;
  try {
    number = std::stod(text, &pos);
  } catch (const std::exception&) {
    MOEZERO_USER_ERROR(what, ": '", text,
                       "' is not a byte count (examples: 4096, \"64MiB\", \"1.5GB\")");
  }
  std::string unit = text.substr(pos);
  unit.erase(0, unit.find_first_not_of(' '));
  static const std::pair<const char*, double> kUnits[] = {{"", 1},
                                                          {"B", 1},
                                                          {"KB", 1e3},
                                                          {"MB", 1e6},
                                                          {"GB", 1e9},
                                                          {"TB", 1e12},
                                                          {"KiB", 1024.0},
                                                          {"MiB", 1048576.0},
                                                          {"GiB", 1073741824.0},
                                                          {"TiB", 1099511627776.0}};
  for (auto& [name, mult] : kUnits) {
    if (unit == name) {
      double bytes = number * mult;
      if (!(bytes >= 0) || bytes > 1.8e19 || bytes != std::floor(bytes))
        MOEZERO_USER_ERROR(what, ": '", text, "' is not a whole, non-negative number of bytes");
      return static_cast<uint64_t>(bytes);
    }
  }
  MOEZERO_USER_ERROR(what, ": unknown unit '", unit, "' in '", text,
                     "' (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)");
}

}  // namespace moezero
