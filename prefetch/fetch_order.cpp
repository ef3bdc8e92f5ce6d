// prefetch/fetch_order.cpp — the recorded dense prefetch order's state machine (see fetch_order.h).
#include "prefetch/fetch_order.h"

#include <utility>

namespace moezero {

bool FetchOrder::on_acquire(int group) {
  trace_.push_back(group);
  if (state_ == State::Replaying && pos_ < recorded_.size() && recorded_[pos_] == group) {
    ++pos_;
    return true;
  }
  if (state_ == State::Replaying) state_ = State::Invalidated;
  return false;
}

std::span<const int> FetchOrder::ahead() const {
  if (state_ != State::Replaying) return {};
  return std::span<const int>(recorded_).subspan(pos_);
}

void FetchOrder::end_step() {
  recorded_ = std::move(trace_);
  trace_.clear();
  pos_ = 0;
  state_ = recorded_.empty() ? State::Recording : State::Replaying;
}

FetchOrder FetchOrder::restored(std::vector<int> recorded) {
  FetchOrder o;
  o.recorded_ = std::move(recorded);
  o.state_ = o.recorded_.empty() ? State::Recording : State::Replaying;
  return o;
}

}  // namespace moezero
