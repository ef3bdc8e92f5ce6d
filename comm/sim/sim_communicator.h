// comm/sim/sim_communicator.h — internal: the channel (rendezvous of the present members of
// one (group, channel) in virtual time) and the Communicator of the simulated backend.
// The model and its assumptions: comm/sim/sim_world.h.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/host_communicator.h"
#include "comm/local/rendezvous.h"
#include "comm/sim/sim_network.h"

namespace moezero::comm {

class SimChannel {
 public:
  SimChannel(ProcessGroup group, std::vector<char> present_in_group, std::string name,
             CommOptions options, std::shared_ptr<AbortState> abort,
             std::shared_ptr<PortTimelines> timelines);

  const ProcessGroup& group() const { return group_; }
  const std::string& name() const { return name_; }
  uint64_t take_seq(int rank);
  // On the stream worker of group rank `rank`: arrives at virtual time `arrival_s`, waits
  // (wall, bounded) for the other present members, returns the collective's virtual end.
  double run(int rank, uint64_t seq, const HostCall& call, double arrival_s);
  void notify_abort();

 private:
  struct Slot {
    explicit Slot(size_t n) : calls(n), arrived(n, 0) {}
    std::vector<HostCall> calls;  // by group rank (present members only)
    std::vector<char> arrived;
    int n_arrived = 0;
    int n_departed = 0;
    int first_rank = -1;
    double start_s = 0.0;  // latest arrival
    double end_s = 0.0;
    bool done = false;
  };
  std::string where(const CallSignature& sig, uint64_t seq) const;
  [[noreturn]] void fail_locked(bool timeout, const std::string& message);
  std::string validate_locked(const Slot& slot, uint64_t seq) const;
  CollectiveShape full_shape(const Slot& slot) const;
  void move_data(Slot& slot) const;
  int source_of(int p) const;  // the present member whose send absent p copies

  const ProcessGroup group_;
  std::vector<char> present_;    // by group rank
  std::vector<int> present_gr_;  // present group ranks, in order
  std::vector<int> source_;      // by group rank: whose send it is (itself when present)
  const std::string name_;
  const CommOptions options_;
  std::shared_ptr<AbortState> abort_;
  std::shared_ptr<PortTimelines> timelines_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, std::shared_ptr<Slot>> slots_;
  std::vector<uint64_t> next_seq_;
  std::optional<std::pair<bool, std::string>> failure_;  // (timeout, message)
};

class SimCommunicator final : public HostCommunicator {
 public:
  SimCommunicator(std::shared_ptr<SimChannel> channel, int global_rank);

 private:
  void submit(HostCall call, Stream& stream) override;
  std::shared_ptr<SimChannel> channel_;
};

}  // namespace moezero::comm
