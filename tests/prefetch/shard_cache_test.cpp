// tests/prefetch/shard_cache_test.cpp — hits, misses, versions (stale never served), LFU vs LRU
// eviction order, admission refusals, pins, capacity 0, and a randomised run that checks the
// invariants after every call on two caches fed identical calls.
#include "prefetch/shard_cache.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/error.h"

namespace moezero::prefetch {
namespace {

using Ids = std::vector<int>;

TEST(ShardCache, MissAdmitHit) {
  ShardCache c(100, EvictionPolicy::Lfu);
  EXPECT_EQ(c.lookup(7, 0), CacheLookup::Miss);
  const CacheAdmit a = c.admit(7, 40, 0, 0.5);
  EXPECT_TRUE(a.admitted);
  EXPECT_TRUE(a.evicted.empty());
  EXPECT_EQ(c.lookup(7, 0), CacheLookup::Hit);
  EXPECT_EQ(c.lookup(8, 0), CacheLookup::Miss);
  const ShardCacheCounters& k = c.counters();
  EXPECT_EQ(k.hits, 1u);
  EXPECT_EQ(k.misses, 2u);
  EXPECT_EQ(k.admissions, 1u);
  EXPECT_EQ(k.bytes_resident, 40u);
  EXPECT_EQ(k.peak_bytes, 40u);
  EXPECT_EQ(c.clock(), 4u);
  EXPECT_THROW(c.admit(7, 40, 0, 0.5), Error);  // already resident
  EXPECT_THROW(c.admit(9, 0, 0, 0.5), Error);
  EXPECT_THROW(c.admit(9, 1, 0, std::numeric_limits<double>::quiet_NaN()), Error);
}

TEST(ShardCache, StaleVersionsAreDroppedNeverServed) {
  ShardCache c(100, EvictionPolicy::Lru);
  c.admit(1, 10, 3, 1.0);
  EXPECT_EQ(c.lookup(1, 4), CacheLookup::Stale);
  EXPECT_FALSE(c.contains(1));
  EXPECT_EQ(c.counters().bytes_resident, 0u);
  EXPECT_EQ(c.lookup(1, 4), CacheLookup::Miss);
  c.admit(1, 10, 5, 1.0);
  EXPECT_EQ(c.lookup(1, 4), CacheLookup::Stale);  // a newer entry does not serve an older version
  EXPECT_EQ(c.counters().stale_drops, 2u);
  EXPECT_EQ(c.counters().misses, 3u);
  EXPECT_EQ(c.counters().hits, 0u);

  c.admit(1, 10, 1, 1.0);
  c.admit(2, 10, 2, 1.0);
  c.admit(3, 10, 3, 1.0);
  EXPECT_EQ(c.drop_older_than(3), (Ids{1, 2}));
  EXPECT_EQ(c.resident(), (Ids{3}));
  EXPECT_EQ(c.invalidate_all(), (Ids{3}));
  EXPECT_TRUE(c.resident().empty());
  EXPECT_EQ(c.counters().stale_drops, 5u);
  EXPECT_EQ(c.counters().bytes_resident, 0u);
  EXPECT_EQ(c.counters().peak_bytes, 30u);
}

// Capacity for three entries of 10 bytes; A, B, C admitted in that order, then A and B hit.
ShardCache crafted(EvictionPolicy p) {
  ShardCache c(30, p);
  c.admit(1, 10, 0, 0.9);                       // A, t=1
  c.admit(2, 10, 0, 0.1);                       // B, t=2
  c.admit(3, 10, 0, 0.5);                       // C, t=3
  EXPECT_EQ(c.lookup(1, 0), CacheLookup::Hit);  // t=4
  EXPECT_EQ(c.lookup(2, 0), CacheLookup::Hit);  // t=5
  return c;
}

TEST(ShardCache, LfuAndLruEvictDifferently) {
  ShardCache lfu = crafted(EvictionPolicy::Lfu);
  ShardCache lru = crafted(EvictionPolicy::Lru);
  EXPECT_EQ(lfu.eviction_order(), (Ids{2, 3, 1}));  // score
  EXPECT_EQ(lru.eviction_order(), (Ids{3, 1, 2}));  // recency
  EXPECT_EQ(lfu.admit(4, 10, 0, 0.6).evicted, (Ids{2}));
  EXPECT_EQ(lru.admit(4, 10, 0, 0.6).evicted, (Ids{3}));
  // LFU: a newcomer hotter than C displaces it; a colder one is refused and evicts nothing.
  EXPECT_EQ(lfu.admit(5, 10, 0, 0.55).evicted, (Ids{3}));
  const CacheAdmit cold = lfu.admit(6, 10, 0, 0.2);
  EXPECT_FALSE(cold.admitted);
  EXPECT_TRUE(cold.evicted.empty());
  EXPECT_EQ(lfu.resident(), (Ids{1, 4, 5}));
  EXPECT_EQ(lfu.counters().refusals, 1u);
  EXPECT_EQ(lfu.counters().evictions, 2u);
  // Needing two victims: both must rank below the newcomer.
  EXPECT_EQ(lfu.admit(7, 20, 0, 0.7).evicted, (Ids{5, 4}));
  EXPECT_EQ(lfu.resident(), (Ids{1, 7}));
  // LRU always admits (every resident entry is older): oldest first.
  EXPECT_EQ(lru.admit(8, 20, 0, 0.0).evicted, (Ids{1, 2}));
  EXPECT_EQ(lru.resident(), (Ids{4, 8}));
}

TEST(ShardCache, LfuTiesGoToRecencyThenId) {
  ShardCache c(30, EvictionPolicy::Lfu);
  c.admit(5, 10, 0, 0.5);
  c.admit(2, 10, 0, 0.5);
  c.admit(9, 10, 0, 0.5);
  EXPECT_EQ(c.eviction_order(), (Ids{5, 2, 9}));
  c.lookup(5, 0);
  EXPECT_EQ(c.eviction_order(), (Ids{2, 9, 5}));
  c.set_score(9, 0.4);
  EXPECT_EQ(c.eviction_order(), (Ids{9, 2, 5}));
  // An equal-score newcomer is the most recent: it displaces the oldest equal entry.
  c.set_score(9, 0.5);
  EXPECT_EQ(c.admit(1, 10, 0, 0.5).evicted, (Ids{2}));
  EXPECT_THROW(c.set_score(2, 0.1), Error);
}

TEST(ShardCache, PinnedEntriesAreNeverEvicted) {
  ShardCache c(20, EvictionPolicy::Lru);
  c.admit(1, 10, 0, 0.0);
  c.admit(2, 10, 0, 0.0);
  c.pin(1);
  EXPECT_EQ(c.pins(1), 1);
  EXPECT_EQ(c.eviction_order(), (Ids{2}));
  EXPECT_EQ(c.admit(3, 10, 0, 0.0).evicted, (Ids{2}));  // 1 is older but pinned
  c.pin(3);
  c.pin(3);
  const CacheAdmit full = c.admit(4, 10, 0, 0.0);
  EXPECT_FALSE(full.admitted);
  EXPECT_TRUE(full.evicted.empty());
  EXPECT_THROW(c.invalidate_all(), Error);
  EXPECT_THROW(c.lookup(1, 1), Error);  // an in-use entry outlived a step
  c.unpin(1);
  c.unpin(3);
  EXPECT_EQ(c.admit(4, 10, 0, 0.0).evicted, (Ids{1}));
  EXPECT_THROW(c.drop_older_than(1), Error);  // 3 still pinned once
  c.unpin(3);
  EXPECT_THROW(c.unpin(3), Error);
  EXPECT_THROW(c.pin(99), Error);
  EXPECT_EQ(c.drop_older_than(1), (Ids{3, 4}));
}

TEST(ShardCache, CapacityZeroCachesNothing) {
  ShardCache c(ShardCacheConfig{0, "lfu"});
  EXPECT_FALSE(c.admit(1, 1, 0, 1.0).admitted);
  EXPECT_EQ(c.lookup(1, 0), CacheLookup::Miss);
  EXPECT_TRUE(c.resident().empty());
  EXPECT_EQ(c.counters().peak_bytes, 0u);
  EXPECT_EQ(c.counters().refusals, 1u);
}

TEST(ShardCache, TooLargeIsRefusedWithoutEvicting) {
  ShardCache c(100, EvictionPolicy::Lru);
  c.admit(1, 60, 0, 0.0);
  const CacheAdmit big = c.admit(2, 101, 0, 1.0);
  EXPECT_FALSE(big.admitted);
  EXPECT_TRUE(big.evicted.empty());
  EXPECT_EQ(c.resident(), (Ids{1}));
  EXPECT_TRUE(c.admit(3, 100, 0, 1.0).admitted);  // exactly the capacity fits
  EXPECT_EQ(c.resident(), (Ids{3}));
}

// Random calls on two caches; invariants checked after every call.
void randomised(EvictionPolicy policy, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "seed " << seed << " policy " << int(policy));
  std::mt19937_64 rng(seed);
  const uint64_t capacity_bytes = 1000;
  const int groups = 24;
  std::vector<uint64_t> bytes(groups);
  for (auto& b : bytes) b = 1 + rng() % 400;
  bytes[0] = 1001;  // never fits
  ShardCache a(capacity_bytes, policy), b(capacity_bytes, policy);
  std::map<int, int64_t> version_of;  // what we admitted, per resident group
  std::map<int, int> pins;
  int64_t version = 0;
  for (int call = 0; call < 20000; ++call) {
    const int g = int(rng() % groups);
    const int op = int(rng() % 100);
    if (op < 40) {
      const CacheLookup ra = a.lookup(g, version);
      ASSERT_EQ(ra, b.lookup(g, version));
      if (ra == CacheLookup::Hit) {
        ASSERT_EQ(version_of.at(g), version) << "served a stale entry";
        if (rng() % 3 == 0) {
          a.pin(g);
          b.pin(g);
          ++pins[g];
        }
      } else if (ra == CacheLookup::Stale) {
        ASSERT_NE(version_of.at(g), version);
        version_of.erase(g);
      } else {
        ASSERT_EQ(version_of.count(g), 0u);
      }
    } else if (op < 75) {
      if (a.contains(g)) continue;
      const int64_t v = version - int64_t(rng() % 4 == 0);  // sometimes an old gather
      const double score = double(rng() % 8) / 8.0;
      const CacheAdmit ra = a.admit(g, bytes[size_t(g)], v, score);
      const CacheAdmit rb = b.admit(g, bytes[size_t(g)], v, score);
      ASSERT_EQ(ra.admitted, rb.admitted);
      ASSERT_EQ(ra.evicted, rb.evicted);
      for (const int e : ra.evicted) {
        ASSERT_EQ(pins[e], 0) << "evicted a pinned entry";
        version_of.erase(e);
      }
      if (ra.admitted) version_of[g] = v;
      if (g == 0) {
        ASSERT_FALSE(ra.admitted);
      }
    } else if (op < 88) {
      if (pins[g] == 0) continue;
      a.unpin(g);
      b.unpin(g);
      --pins[g];
    } else if (op < 95) {
      if (!a.contains(g)) continue;
      const double score = double(rng() % 8) / 8.0;
      a.set_score(g, score);
      b.set_score(g, score);
    } else {  // optimizer step: release everything, bump the version, maybe drop
      for (auto& [id, n] : pins) {
        for (; n > 0; --n) {
          a.unpin(id);
          b.unpin(id);
        }
      }
      ++version;
      if (rng() % 2 == 0) {
        const std::vector<int> da = a.drop_older_than(version);
        ASSERT_EQ(da, b.drop_older_than(version));
        for (const int e : da) version_of.erase(e);
      }  // else: stale entries stay and must be caught by lookup
    }
    // Invariants.
    const ShardCacheCounters& k = a.counters();
    ASSERT_LE(k.bytes_resident, capacity_bytes);
    ASSERT_LE(k.peak_bytes, capacity_bytes);
    ASSERT_GE(k.peak_bytes, k.bytes_resident);
    uint64_t sum_bytes = 0;
    std::vector<int> expect_resident;
    for (const auto& [id, v] : version_of) {
      expect_resident.push_back(id);
      sum_bytes += bytes[size_t(id)];
    }
    ASSERT_EQ(a.resident(), expect_resident);
    ASSERT_EQ(k.bytes_resident, sum_bytes);
    for (const auto& [id, n] : pins) ASSERT_EQ(a.pins(id), n);
    ASSERT_EQ(a.resident(), b.resident());
    ASSERT_EQ(a.eviction_order(), b.eviction_order());
    ASSERT_EQ(a.clock(), b.clock());
  }
  EXPECT_GT(a.counters().hits, 0u);
  EXPECT_GT(a.counters().evictions, 0u);
  EXPECT_GT(a.counters().stale_drops, 0u);
  EXPECT_GT(a.counters().refusals, 0u);
}

TEST(ShardCache, RandomisedInvariantsLfu) { randomised(EvictionPolicy::Lfu, 12345); }
TEST(ShardCache, RandomisedInvariantsLru) { randomised(EvictionPolicy::Lru, 67890); }

}  // namespace
}  // namespace moezero::prefetch
