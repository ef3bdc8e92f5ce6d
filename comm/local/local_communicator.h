// comm/local/local_communicator.h — Communicator for ranks that are threads of one process,
// each with its own CPU Device, exchanging through shared memory (see rendezvous.h).
//
// Created by LocalWorld::make_communicator (comm/local_world.h). Host-side argument checks
// (null pointers, overlaps, counts) throw at the call; cross-rank checks (divergence, counts
// that do not pair up) and timeouts fail the collective on the stream.
#pragma once

#include <memory>

#include "comm/host_communicator.h"
#include "comm/local/rendezvous.h"

namespace moezero::comm {

class LocalCommunicator final : public HostCommunicator {
 public:
  LocalCommunicator(std::shared_ptr<Channel> channel, int global_rank);

 private:
  // Takes the next sequence number and enqueues the collective on `stream`.
  void submit(Arrival arrival, Stream& stream) override;

  std::shared_ptr<Channel> channel_;
};

}  // namespace moezero::comm
