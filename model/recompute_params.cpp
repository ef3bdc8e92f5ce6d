// model/recompute_params.cpp — holding a checkpointed block's groups from its recompute to its
// backward (recompute_params.h).
#include "model/recompute_params.h"

#include "core/error.h"

namespace moezero::model {

Tensor RecomputeParams::acquire(int group, Stream& compute) {
  if (auto it = held_.find(group); it != held_.end()) {
    Tensor w = it->second;
    held_.erase(it);
    inner_.use_held(group);  // a use without a transfer
    acquired_.emplace(group, w);
    return w;
  }
  Tensor w = inner_.acquire(group, compute);
  acquired_.emplace(group, w);
  return w;
}

void RecomputeParams::release(int group, Stream& compute) {
  auto it = acquired_.find(group);
  if (it == acquired_.end()) {  // acquired before this provider (an expert held since forward)
    inner_.release(group, compute);
    return;
  }
  if (holding_ && inner_.may_hold(group))
    held_.emplace(group, it->second);
  else
    inner_.release(group, compute);
  acquired_.erase(it);
}

void RecomputeParams::finish_block(Stream& compute) {
  for (const auto& [group, w] : held_) inner_.release(group, compute);
  held_.clear();
}

}  // namespace moezero::model
