// zero/dense_keep.h — the dense keep: the residency policy that keeps gathered dense parameter
// groups from one micro-batch to the next within an optimizer step (ZeroOptions::
// keep_dense_bytes; FSDP2's reshard_after_backward(False), DeepSpeed's max_reuse_distance).
// The second policy of core/residency.h's interface, beside the expert shard cache of
// prefetch/shard_cache.h: the fetch coordinator treats both alike.
//
// One instance per gather communicator: admission is in release order, first come first kept,
// within `budget_bytes`, and only while a later micro-batch of the step will reuse the group
// (`reusable`); nothing is evicted; invalidate_all() (the end of the step's passes) empties it.
// Decisions depend only on the call sequence and sizes: identical on every rank of the group.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "core/residency.h"

namespace moezero {

class DenseKeep final : public ResidencyCache {
 public:
  // [in] reusable: true while a later micro-batch of this step will acquire the groups again.
  DenseKeep(uint64_t budget_bytes, std::function<bool()> reusable)
      : budget_(budget_bytes), reusable_(std::move(reusable)) {}

  CacheLookup lookup(int group, int64_t current_version) override;
  CacheAdmit admit(int group, uint64_t bytes, int64_t version, double score) override;
  void set_score(int, double) override {}
  void pin(int) override {}
  void unpin(int) override {}
  std::vector<int> invalidate_all() override;  // in group order
  // Its bytes stay counted against the step's budget (first come first kept).
  void evict(int group) override;
  bool contains(int group) const override { return kept_.count(group) > 0; }
  const ShardCacheCounters& counters() const override { return counters_; }

 private:
  struct Entry {
    uint64_t bytes = 0;
    int64_t version = 0;
  };
  uint64_t budget_;
  std::function<bool()> reusable_;
  std::map<int, Entry> kept_;    // by group id
  uint64_t admitted_bytes_ = 0;  // admitted since the last invalidate_all (the budget's)
  ShardCacheCounters counters_;
};

}  // namespace moezero
