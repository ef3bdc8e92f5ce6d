// core/config_choices.cpp — the registry of config values owned by layers above core/
// (core/config_choices.h).
#include "core/config_choices.h"

#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"

namespace moezero {

namespace {

struct ChoiceRegistry {
  std::mutex mutex;
  std::map<std::string, std::vector<ConfigChoice>> by_key;
};

// Function-local: registrations run during static initialisation, in any order of files.
ChoiceRegistry& registry() {
  static ChoiceRegistry r;
  return r;
}

}  // namespace

void register_config_choices(const std::string& key, std::vector<ConfigChoice> choices) {
  ChoiceRegistry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  MOEZERO_CHECK(!choices.empty(), "config key ", key, ": registered with no values");
  const bool fresh = r.by_key.emplace(key, std::move(choices)).second;
  MOEZERO_CHECK(fresh, "config key ", key, ": its values are registered twice");
}

std::vector<ConfigChoice> config_choices(const std::string& key) {
  ChoiceRegistry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.by_key.find(key);
  return it == r.by_key.end() ? std::vector<ConfigChoice>{} : it->second;
}

std::string config_choice_names(const std::string& key) {
  std::string names;
  for (const ConfigChoice& c : config_choices(key)) names += (names.empty() ? "" : ", ") + c.name;
  return names;
}

}  // namespace moezero
