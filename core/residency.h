// core/residency.h — the interface between the ZeRO engine's fetch coordinator and a residency
// policy that keeps gathered parameter groups past their release. Two policies implement it:
// the expert shard cache (prefetch/shard_cache.h: a byte budget, lfu/lru/value eviction, from
// forward to backward and across micro-batches) and the dense keep (zero/dense_keep.h: dense groups
// from one micro-batch to the next, first come first kept). The coordinator owns the buffers
// and asks the policy what to keep and what to evict; the policy sees only group ids, byte
// sizes, versions and scores, so its decisions are identical on every rank that makes the same
// calls.
#pragma once

#include <cstdint>
#include <vector>

namespace moezero {

enum class CacheLookup : uint8_t {
  Hit,    // resident at the requested version: use the cached buffer
  Miss,   // not resident
  Stale,  // was resident at another version: dropped now; the caller frees that buffer
};

struct ShardCacheCounters {
  uint64_t hits = 0;
  uint64_t misses = 0;       // lookups that did not hit (Stale ones included)
  uint64_t stale_drops = 0;  // entries dropped for their version: by lookup, invalidate, drop
  uint64_t evictions = 0;    // entries evicted to make room
  uint64_t admissions = 0;
  uint64_t refusals = 0;  // admit() calls that did not admit
  uint64_t bytes_resident = 0;
  uint64_t peak_bytes = 0;  // most bytes resident at once
};

struct CacheAdmit {
  bool admitted = false;     // false: the cache does not hold the group; the caller frees it
  std::vector<int> evicted;  // groups evicted to make room, in eviction order: free them
};

// What the score of admit() and set_score() is to a policy (ResidencyCache::score_kind).
enum class KeepScore : uint8_t {
  Probability,  // the probability of use in a micro-batch (FrequencyModel::probability)
  Density,      // the link time a kept byte saves (prefetch/budget_planner.h keep_density);
                // 0: worthless, the owner frees it (evict)
};

class ResidencyCache {
 public:
  virtual ~ResidencyCache() = default;
  virtual CacheLookup lookup(int group, int64_t current_version) = 0;
  virtual CacheAdmit admit(int group, uint64_t bytes, int64_t version, double score) = 0;
  virtual void set_score(int group, double score) = 0;
  virtual void pin(int group) = 0;
  virtual void unpin(int group) = 0;
  virtual std::vector<int> invalidate_all() = 0;
  // Removes an unpinned resident entry (counted as an eviction); the caller frees its buffer.
  virtual void evict(int group) = 0;
  virtual KeepScore score_kind() const { return KeepScore::Probability; }
  virtual bool contains(int group) const = 0;
  virtual const ShardCacheCounters& counters() const = 0;
};

}  // namespace moezero
