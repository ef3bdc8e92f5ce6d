// tests/prefetch/policy_registry_test.cpp — the prefetch policy registry (prefetch/
// policy_registry.cpp) and the shard cache's eviction orders are what the config reads, checks
// and documents for prefetch.policy and shard_cache.eviction (core/config_choices.h): the
// names, their order, the doc lines, and the errors naming the key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/config.h"
#include "core/config_choices.h"
#include "core/error.h"
#include "prefetch/prefetch_policy.h"
#include "prefetch/shard_cache.h"

namespace moezero::prefetch {
namespace {

std::string error_of(const std::string& json) {
  try {
    parse_config(json, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const ConfigKeyDoc& reference_row(const std::string& path) {
  static const std::vector<ConfigKeyDoc> rows = config_reference();
  for (const ConfigKeyDoc& k : rows)
    if (k.path == path) return k;
  throw std::runtime_error("no config key " + path);
}

TEST(PolicyRegistry, EveryPolicyIsRegisteredWithTheConfigUnderItsOwnName) {
  const std::vector<std::string> names = prefetch_policy_names();
  EXPECT_EQ(names, (std::vector<std::string>{"none", "all", "frequency", "cost"}));
  const std::vector<ConfigChoice> choices = config_choices("prefetch.policy");
  ASSERT_EQ(choices.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(choices[i].name, names[i]);
    EXPECT_FALSE(choices[i].doc.empty()) << names[i];
    EXPECT_EQ(prefetch_policy(names[i]).name(), names[i]);
  }
  EXPECT_EQ(parse_config("{}", "cfg.json").prefetch.policy, "cost");  // the default is registered
  EXPECT_NO_THROW(prefetch_policy(PrefetchConfig{}.policy));
}

TEST(PolicyRegistry, OnlyNoneTurnsOffPlansAndBackwardsExactPrefetch) {
  for (const std::string& n : prefetch_policy_names()) {
    EXPECT_EQ(prefetch_policy(n).plans_ahead(), n != "none") << n;
    EXPECT_EQ(prefetch_policy(n).exact_backward(), n != "none") << n;
  }
}

TEST(PolicyRegistry, ConfigRejectsAnUnregisteredPolicyNamingTheKeyAndTheChoices) {
  const std::string e = error_of(R"({"prefetch": {"policy": "magic"}})");
  EXPECT_NE(e.find("prefetch.policy"), std::string::npos) << e;
  EXPECT_NE(e.find("none, all, frequency, cost"), std::string::npos) << e;
  EXPECT_NE(e.find("magic"), std::string::npos) << e;
  EXPECT_NE(error_of(R"({"prefetch": {"policy": 3}})").find("expected a string"),
            std::string::npos);
  try {
    prefetch_policy("magic");
    ADD_FAILURE() << "an unknown policy was found";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("prefetch.policy"), std::string::npos) << err.what();
  }
}

TEST(PolicyRegistry, ConfigDocListsThePoliciesWithTheirDocLines) {
  const ConfigKeyDoc& row = reference_row("prefetch.policy");
  EXPECT_EQ(row.type, "one of none\\|all\\|frequency\\|cost");
  EXPECT_EQ(row.default_value, "cost");
  for (const ConfigChoice& c : config_choices("prefetch.policy"))
    EXPECT_NE(row.doc.find("`" + c.name + "` " + c.doc), std::string::npos) << row.doc;
}

TEST(EvictionRegistry, ShardCacheEvictionComesFromTheShardCache) {
  const std::vector<ConfigChoice> choices = config_choices("shard_cache.eviction");
  ASSERT_EQ(choices.size(), 3u);
  EXPECT_EQ(choices[0].name, "lfu");
  EXPECT_EQ(choices[1].name, "lru");
  EXPECT_EQ(choices[2].name, "value");
  EXPECT_EQ(eviction_policy("lru"), EvictionPolicy::Lru);
  EXPECT_EQ(eviction_policy("value"), EvictionPolicy::Value);
  EXPECT_EQ(ShardCache(ShardCacheConfig{}).eviction(), EvictionPolicy::Value);  // the default
  const std::string e = error_of(R"({"shard_cache": {"eviction": "fifo"}})");
  EXPECT_NE(e.find("shard_cache.eviction"), std::string::npos) << e;
  EXPECT_NE(e.find("lfu, lru, value"), std::string::npos) << e;
  EXPECT_EQ(reference_row("shard_cache.eviction").type, "one of lfu\\|lru\\|value");
  EXPECT_THROW(eviction_policy("fifo"), Error);
}

}  // namespace
}  // namespace moezero::prefetch
