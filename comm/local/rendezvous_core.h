// comm/local/rendezvous_core.h — what every rendezvous of rank threads shares: the local
// Channel (comm/local/rendezvous.h, wall-clock data movement) and the simulated SimChannel
// (comm/sim/sim_communicator.h, virtual time over present members).
//
// It holds the group and its per-rank sequence numbers, the world's abort flag, and the
// channel's failure: the first failure (timeout, divergence) breaks the channel, so every
// waiter and every later call on it fails at once with the same message, as an aborted NCCL
// communicator does. It checks what is common to both: an arrival's call signature against
// the first arrival's, and the all_to_all_v counts between the members that arrived.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/call_signature.h"
#include "comm/host_communicator.h"
#include "core/communicator.h"

namespace moezero::comm {

// Shared by every channel of one world: set once when any rank fails.
struct AbortState {
  std::atomic<bool> aborted{false};
  std::mutex mu;
  std::string reason;

  // Sets the reason and the flag; false when the world was aborted already (first wins).
  bool raise(const std::string& why);
};

// The checks of LocalWorld::make_communicator and SimWorld's: `group` is non-empty, its ranks
// are distinct members of a world of `world_size`, and `global_rank` is one of them.
void check_group(const ProcessGroup& group, int world_size, int global_rank);

class RendezvousCore {
 public:
  const ProcessGroup& group() const { return group_; }
  const std::string& name() const { return name_; }
  const CommOptions& options() const { return options_; }

  // The next sequence number of group rank `rank` (host side, at enqueue).
  uint64_t take_seq(int rank);
  // Wakes every waiter so that it sees the world's abort.
  void notify_abort();

 protected:
  RendezvousCore(ProcessGroup group, std::string name, CommOptions options,
                 std::shared_ptr<AbortState> abort);

  // "<call> on group <g> channel '<name>' seq <n>": where a collective is, in messages.
  std::string where(const CallSignature& sig, uint64_t seq) const;
  // Sets the channel's failure (first one wins) and wakes everyone. Caller holds mu_.
  void fail_locked(bool timeout, std::string message);
  // Throws the channel's failure (TimeoutError or Error). Caller holds mu_; failure_ is set.
  [[noreturn]] void throw_failure_locked() const;
  // Throws the channel's failure, or the world's abort naming the call, if either is there.
  void throw_if_broken_locked(const CallSignature& sig, uint64_t seq) const;
  // Fails the channel with a divergence error when `sig` (group rank `rank`) does not match
  // the reference call `ref` of group rank `ref_rank`.
  void check_signature_locked(const CallSignature& ref, int ref_rank, const CallSignature& sig,
                              int rank, uint64_t seq);
  // all_to_all_v: every member of `members` (group ranks) sends each member what it expects.
  // [in] calls: by group rank. "" when consistent (or not an all_to_all_v).
  std::string validate_counts(const std::vector<HostCall>& calls, const std::vector<int>& members,
                              uint64_t seq) const;
  // Fails the channel with a TimeoutError naming the members of `members` that did not arrive.
  // [in] waiting_for: " ms waiting for ranks " or the like, between the timeout and the list.
  [[noreturn]] void fail_timeout_locked(const CallSignature& sig, uint64_t seq,
                                        const std::vector<char>& arrived,
                                        const std::vector<int>& members, const char* waiting_for);
  std::string abort_reason() const;
  bool failed_locked() const { return failure_.has_value(); }

  const ProcessGroup group_;
  const std::string name_;
  const CommOptions options_;
  std::shared_ptr<AbortState> abort_;
  std::mutex mu_;
  std::condition_variable cv_;

 private:
  struct Failure {
    bool timeout = false;  // throw TimeoutError rather than Error
    std::string message;
  };
  std::vector<uint64_t> next_seq_;  // by group rank
  std::optional<Failure> failure_;
};

}  // namespace moezero::comm
