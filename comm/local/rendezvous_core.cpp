// comm/local/rendezvous_core.cpp — sequence numbers, failure, abort and the shared checks of
// a rendezvous (rendezvous_core.h).
#include "comm/local/rendezvous_core.h"

#include <set>
#include <sstream>

#include "core/error.h"

namespace moezero::comm {

bool AbortState::raise(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu);
  if (aborted) return false;
  reason = why;
  aborted = true;
  return true;
}

void check_group(const ProcessGroup& group, int world_size, int global_rank) {
  MOEZERO_CHECK(group.size() >= 1, "make_communicator: group '", group.name, "' is empty");
  std::set<int> seen;
  for (int r : group.ranks) {
    MOEZERO_CHECK(r >= 0 && r < world_size, "make_communicator: group ", group.str(), " has rank ",
                  r, " outside the world of ", world_size);
    MOEZERO_CHECK(seen.insert(r).second, "make_communicator: group ", group.str(), " lists rank ",
                  r, " twice");
  }
  MOEZERO_CHECK(group.contains(global_rank), "make_communicator: rank ", global_rank,
                " is not a member of group ", group.str());
}

RendezvousCore::RendezvousCore(ProcessGroup group, std::string name, CommOptions options,
                               std::shared_ptr<AbortState> abort)
    : group_(std::move(group)),
      name_(std::move(name)),
      options_(options),
      abort_(std::move(abort)),
      next_seq_(static_cast<size_t>(group_.size()), 0) {}

uint64_t RendezvousCore::take_seq(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  return next_seq_[static_cast<size_t>(rank)]++;
}

void RendezvousCore::notify_abort() {
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

std::string RendezvousCore::where(const CallSignature& sig, uint64_t seq) const {
  return sig.str() + " on group " + group_.str() + " channel '" + name_ + "' seq " +
         std::to_string(seq);
}

std::string RendezvousCore::abort_reason() const {
  std::lock_guard<std::mutex> lock(abort_->mu);
  return abort_->reason;
}

void RendezvousCore::fail_locked(bool timeout, std::string message) {
  if (!failure_) failure_ = Failure{timeout, std::move(message)};
  cv_.notify_all();
}

void RendezvousCore::throw_failure_locked() const {
  if (failure_->timeout) throw TimeoutError(failure_->message, __FILE__, __LINE__);
  throw Error(failure_->message, __FILE__, __LINE__);
}

void RendezvousCore::throw_if_broken_locked(const CallSignature& sig, uint64_t seq) const {
  if (failure_) throw_failure_locked();
  if (abort_->aborted) MOEZERO_THROW(where(sig, seq), ": aborted: ", abort_reason());
}

void RendezvousCore::check_signature_locked(const CallSignature& ref, int ref_rank,
                                            const CallSignature& sig, int rank, uint64_t seq) {
  if (sig.matches(ref)) return;
  fail_locked(false, "collective divergence on group " + group_.str() + " channel '" + name_ +
                         "' seq " + std::to_string(seq) + ": rank " +
                         std::to_string(group_.ranks[ref_rank]) + " called " + ref.str() +
                         " but rank " + std::to_string(group_.ranks[rank]) + " called " +
                         sig.str());
  throw_failure_locked();
}

std::string RendezvousCore::validate_counts(const std::vector<HostCall>& calls,
                                            const std::vector<int>& members, uint64_t seq) const {
  const HostCall& a0 = calls[static_cast<size_t>(members[0])];
  if (a0.sig.op != CollectiveOp::AllToAllV) return "";
  for (int r : members) {
    for (int p : members) {
      const size_t sent = calls[static_cast<size_t>(r)].send_elems[static_cast<size_t>(p)];
      const size_t expected = calls[static_cast<size_t>(p)].recv_elems[static_cast<size_t>(r)];
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

void RendezvousCore::fail_timeout_locked(const CallSignature& sig, uint64_t seq,
                                         const std::vector<char>& arrived,
                                         const std::vector<int>& members, const char* waiting_for) {
  std::vector<int> missing, present;
  for (int r : members)
    (arrived[static_cast<size_t>(r)] ? present : missing).push_back(group_.ranks[r]);
  fail_locked(true, where(sig, seq) + ": timed out after " +
                        std::to_string(options_.timeout.count()) + waiting_for +
                        rank_list(missing) + " (arrived: " + rank_list(present) + ")");
  throw_failure_locked();
}

}  // namespace moezero::comm
