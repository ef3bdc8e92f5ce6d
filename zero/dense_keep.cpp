// zero/dense_keep.cpp — DenseKeep (see dense_keep.h).
#include "zero/dense_keep.h"

#include <algorithm>

#include "core/error.h"

namespace moezero {

CacheLookup DenseKeep::lookup(int group, int64_t current_version) {
  auto it = kept_.find(group);
  if (it == kept_.end()) {
    counters_.misses += 1;
    return CacheLookup::Miss;
  }
  if (it->second.version != current_version) {  // never while emptied at every step
    counters_.misses += 1;
    counters_.stale_drops += 1;
    counters_.bytes_resident -= it->second.bytes;
    kept_.erase(it);
    return CacheLookup::Stale;
  }
  counters_.hits += 1;
  return CacheLookup::Hit;
}

CacheAdmit DenseKeep::admit(int group, uint64_t bytes, int64_t version, double) {
  CacheAdmit out;
  // Bytes admitted this step: a kept group leaves only when the step's passes end.
  if (!reusable_() || admitted_bytes_ + bytes > budget_) {
    counters_.refusals += 1;
    return out;
  }
  kept_[group] = Entry{bytes, version};
  counters_.admissions += 1;
  admitted_bytes_ += bytes;
  counters_.bytes_resident += bytes;
  counters_.peak_bytes = std::max(counters_.peak_bytes, counters_.bytes_resident);
  out.admitted = true;
  return out;
}

void DenseKeep::evict(int group) {
  auto it = kept_.find(group);
  MOEZERO_CHECK(it != kept_.end(), "DenseKeep::evict: group ", group, " is not kept");
  counters_.bytes_resident -= it->second.bytes;
  counters_.evictions += 1;
  kept_.erase(it);
}

std::vector<int> DenseKeep::invalidate_all() {
  std::vector<int> out;
  for (const auto& [g, e] : kept_) out.push_back(g);
  counters_.stale_drops += out.size();
  kept_.clear();
  counters_.bytes_resident = 0;
  admitted_bytes_ = 0;
  return out;
}

}  // namespace moezero
