// comm/local/local_communicator.cpp — the stream task of each collective (argument checks:
// comm/host_communicator.cpp).
#include "comm/local/local_communicator.h"

#include "comm/local/collectives.h"
#include "comm/local/link_emulation.h"
#include "core/error.h"

namespace moezero::comm {

LocalCommunicator::LocalCommunicator(std::shared_ptr<Channel> channel, int global_rank)
    : HostCommunicator(channel->group(), global_rank, channel->name(), "LocalCommunicator", ""),
      channel_(std::move(channel)) {}

void LocalCommunicator::submit(Arrival arrival, Stream& stream) {
  const int rank = this->rank();
  const uint64_t seq = channel_->take_seq(rank);
  CommRecord record{arrival.sig.op,
                    group().str(),
                    channel(),
                    stream.name(),
                    seq,
                    call_size_bytes(arrival, size()),
                    {},
                    {}};
  const ObservedCall observed(*this, record.op, record.bytes, stream);
  stream.enqueue_host([ch = channel_, log = log(), rank, seq, arrival = std::move(arrival),
                       record = std::move(record)]() mutable {
    record.start = std::chrono::steady_clock::now();
    std::shared_ptr<Slot> slot = ch->arrive(rank, seq, arrival);
    switch (arrival.sig.op) {
      case CollectiveOp::AllGather: move_all_gather(*slot, rank); break;
      case CollectiveOp::ReduceScatter: move_reduce_scatter(*slot, rank); break;
      case CollectiveOp::AllReduce: move_all_reduce(*ch, *slot, rank, seq); break;
      case CollectiveOp::AllToAllV: move_all_to_all_v(*slot, rank); break;
      case CollectiveOp::Broadcast: move_broadcast(*slot, rank); break;
      case CollectiveOp::Barrier: break;
    }
    ch->depart(*slot, rank, seq);
    record.end = std::chrono::steady_clock::now();
    log->add(std::move(record));
  });
}

}  // namespace moezero::comm
