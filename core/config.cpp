// core/config.cpp — the config's entry points: parse_config (JSON -> Config, every section read
// by its key table, then the rules between keys), load_config, config_to_json and
// config_reference. The key tables are config_keys_*.cpp, the visitors that walk them
// config_visitors.h, the reader's out-of-line parts and parse_bytes config_reader.cpp, the rules
// between keys and --set config_checks.cpp.
#include "core/config.h"

#include <fstream>
#include <set>
#include <sstream>

#include "core/config_visitors.h"
#include "core/error.h"
#include "core/json_duplicates.h"

namespace moezero {

using config_detail::Documenter;
using config_detail::for_each_section;
using config_detail::json;
using config_detail::Reader;
using config_detail::Writer;

Config parse_config(const std::string& json_text, const std::string& source,
                    const std::vector<std::string>& overrides) {
  json root;
  try {
    root = json::parse(json_text, nullptr, true, /*ignore_comments=*/true);
  } catch (const json::exception& e) {  // parse_error, out_of_range (a number like 1e400)
    MOEZERO_USER_ERROR(source, ": not valid JSON: ", e.what());
  }
  if (const auto dup = find_duplicate_key(json_text))  // JSON would keep only the last one
    MOEZERO_USER_ERROR(source, ": key '", dup->path, "' appears twice (lines ", dup->first_line,
                       " and ", dup->second_line, "): merge them into one");
  if (root.is_null()) root = json::object();
  if (!root.is_object()) MOEZERO_USER_ERROR(source, ": the top level must be a JSON object");
  for (const auto& o : overrides) config_detail::apply_override(root, o, "--set");

  Config c;
  std::set<std::string> sections;
  for_each_section(c, [&](const char* name, auto visit_fn, auto& s) {
    sections.insert(name);
    auto it = root.find(name);
    if (it == root.end()) return;
    if (!it->is_object()) MOEZERO_USER_ERROR(source, ": section '", name, "' must be an object");
    Reader r(*it, source, name);
    visit_fn(r, s);
    r.finish();
  });
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (sections.count(it.key())) continue;
    std::string known;
    for (const auto& s : sections) known += (known.empty() ? "" : ", ") + s;
    MOEZERO_USER_ERROR(source, ": unknown section '", it.key(), "' (sections: ", known, ")");
  }
  config_detail::validate(c, source);
  return c;
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) MOEZERO_USER_ERROR("cannot read config file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), path, overrides);
}

std::string config_to_json(const Config& c, int indent) {
  json root = json::object();
  Config copy = c;
  for_each_section(copy, [&](const char* name, auto visit_fn, auto& s) {
    Writer w;
    visit_fn(w, s);
    root[name] = w.out;
  });
  return root.dump(indent);
}

std::vector<ConfigKeyDoc> config_reference() {
  std::vector<ConfigKeyDoc> all;
  Config c;
  for_each_section(c, [&](const char* name, auto visit_fn, auto& s) {
    Documenter d(name);
    visit_fn(d, s);
    all.insert(all.end(), d.keys.begin(), d.keys.end());
  });
  return all;
}

}  // namespace moezero
