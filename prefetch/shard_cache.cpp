// prefetch/shard_cache.cpp — lookup/admit/evict bookkeeping of the shard cache.
#include "prefetch/shard_cache.h"

#include <algorithm>
#include <cmath>

#include "core/config_choices.h"
#include "core/error.h"
#include "prefetch/budget_planner.h"

namespace moezero::prefetch {

namespace {

struct EvictionName {
  const char* name;  // the config string (shard_cache.eviction)
  EvictionPolicy value;
  const char* doc;  // one line for `moezero config --doc` and docs/config.md
};

const EvictionName kEvictionNames[] = {
    {"lfu", EvictionPolicy::Lfu,
     "the lowest frequency-model score first, then the least recently used"},
    {"lru", EvictionPolicy::Lru, "the least recently used first (a logical clock)"},
    {"value", EvictionPolicy::Value,
     "the least link time of re-gathers saved per byte kept first (docs/prefetch.md, budget "
     "planner); worthless entries are freed after use"},
};

std::vector<ConfigChoice> eviction_choices() {
  std::vector<ConfigChoice> v;
  for (const EvictionName& e : kEvictionNames) v.push_back({e.name, e.doc});
  return v;
}

// shard_cache.eviction's values for the config (core/config_choices.h).
const ConfigChoicesRegistration kEvictionChoices{"shard_cache.eviction", eviction_choices()};

}  // namespace

EvictionPolicy eviction_policy(std::string_view name) {
  std::string known;
  for (const EvictionName& e : kEvictionNames) {
    if (name == e.name) return e.value;
    known += (known.empty() ? "" : ", ") + std::string(e.name);
  }
  MOEZERO_USER_ERROR("shard_cache.eviction: must be one of ", known, ", got \"", name, "\"");
}

ShardCache::ShardCache(uint64_t capacity_bytes, EvictionPolicy eviction)
    : capacity_bytes_(capacity_bytes), eviction_(eviction) {}

bool ShardCache::evicted_before(int ia, const Entry& a, int ib, const Entry& b) const {
  if (eviction_ != EvictionPolicy::Lru && a.score != b.score) return a.score < b.score;
  if (a.last_use != b.last_use) return a.last_use < b.last_use;
  return ia < ib;
}

void ShardCache::erase(std::map<int, Entry>::iterator it) {
  counters_.bytes_resident -= it->second.bytes;
  entries_.erase(it);
}

CacheLookup ShardCache::lookup(int group, int64_t current_version) {
  ++clock_;
  auto it = entries_.find(group);
  if (it == entries_.end()) {
    ++counters_.misses;
    return CacheLookup::Miss;
  }
  if (it->second.version != current_version) {
    MOEZERO_CHECK(it->second.pins == 0, "ShardCache::lookup: group ", group,
                  " is pinned at version ", it->second.version, " but the current version is ",
                  current_version);
    erase(it);
    ++counters_.misses;
    ++counters_.stale_drops;
    return CacheLookup::Stale;
  }
  it->second.last_use = clock_;
  ++counters_.hits;
  return CacheLookup::Hit;
}

CacheAdmit ShardCache::admit(int group, uint64_t bytes, int64_t version, double score) {
  MOEZERO_CHECK(bytes > 0, "ShardCache::admit: group ", group, ": bytes must be > 0");
  MOEZERO_CHECK(std::isfinite(score) && (eviction_ != EvictionPolicy::Value || score >= 0.0),
                "ShardCache::admit: group ", group, ": score ", score,
                " is not finite (or, for value, negative)");
  MOEZERO_CHECK(!contains(group), "ShardCache::admit: group ", group,
                " is already resident "
                "(version ",
                entries_.at(group).version, "); lookup() it first");
  ++clock_;
  CacheAdmit result;
  if (bytes > capacity_bytes_) {  // also capacity 0
    ++counters_.refusals;
    return result;
  }
  const Entry fresh{bytes, version, score, clock_, 0};
  const std::optional<std::vector<int>> victims = victims_for(group, fresh);
  if (!victims) {
    ++counters_.refusals;
    return result;
  }
  for (const int id : *victims) {
    erase(entries_.find(id));
    ++counters_.evictions;
  }
  result.evicted = *victims;
  entries_.emplace(group, fresh);
  counters_.bytes_resident += bytes;
  counters_.peak_bytes = std::max(counters_.peak_bytes, counters_.bytes_resident);
  ++counters_.admissions;
  result.admitted = true;
  return result;
}

std::optional<std::vector<int>> ShardCache::victims_for(int group, const Entry& fresh) const {
  const uint64_t free_bytes = capacity_bytes_ - counters_.bytes_resident;
  if (eviction_ == EvictionPolicy::Value) {  // knapsack-greedy (budget_planner.h)
    std::vector<KeepEntry> evictable;
    for (const auto& [id, e] : entries_)
      if (e.pins == 0) evictable.push_back({id, e.bytes, e.score, e.last_use});
    KeepDecision d =
        plan_admission({group, fresh.bytes, fresh.score, fresh.last_use}, evictable, free_bytes);
    if (!d.admit) return std::nullopt;
    return std::move(d.victims);
  }
  // lfu, lru: unpinned entries ranking below the newcomer, lowest first, until it fits.
  std::vector<int> victims;
  if (fresh.bytes <= free_bytes) return victims;
  const uint64_t need_bytes = fresh.bytes - free_bytes;
  uint64_t freed_bytes = 0;
  for (const int id : eviction_order()) {
    if (freed_bytes >= need_bytes) break;
    const Entry& e = entries_.at(id);
    if (!evicted_before(id, e, group, fresh)) break;  // would displace a hotter entry
    victims.push_back(id);
    freed_bytes += e.bytes;
  }
  if (freed_bytes < need_bytes) return std::nullopt;
  return victims;
}

void ShardCache::evict(int group) {
  auto it = entries_.find(group);
  MOEZERO_CHECK(it != entries_.end() && it->second.pins == 0, "ShardCache::evict: group ", group,
                " is not resident, or pinned");
  erase(it);
  ++counters_.evictions;
}

void ShardCache::set_score(int group, double score) {
  auto it = entries_.find(group);
  MOEZERO_CHECK(it != entries_.end(), "ShardCache::set_score: group ", group, " is not resident");
  MOEZERO_CHECK(std::isfinite(score), "ShardCache::set_score: group ", group, ": score ", score,
                " is not finite");
  it->second.score = score;
}

void ShardCache::pin(int group) {
  auto it = entries_.find(group);
  MOEZERO_CHECK(it != entries_.end(), "ShardCache::pin: group ", group, " is not resident");
  ++it->second.pins;
}

void ShardCache::unpin(int group) {
  auto it = entries_.find(group);
  MOEZERO_CHECK(it != entries_.end() && it->second.pins > 0, "ShardCache::unpin: group ", group,
                " is not pinned");
  --it->second.pins;
}

std::vector<int> ShardCache::invalidate_all() { return drop_if_older(0, DropAll::Yes); }

std::vector<int> ShardCache::drop_older_than(int64_t version) {
  return drop_if_older(version, DropAll::No);
}

std::vector<int> ShardCache::drop_if_older(int64_t version, DropAll all) {
  std::vector<int> dropped;
  for (const auto& [id, e] : entries_) {
    if (all == DropAll::No && e.version >= version) continue;
    MOEZERO_CHECK(e.pins == 0, "ShardCache: cannot drop group ", id, " (version ", e.version,
                  "): it is pinned ", e.pins, " time(s)");
    dropped.push_back(id);
  }
  for (const int id : dropped) erase(entries_.find(id));
  counters_.stale_drops += dropped.size();
  return dropped;
}

int ShardCache::pins(int group) const {
  const auto it = entries_.find(group);
  return it == entries_.end() ? 0 : it->second.pins;
}

std::vector<int> ShardCache::resident() const {
  std::vector<int> ids;
  for (const auto& [id, e] : entries_) ids.push_back(id);
  return ids;
}

std::vector<int> ShardCache::eviction_order() const {
  std::vector<int> ids;
  for (const auto& [id, e] : entries_) {
    if (e.pins == 0) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end(),
            [this](int a, int b) { return evicted_before(a, entries_.at(a), b, entries_.at(b)); });
  return ids;
}

}  // namespace moezero::prefetch
