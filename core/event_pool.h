// core/event_pool.h — timing events reused across steps. While a step is issued, its timed
// work (trace spans, expert gathers, waits on gathers) takes events one at a time; once their
// timings have been read, all of them are handed back at once with recycle(). Events are
// created only when every pooled one is taken, so a steady run creates none after its first
// steps.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/device.h"

namespace moezero {

class EventPool {
 public:
  explicit EventPool(Device& device) : device_(&device) {}
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  // A free event of the pool (created when every pooled one is taken). It stays taken, at the
  // same address, until recycle(); the pool owns it.
  Event& take() {
    if (taken_ == events_.size()) events_.push_back(device_->create_event());
    return *events_[taken_++];
  }
  // Every taken event is free again: call once nothing reads their timings any more.
  void recycle() { taken_ = 0; }

  size_t taken() const { return taken_; }
  size_t created() const { return events_.size(); }

 private:
  Device* device_;
  std::vector<std::unique_ptr<Event>> events_;  // every event this pool created
  size_t taken_ = 0;                            // events_[0, taken_) are taken
};

}  // namespace moezero
