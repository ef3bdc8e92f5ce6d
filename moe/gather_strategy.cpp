// moe/gather_strategy.cpp — the registry of gather strategies (moe/gather_strategy.h): one line
// per strategy, keyed by its zero.moe_gather string. Built once, on first use; immutable after.
#include "moe/gather_strategy.h"

#include <utility>

#include "core/error.h"

namespace moezero::moe {

namespace {

struct Registration {
  const char* name;  // the config string (zero.moe_gather)
  MoeGather value;   // the parsed config value
  std::unique_ptr<GatherStrategy> (*make)();
};

// The registry. A new strategy: its file (a class and its make_* factory) and one line here.
constexpr Registration kRegistry[] = {
    {"experts", MoeGather::Experts, &make_experts_gather},
    {"leaf", MoeGather::Leaf, &make_leaf_gather},
    {"fsdp", MoeGather::Fsdp, &make_fsdp_gather},
};

struct Registered {
  const Registration* registration;
  std::unique_ptr<GatherStrategy> strategy;
};

const std::vector<Registered>& registered() {
  static const std::vector<Registered> all = [] {
    std::vector<Registered> v;
    for (const Registration& r : kRegistry) {
      v.push_back({&r, r.make()});
      MOEZERO_CHECK(v.back().strategy->name() == r.name, "gather strategy registered as \"", r.name,
                    "\" names itself \"", v.back().strategy->name(), "\"");
    }
    return v;
  }();
  return all;
}

}  // namespace

std::vector<std::string> gather_strategy_names() {
  std::vector<std::string> names;
  for (const Registration& r : kRegistry) names.emplace_back(r.name);
  return names;
}

const GatherStrategy& gather_strategy(std::string_view name) {
  for (const Registered& r : registered())
    if (name == r.registration->name) return *r.strategy;
  std::string known;
  for (const std::string& n : gather_strategy_names()) known += (known.empty() ? "" : ", ") + n;
  MOEZERO_USER_ERROR("zero.moe_gather: unknown gather strategy \"", name, "\" (known: ", known,
                     ")");
}

const GatherStrategy& gather_strategy(MoeGather gather) {
  for (const Registered& r : registered())
    if (gather == r.registration->value) return *r.strategy;
  MOEZERO_THROW("zero.moe_gather: no gather strategy registered for value ",
                static_cast<int>(gather));
}

}  // namespace moezero::moe
