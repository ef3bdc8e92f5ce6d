// prefetch/policy_registry.cpp — the registry of prefetch policies (prefetch.policy): one line
// per policy, with its config string, its factory and its doc line. The config reads, checks and
// documents prefetch.policy from this table (core/config_choices.h), so a new policy is its file
// (a class and its make_* factory), its line here and nothing in core/. Built once, on first
// use; immutable after.
#include <utility>

#include "core/config_choices.h"
#include "core/error.h"
#include "prefetch/prefetch_policy.h"

namespace moezero::prefetch {

// The factories, one per policy file.
std::unique_ptr<PrefetchPolicy> make_none_policy();
std::unique_ptr<PrefetchPolicy> make_all_policy();
std::unique_ptr<PrefetchPolicy> make_frequency_policy();
std::unique_ptr<PrefetchPolicy> make_cost_policy();

namespace {

struct Registration {
  const char* name;  // the config string (prefetch.policy)
  std::unique_ptr<PrefetchPolicy> (*make)();
  const char* doc;  // one line for `moezero config --doc` and docs/config.md
};

// The registry, in the order errors and `config --doc` list the policies.
const Registration kRegistry[] = {
    {"none", &make_none_policy,
     "nothing ahead: experts gathered on demand after the router, and in backward too (the "
     "on-demand baseline of `moezero bench`'s z3-none row)"},
    {"all", &make_all_policy,
     "every local expert before routing, in id order, regardless of budget_bytes and "
     "min_probability (the leaf-module baseline)"},
    {"frequency", &make_frequency_policy,
     "the experts the frequency model predicts at least min_probability likely, likeliest "
     "first, within budget_bytes"},
    {"cost", &make_cost_policy,
     "frequency's ranking and budget, each expert only when its gather pays for itself on the "
     "link (link_gbps, speculate)"},
};

std::vector<ConfigChoice> policy_choices() {
  std::vector<ConfigChoice> v;
  for (const Registration& r : kRegistry) v.push_back({r.name, r.doc});
  return v;
}

// prefetch.policy's values for the config (core/config_choices.h).
const ConfigChoicesRegistration kConfigChoices{"prefetch.policy", policy_choices()};

struct Registered {
  const Registration* registration;
  std::unique_ptr<PrefetchPolicy> policy;
};

const std::vector<Registered>& registered() {
  static const std::vector<Registered> all = [] {
    std::vector<Registered> v;
    for (const Registration& r : kRegistry) {
      v.push_back({&r, r.make()});
      MOEZERO_CHECK(v.back().policy->name() == r.name, "prefetch policy registered as \"", r.name,
                    "\" names itself \"", v.back().policy->name(), "\"");
    }
    return v;
  }();
  return all;
}

}  // namespace

std::vector<std::string> prefetch_policy_names() {
  std::vector<std::string> names;
  for (const Registration& r : kRegistry) names.emplace_back(r.name);
  return names;
}

const PrefetchPolicy& prefetch_policy(std::string_view name) {
  for (const Registered& r : registered())
    if (name == r.registration->name) return *r.policy;
  std::string known;
  for (const std::string& n : prefetch_policy_names()) known += (known.empty() ? "" : ", ") + n;
  MOEZERO_USER_ERROR("prefetch.policy: must be one of ", known, ", got \"", name, "\"");
}

}  // namespace moezero::prefetch
