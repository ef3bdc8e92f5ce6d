// comm/local/rendezvous.h — where the rank threads of one (group, channel) meet.
//
// A Channel is the shared state behind every rank's LocalCommunicator of one (group, channel).
// Each collective is a Slot keyed by its sequence number. A rank's stream worker:
//   1. arrive(): publishes its Arrival (pointers, counts, call signature) and waits, bounded by
//      the timeout, until every rank has arrived. The first arrival's signature is the
//      reference: a different call is a divergence error. The last arrival validates the
//      cross-rank arguments (all_to_all_v counts) and starts the collective on the world's
//      emulated network (comm/local/emulated_network.h), when there is one.
//   2. moves its data (comm/local/*.cpp), reading the peers' send buffers and writing only
//      its own recv buffer (all_reduce adds a mid barrier, phase_barrier()).
//   3. depart(): waits until the network model completes it (interruptible, no CPU burn; the
//      completion moves later while other collectives share its links), then until every
//      rank has finished reading, so no send buffer is released while a peer reads it.
// Failures (timeout, divergence, world abort) break the channel: every waiter and every later
// call on it fails at once with the same message, as an aborted NCCL communicator does
// (comm/local/rendezvous_core.h, shared with the simulated channel).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/call_signature.h"
#include "comm/host_communicator.h"
#include "comm/local/emulated_network.h"
#include "comm/local/rendezvous_core.h"
#include "core/communicator.h"

namespace moezero::comm {

using Arrival = HostCall;  // one rank's checked call (comm/host_communicator.h)

class LinkTally;  // comm/local/link_emulation.h

// One collective instance. Arrivals are immutable once every rank has arrived.
struct Slot {
  explicit Slot(int n) : arrivals(static_cast<size_t>(n)), arrived(static_cast<size_t>(n), 0) {}
  std::vector<Arrival> arrivals;  // by group rank
  std::vector<char> arrived;      // by group rank
  int n_arrived = 0;
  int first_rank = -1;             // whose signature is the reference
  bool failed = false;             // all arrived, but the cross-rank validation failed
  int n_phase = 0;                 // ranks past the mid barrier
  int n_done = 0;                  // ranks done reading the peers' buffers
  uint64_t net_id = 0;             // its collective on the emulated network (0: none)
  std::vector<std::byte> staging;  // all_reduce: the reduced result
};

class Channel : public RendezvousCore {
 public:
  // [in] network: the world's emulated network; null when emulation is off. [in] tally: the
  // world's sent bytes by tier (null: not counted); each collective's traffic under
  // options.emulation is added when its last rank arrives.
  Channel(ProcessGroup group, std::string name, CommOptions options,
          std::shared_ptr<AbortState> abort, std::shared_ptr<EmulatedNetwork> network,
          std::shared_ptr<LinkTally> tally = nullptr);

  // Step 1. Returns the slot once all ranks arrived. Throws TimeoutError / Error.
  std::shared_ptr<Slot> arrive(int rank, uint64_t seq, Arrival arrival);
  // All ranks of `slot` pass together (all_reduce between reduce and copy-out). Not
  // interruptible: every rank of the slot is already inside the collective.
  void phase_barrier(Slot& slot, int rank, uint64_t seq);
  // Step 3. Throws Error if the world was aborted during the emulated wait (after the
  // peers have finished reading this rank's buffers).
  void depart(Slot& slot, int rank, uint64_t seq);

 private:
  std::shared_ptr<EmulatedNetwork> network_;
  std::shared_ptr<LinkTally> tally_;
  std::vector<int> members_;  // every group rank, 0..n-1
  std::map<uint64_t, std::shared_ptr<Slot>> slots_;
  // all_reduce staging buffers kept between calls (at most kMaxPooled), so a steady stream of
  // all_reduces does not page-fault a fresh buffer each time. Holds up to the largest
  // all_reduce's bytes per channel.
  static constexpr size_t kMaxPooled = 2;
  std::vector<std::vector<std::byte>> staging_pool_;
};

}  // namespace moezero::comm
