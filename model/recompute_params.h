// model/recompute_params.h — the parameter provider a fully checkpointed block's backward runs
// through (train.activation_checkpointing = full): it keeps a group acquired from the block's
// recompute to the block's backward, so that under ZeRO-3 the block's parameters are gathered
// once for both, as FSDP does when its pre-backward all-gather serves the checkpointed
// forward (otherwise the recompute would gather the block, free it, and its backward gather
// it again).
//
// While holding (hold_releases()), release(g) of a group that ParamProvider::may_hold allows
// does not reach the real provider: the group stays acquired there. The next acquire(g) gets
// the same parameters back without a transfer (ParamProvider::use_held counts the use) and
// the release after it is real. may_hold reads state that is identical on every rank of the
// group, and every rank recomputes the same blocks, so all ranks hold the same groups and
// issue the same collectives in the same order (the recorded dense order sees the recompute's
// acquires; backward's acquires of held groups are not acquires of the real provider).
// finish_block() releases what the block's backward did not take back.
//
// Everything else (gradients, hints, queries) passes through unchanged.
#pragma once

#include <map>
#include <span>

#include "core/param_group.h"

namespace moezero::model {

class RecomputeParams final : public ParamProvider {
 public:
  explicit RecomputeParams(ParamProvider& inner) : inner_(inner) {}
  ~RecomputeParams() override = default;

  // From now on releases are held (the block's recompute runs).
  void hold_releases() { holding_ = true; }
  // Releases are real again (the block's backward runs; held groups are taken back on acquire).
  void stop_holding() { holding_ = false; }
  // The block's backward is done: releases every group still held, in group order.
  void finish_block(Stream& compute);
  // Groups held now (tests).
  size_t held_count() const { return held_.size(); }

  int group_count() const override { return inner_.group_count(); }
  const GroupLayout& layout(int group) const override { return inner_.layout(group); }
  DType compute_dtype() const override { return inner_.compute_dtype(); }
  Tensor acquire(int group, Stream& compute) override;
  void release(int group, Stream& compute) override;
  Tensor grad(int group, Stream& compute) override { return inner_.grad(group, compute); }
  void grad_ready(int group, Stream& compute) override { inner_.grad_ready(group, compute); }

  void prefetch(int group, Stream& compute, FetchReason reason = FetchReason::Predicted) override {
    inner_.prefetch(group, compute, reason);
  }
  void prefetch_block(std::span<const int> groups, Stream& compute,
                      FetchReason reason = FetchReason::Predicted) override {
    inner_.prefetch_block(groups, compute, reason);
  }
  void prefetch_set(std::span<const int> groups, Stream& compute,
                    FetchReason reason = FetchReason::Predicted) override {
    inner_.prefetch_set(groups, compute, reason);
  }
  void discard_prefetch(int group) override { inner_.discard_prefetch(group); }
  void set_keep_score(int group, double score) override { inner_.set_keep_score(group, score); }
  bool cached(int group) const override { return inner_.cached(group); }
  bool needs_fetch(int group) const override { return inner_.needs_fetch(group); }
  uint64_t fetch_ticket(int group) const override { return inner_.fetch_ticket(group); }
  bool may_hold(int group) const override { return inner_.may_hold(group); }
  void use_held(int group) override { inner_.use_held(group); }
  void hold(int group) override { inner_.hold(group); }

 private:
  ParamProvider& inner_;
  bool holding_ = false;
  std::map<int, Tensor> acquired_;  // acquired from inner_ through this provider, not released
  std::map<int, Tensor> held_;      // released while holding: still acquired in inner_
};

}  // namespace moezero::model
