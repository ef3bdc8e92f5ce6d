// prefetch/fetch_order.h — the recorded dense prefetch order of one gather communicator: the
// sequence in which its parameter groups were acquired in the last completed step, replayed in
// the next one so that the ZeRO engine can gather ahead of need (DeepSpeed's
// PartitionedParameterCoordinator trace, with "the order changed" as a state).
//
// Pure host code: it sees group ids only, never buffers, streams or communicators. The engine
// keeps one FetchOrder per gather communicator (PrefetchPlanner, prefetch_planner.h) and the
// fetch coordinator decides how far ahead to gather.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace moezero {

class FetchOrder {
 public:
  // Recording:   nothing recorded yet (first step, or the last step acquired nothing here);
  //              acquires are only recorded.
  // Replaying:   every acquire of this step so far followed the recorded order; ahead() is
  //              what comes next.
  // Invalidated: this step left the recorded order; no prefetch until the step ends.
  // end_step() records this step's acquires as the new order: Replaying if it holds any,
  // Recording otherwise.
  enum class State { Recording, Replaying, Invalidated };

  // [in] group: the group just acquired. Returns true when it was the next group of the
  // recorded order (the replay goes on); false otherwise, which invalidates a replay.
  bool on_acquire(int group);

  // Groups of the recorded order after the last matched acquire, in order; empty unless
  // Replaying. Valid until the next call of a non-const member.
  std::span<const int> ahead() const;

  // Ends the step: this step's acquires become the recorded order.
  void end_step();

  State state() const { return state_; }
  // The order of the last completed step (what is saved with a checkpoint).
  const std::vector<int>& recorded() const { return recorded_; }
  // [in] recorded: a saved order; replayed from the start of the next step.
  static FetchOrder restored(std::vector<int> recorded);

 private:
  std::vector<int> recorded_;  // acquires of the last completed step
  std::vector<int> trace_;     // acquires of this step so far
  size_t pos_ = 0;             // acquires of this step that matched recorded_
  State state_ = State::Recording;
};

}  // namespace moezero
