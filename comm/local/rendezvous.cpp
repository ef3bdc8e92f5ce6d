// comm/local/rendezvous.cpp — arrival, mid barrier and departure of the rank threads.
#include "comm/local/rendezvous.h"

#include "comm/local/link_emulation.h"
#include "core/error.h"

namespace moezero::comm {

Channel::Channel(ProcessGroup group, std::string name, CommOptions options,
                 std::shared_ptr<AbortState> abort, std::shared_ptr<EmulatedNetwork> network,
                 std::shared_ptr<LinkTally> tally)
    : RendezvousCore(std::move(group), std::move(name), options, std::move(abort)),
      network_(std::move(network)),
      tally_(std::move(tally)) {
  for (int r = 0; r < group_.size(); ++r) members_.push_back(r);
}

std::shared_ptr<Slot> Channel::arrive(int rank, uint64_t seq, Arrival arrival) {
  const CallSignature sig = arrival.sig;
  std::unique_lock<std::mutex> lock(mu_);
  throw_if_broken_locked(sig, seq);

  const int n = group_.size();
  auto& entry = slots_[seq];
  if (!entry) entry = std::make_shared<Slot>(n);
  std::shared_ptr<Slot> slot = entry;
  MOEZERO_CHECK(!slot->arrived[static_cast<size_t>(rank)], "rank ", group_.ranks[rank],
                " arrived twice at ", where(sig, seq));

  if (slot->first_rank >= 0) {
    check_signature_locked(slot->arrivals[static_cast<size_t>(slot->first_rank)].sig,
                           slot->first_rank, sig, rank, seq);
  } else {
    slot->first_rank = rank;
  }
  slot->arrivals[static_cast<size_t>(rank)] = std::move(arrival);
  slot->arrived[static_cast<size_t>(rank)] = 1;
  if (++slot->n_arrived == n) {
    std::string bad = validate_counts(slot->arrivals, members_, seq);
    if (!bad.empty()) {
      slot->failed = true;
      fail_locked(false, std::move(bad));
      throw_failure_locked();
    }
    if (network_ || tally_) {
      const CollectiveShape shape = collective_shape(slot->arrivals, group_);
      if (tally_) tally_->add(collective_traffic(options_.emulation, shape));
      if (network_) slot->net_id = network_->start(shape, n);
    }
    if (slot->arrivals[0].sig.op == CollectiveOp::AllReduce) {
      if (!staging_pool_.empty()) {
        slot->staging = std::move(staging_pool_.back());
        staging_pool_.pop_back();
      }
      slot->staging.resize(slot->arrivals[0].sig.elems * dtype_size_bytes(sig.dtype));
    }
    cv_.notify_all();
    return slot;
  }

  cv_.wait_for(lock, options_.timeout,
               [&] { return slot->n_arrived == n || failed_locked() || abort_->aborted.load(); });
  // Complete even if another slot's failure raced with it (never after its own failed).
  if (slot->n_arrived == n && !slot->failed) return slot;
  throw_if_broken_locked(sig, seq);
  fail_timeout_locked(sig, seq, slot->arrived, members_, " ms waiting for ranks ");
}

void Channel::phase_barrier(Slot& slot, int rank, uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  const int n = group_.size();
  if (++slot.n_phase == n) {
    cv_.notify_all();
    return;
  }
  // Every rank of the slot is inside the collective; the wait is bounded by a peer's reduce.
  if (!cv_.wait_for(lock, options_.timeout, [&] { return slot.n_phase == n; }))
    MOEZERO_THROW_AS(TimeoutError, where(slot.arrivals[rank].sig, seq),
                     ": peers did not finish the reduce phase in time");
}

void Channel::depart(Slot& slot, int rank, uint64_t seq) {
  // Emulated network time, outside the channel's lock: interruptible by a world abort.
  const bool aborted_in_wait = network_ && !network_->wait(slot.net_id, abort_->aborted);
  std::unique_lock<std::mutex> lock(mu_);
  const int n = group_.size();
  // Done reading the peers' buffers. Not interruptible: a peer may still read ours.
  if (++slot.n_done == n) {
    if (slot.staging.capacity() > 0 && staging_pool_.size() < kMaxPooled)
      staging_pool_.push_back(std::move(slot.staging));
    slots_.erase(seq);
    cv_.notify_all();
  } else if (!cv_.wait_for(lock, options_.timeout, [&] { return slot.n_done == n; })) {
    MOEZERO_THROW_AS(TimeoutError, where(slot.arrivals[rank].sig, seq),
                     ": peers did not finish reading in time");
  }
  if (aborted_in_wait)
    MOEZERO_THROW(where(slot.arrivals[rank].sig, seq), ": aborted: ", abort_reason());
}

}  // namespace moezero::comm
