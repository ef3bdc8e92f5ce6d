// core/config_choices.h — the values of a config key that a layer above core/ owns: a
// documented registry (CONVENTIONS: "no global mutable state except a documented registry").
//
// prefetch.policy takes the prefetch policies (prefetch/policy_registry.cpp) and
// shard_cache.eviction the eviction orders (prefetch/shard_cache.cpp). The owner registers each
// value's name and doc line once, at static initialisation (a ConfigChoicesRegistration object in
// the file that also holds the owner's factory, so every program that can build the owner's
// objects has them), and the config reads, writes and documents the key from what is registered:
// the Reader's "must be one of ..." error, `moezero config --doc`'s "one of a|b" type and doc
// lines. A new value is an edit of its owner, never of core/.
//
// A program that does not link the owner (a core/ unit test) has nothing registered for its key:
// the config then takes any name there (nothing in such a program reads it), and the owner's
// factory rejects an unknown name with the same key path.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace moezero {

struct ConfigChoice {
  std::string name;  // the config string ("frequency")
  std::string doc;   // one line: what choosing it does
};

// Registers the values of `key` ("section.key"), in the order they are listed in errors and in
// `config --doc`. Once per key: a second registration of the same key is an invariant error.
void register_config_choices(const std::string& key, std::vector<ConfigChoice> choices);

// The values registered for `key`, in registration order (empty: none registered).
std::vector<ConfigChoice> config_choices(const std::string& key);

// "a, b, c": the registered names of `key`, for error messages.
std::string config_choice_names(const std::string& key);

// Registers at static initialisation: `static const ConfigChoicesRegistration r{key, {...}};`.
struct ConfigChoicesRegistration {
  ConfigChoicesRegistration(const std::string& key, std::vector<ConfigChoice> choices) {
    register_config_choices(key, std::move(choices));
  }
};

}  // namespace moezero
