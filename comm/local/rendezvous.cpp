// comm/local/rendezvous.cpp — arrival, mid barrier and departure of the rank threads.
#include "comm/local/rendezvous.h"

#include <sstream>

#include "comm/local/link_emulation.h"
#include "core/error.h"

namespace moezero::comm {

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "}";
}
}  // namespace

Channel::Channel(ProcessGroup group, std::string name, CommOptions options,
                 std::shared_ptr<AbortState> abort, std::shared_ptr<EmulatedNetwork> network)
    : group_(std::move(group)),
      name_(std::move(name)),
      options_(options),
      abort_(std::move(abort)),
      network_(std::move(network)),
      next_seq_(static_cast<size_t>(group_.size()), 0) {}

uint64_t Channel::take_seq(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  return next_seq_[static_cast<size_t>(rank)]++;
}

std::string Channel::where(const CallSignature& sig, uint64_t seq) const {
  return sig.str() + " on group " + group_.str() + " channel '" + name_ + "' seq " +
         std::to_string(seq);
}

std::string Channel::abort_reason() const {
  std::lock_guard<std::mutex> lock(abort_->mu);
  return abort_->reason;
}

void Channel::throw_failure(const Failure& f) const {
  if (f.timeout) throw TimeoutError(f.message, __FILE__, __LINE__);
  throw Error(f.message, __FILE__, __LINE__);
}

void Channel::fail_locked(bool timeout, std::string message) {
  if (!failure_) failure_ = Failure{timeout, std::move(message)};
  cv_.notify_all();
}

void Channel::notify_abort() {
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

std::string Channel::validate_locked(const Slot& slot, uint64_t seq) const {
  const Arrival& a0 = slot.arrivals[0];
  if (a0.sig.op != CollectiveOp::AllToAllV) return "";
  const size_t n = slot.arrivals.size();
  for (size_t r = 0; r < n; ++r) {
    for (size_t p = 0; p < n; ++p) {
      const size_t sent = slot.arrivals[r].send_elems[p];
      const size_t expected = slot.arrivals[p].recv_elems[r];
      if (sent != expected) {
        std::ostringstream os;
        os << "collective divergence in " << where(a0.sig, seq) << ": rank " << group_.ranks[r]
           << " sends " << sent << " elems to rank " << group_.ranks[p] << ", which expects "
           << expected << " from it";
        return os.str();
      }
    }
  }
  return "";
}

std::shared_ptr<Slot> Channel::arrive(int rank, uint64_t seq, Arrival arrival) {
  const CallSignature sig = arrival.sig;
  std::unique_lock<std::mutex> lock(mu_);
  if (failure_) throw_failure(*failure_);
  if (abort_->aborted) MOEZERO_THROW(where(sig, seq), ": aborted: ", abort_reason());

  const int n = group_.size();
  auto& entry = slots_[seq];
  if (!entry) entry = std::make_shared<Slot>(n);
  std::shared_ptr<Slot> slot = entry;
  MOEZERO_CHECK(!slot->arrived[static_cast<size_t>(rank)], "rank ", group_.ranks[rank],
                " arrived twice at ", where(sig, seq));

  if (slot->first_rank >= 0) {
    const CallSignature& ref = slot->arrivals[static_cast<size_t>(slot->first_rank)].sig;
    if (!sig.matches(ref)) {
      fail_locked(false, "collective divergence on group " + group_.str() + " channel '" + name_ +
                             "' seq " + std::to_string(seq) + ": rank " +
                             std::to_string(group_.ranks[slot->first_rank]) + " called " +
                             ref.str() + " but rank " + std::to_string(group_.ranks[rank]) +
                             " called " + sig.str());
      throw_failure(*failure_);
    }
  } else {
    slot->first_rank = rank;
  }
  slot->arrivals[static_cast<size_t>(rank)] = std::move(arrival);
  slot->arrived[static_cast<size_t>(rank)] = 1;
  if (++slot->n_arrived == n) {
    std::string bad = validate_locked(*slot, seq);
    if (!bad.empty()) {
      slot->failed = true;
      fail_locked(false, std::move(bad));
      throw_failure(*failure_);
    }
    if (network_) slot->net_id = network_->start(collective_shape(slot->arrivals, group_), n);
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

  const bool all_arrived = cv_.wait_for(lock, options_.timeout, [&] {
    return slot->n_arrived == n || failure_.has_value() || abort_->aborted.load();
  });
  // Complete even if another slot's failure raced with it (never after its own failed).
  if (slot->n_arrived == n && !slot->failed) return slot;
  if (failure_) throw_failure(*failure_);
  if (abort_->aborted) MOEZERO_THROW(where(sig, seq), ": aborted: ", abort_reason());
  (void)all_arrived;
  std::vector<int> missing, present;
  for (int r = 0; r < n; ++r) (slot->arrived[r] ? present : missing).push_back(group_.ranks[r]);
  fail_locked(true, where(sig, seq) + ": timed out after " +
                        std::to_string(options_.timeout.count()) + " ms waiting for ranks " +
                        rank_list(missing) + " (arrived: " + rank_list(present) + ")");
  throw_failure(*failure_);
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
