// tests/moe/gather_strategy_test.cpp — the gather-strategy registry (moe/gather_strategy.h):
// every zero.moe_gather choice the config accepts names a registered strategy (and the parsed
// value finds the same one), every registered strategy is constructible from its string, and an
// unknown string is refused with an error naming it, the key and the known strategies.
#include "moe/gather_strategy.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"

namespace moezero::moe {
namespace {

// The choices of zero.moe_gather as the config reference lists them ("one of a\|b\|c").
std::vector<std::string> config_choices() {
  for (const ConfigKeyDoc& k : config_reference()) {
    if (k.path != "zero.moe_gather") continue;
    const std::string prefix = "one of ", sep = "\\|";
    EXPECT_EQ(k.type.rfind(prefix, 0), 0u) << k.type;
    std::vector<std::string> names;
    std::string rest = k.type.substr(prefix.size());
    for (size_t at; (at = rest.find(sep)) != std::string::npos; rest = rest.substr(at + sep.size()))
      names.push_back(rest.substr(0, at));
    names.push_back(rest);
    return names;
  }
  ADD_FAILURE() << "zero.moe_gather is not in config_reference()";
  return {};
}

TEST(GatherStrategy, EveryRegisteredStrategyIsConstructibleFromItsName) {
  const std::vector<std::string> names = gather_strategy_names();
  EXPECT_EQ(names, (std::vector<std::string>{"experts", "leaf", "fsdp"}));
  for (const std::string& n : names) {
    const GatherStrategy& g = gather_strategy(n);
    EXPECT_EQ(g.name(), n);
    EXPECT_EQ(&gather_strategy(n), &g) << n << ": one object per strategy";
    // The evaluation model's strategy is a registered one too.
    EXPECT_NO_THROW(gather_strategy(g.evaluation_strategy())) << n;
  }
}

TEST(GatherStrategy, EveryConfigChoiceParsesToItsRegisteredStrategy) {
  const std::vector<std::string> choices = config_choices();
  EXPECT_EQ(choices, gather_strategy_names());
  for (const std::string& c : choices) {
    const Config cfg = parse_config("{}", "<test>", {"zero.moe_gather=" + c});
    EXPECT_EQ(gather_strategy(cfg.zero.moe_gather).name(), c);
  }
  EXPECT_EQ(gather_strategy(Config{}.zero.moe_gather).name(), "experts");  // the default
}

TEST(GatherStrategy, UnknownNameIsRefusedNamingItAndTheKnownOnes) {
  try {
    gather_strategy("magic");
    FAIL() << "an unknown strategy was accepted";
  } catch (const UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("zero.moe_gather"), std::string::npos) << what;
    EXPECT_NE(what.find("\"magic\""), std::string::npos) << what;
    EXPECT_NE(what.find("experts, leaf, fsdp"), std::string::npos) << what;
  }
  EXPECT_THROW(gather_strategy(""), UserError);
  EXPECT_THROW(gather_strategy("Leaf"), UserError);  // names are exact
}

// What differs between the strategies outside their gathers: who may keep parameters in the
// shard cache, and what the forward-only evaluation model gathers with.
TEST(GatherStrategy, CacheAndEvaluationPropertiesPerStrategy) {
  EXPECT_TRUE(gather_strategy("experts").uses_shard_cache());
  EXPECT_FALSE(gather_strategy("leaf").uses_shard_cache());
  EXPECT_TRUE(gather_strategy("fsdp").uses_shard_cache());  // FSDP2 reshard_after_backward=False
  EXPECT_EQ(gather_strategy("experts").evaluation_strategy(), "experts");
  EXPECT_EQ(gather_strategy("leaf").evaluation_strategy(), "leaf");
  EXPECT_EQ(gather_strategy("fsdp").evaluation_strategy(), "leaf");  // nothing to hold for
}

}  // namespace
}  // namespace moezero::moe
