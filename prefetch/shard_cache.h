// prefetch/shard_cache.h — which gathered expert parameter groups stay resident, within a byte
// budget, from forward to backward and across the micro-batches of one optimizer step
// (DESIGN.md "Why it exists", point 3: the budget is the dial between ZeRO-3's memory and
// ZeRO-2's traffic).
//
// The cache is bookkeeping only: it holds group ids, byte sizes, the parameter version each was
// gathered at, scores, recency and pins. The caller owns the buffers and frees those the cache
// names (evicted, stale, invalidated, or not admitted).
//
// Why identical on every rank: a decision (hit, what to evict, whether to admit) depends only on
// the sequence of calls and their arguments (group ids, bytes, versions, scores from the
// frequency model), which the engine makes identical on every rank of a group; the recency clock
// is a logical counter ticked by lookup() and admit(), entries live in an id-ordered map, and
// every tie is broken by group id. No time, no addresses, no hashing order.
//
// Versions: an entry carries the parameter version (optimizer step count) it was gathered at. A
// lookup is a hit only when the versions are equal; a stale entry is dropped and reported, never
// served. invalidate_all() (or drop_older_than(v)) at the optimizer step drops the rest.
//
// Eviction order (the victim is the entry that ranks lowest; pinned entries are never victims):
//   lfu:   lowest score, then least recently used, then lower group id.
//   lru:   least recently used (logical clock), then lower group id.
//   value: as lfu, the score being the budget planner's density (prefetch/budget_planner.h:
//          link time of re-gathers saved per byte kept; score_kind() Density).
// Admission: a newcomer ranks as the most recently used entry with its score. lfu, lru: it is
// admitted only when it fits after evicting unpinned entries that rank below it (lfu: a
// newcomer colder than the entries it would displace is refused; lru: every older entry ranks
// below it). value: budget_planner.h's plan_admission (score 0 refused; otherwise victims
// lowest first until it fits, admitted when their total value, score x bytes, is at most its
// own). Never when bytes > capacity_bytes. A refused admission evicts nothing. capacity 0
// disables the cache: every lookup misses, every admit is refused.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "core/residency.h"

namespace moezero::prefetch {

// The result types and counters are core's (core/residency.h): the engine uses them.
using moezero::CacheAdmit;
using moezero::CacheLookup;
using moezero::ShardCacheCounters;

// shard_cache.eviction (registered with the config in shard_cache.cpp): the victim order above.
enum class EvictionPolicy : uint8_t { Lfu, Lru, Value };
// The order named `name` ("lfu", "lru", "value"). Throws a user error naming shard_cache.eviction.
EvictionPolicy eviction_policy(std::string_view name);

class ShardCache final : public ResidencyCache {
 public:
  // [in] capacity_bytes: most bytes resident at once (0: disabled). [in] eviction: lfu | lru |
  // value.
  ShardCache(uint64_t capacity_bytes, EvictionPolicy eviction);
  explicit ShardCache(const ShardCacheConfig& cfg)
      : ShardCache(cfg.capacity_bytes, eviction_policy(cfg.eviction)) {}

  // [in] group: parameter group id. [in] current_version: the parameters' current version.
  // Ticks the clock; a hit makes the entry the most recently used. Throws if the entry is
  // pinned and stale (an in-use buffer outlived an optimizer step: a caller bug).
  CacheLookup lookup(int group, int64_t current_version) override;

  // Offers a gathered group to the cache. [in] bytes: its size (> 0). [in] version: the version
  // it was gathered at. [in] score: finite, >= 0 for value: its lfu score (e.g.
  // FrequencyModel::probability) or value density (score_kind()); lru ignores it. Ticks the
  // clock. Throws if the group is already resident (lookup() first).
  CacheAdmit admit(int group, uint64_t bytes, int64_t version, double score) override;

  // Updates a resident entry's score (no clock tick). Throws if not resident.
  void set_score(int group, double score) override;

  // An entry in use (an acquired expert) is pinned: never evicted, never dropped. Pins count;
  // every pin needs an unpin. Throws when not resident / not pinned. No clock tick.
  void pin(int group) override;
  void unpin(int group) override;

  // Drops every entry (call at the optimizer step); returns their ids, ascending.
  // Throws if any entry is pinned.
  std::vector<int> invalidate_all() override;
  // Removes an unpinned entry (an eviction; no clock tick). Throws if not resident or pinned.
  void evict(int group) override;
  KeepScore score_kind() const override {
    return eviction_ == EvictionPolicy::Value ? KeepScore::Density : KeepScore::Probability;
  }
  // Drops the entries with version < `version`; returns their ids, ascending. Throws if any of
  // them is pinned.
  std::vector<int> drop_older_than(int64_t version);

  bool contains(int group) const override { return entries_.count(group) != 0; }
  int pins(int group) const;          // 0 when not resident
  std::vector<int> resident() const;  // ascending ids
  // The unpinned entries in eviction order (first = next victim). For tests and traces.
  std::vector<int> eviction_order() const;
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  EvictionPolicy eviction() const { return eviction_; }
  uint64_t clock() const { return clock_; }
  const ShardCacheCounters& counters() const override { return counters_; }

 private:
  struct Entry {
    uint64_t bytes;
    int64_t version;
    double score;
    uint64_t last_use;  // clock value of the latest admit or hit
    int pins;
  };
  // True when entry a (id ia) is evicted before entry b (id ib).
  bool evicted_before(int ia, const Entry& a, int ib, const Entry& b) const;
  void erase(std::map<int, Entry>::iterator it);
  // The victims that make room for the newcomer `fresh` (see Admission above), in eviction
  // order; nullopt when it is refused.
  std::optional<std::vector<int>> victims_for(int group, const Entry& fresh) const;
  enum class DropAll : uint8_t { No, Yes };
  std::vector<int> drop_if_older(int64_t version, DropAll all);

  uint64_t capacity_bytes_;
  EvictionPolicy eviction_;
  uint64_t clock_ = 0;
  std::map<int, Entry> entries_;  // id-ordered: iteration order is part of determinism
  ShardCacheCounters counters_;
};

}  // namespace moezero::prefetch
