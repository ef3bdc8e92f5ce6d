// comm/local/local_communicator.h — Communicator for ranks that are threads of one process,
// each with its own CPU Device, exchanging through shared memory (see rendezvous.h).
//
// Created by LocalWorld::make_communicator (comm/local_world.h). Host-side argument checks
// (null pointers, overlaps, counts) throw at the call; cross-rank checks (divergence, counts
// that do not pair up) and timeouts fail the collective on the stream.
#pragma once

#include <memory>

#include "comm/local/rendezvous.h"
#include "core/communicator.h"

namespace moezero::comm {

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<Channel> channel, int global_rank);

  void all_gather(const void* send, void* recv, size_t send_elems, DType dtype,
                  Stream& stream) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_elems, DType dtype, ReduceOp op,
                      Stream& stream) override;
  void all_reduce(const void* send, void* recv, size_t elems, DType dtype, ReduceOp op,
                  Stream& stream) override;
  void all_to_all_v(const void* send, std::span<const size_t> send_elems, void* recv,
                    std::span<const size_t> recv_elems, DType dtype, Stream& stream) override;
  void broadcast(const void* send, void* recv, size_t elems, DType dtype, int root,
                 Stream& stream) override;
  void barrier(Stream& stream) override;

 private:
  // Takes the next sequence number and enqueues the collective on `stream`.
  void submit(Arrival arrival, Stream& stream);

  std::shared_ptr<Channel> channel_;
};

}  // namespace moezero::comm
