// comm/mpi/mpi_communicator.cpp — the stream task of each collective (argument checks:
// comm/host_communicator.cpp).
#include "comm/mpi/mpi_communicator.h"

#include <cstdint>

#include "comm/local/link_emulation.h"
#include "core/error.h"

namespace moezero::comm {

MpiCommunicator::MpiCommunicator(std::shared_ptr<MpiChannel> channel, int global_rank)
    : HostCommunicator(channel->group(), global_rank, channel->name(), "MpiCommunicator",
                       "(CUDA ranks under MPI use NCCL)"),
      channel_(std::move(channel)) {}

void MpiCommunicator::submit(MpiCall call, Stream& stream) {
  const uint64_t seq = channel_->take_seq();
  CommRecord record{
      call.sig.op, group().str(), channel(), stream.name(), seq, call_size_bytes(call, size()), {},
      {}};
  const ObservedCall observed(*this, record.op, record.bytes, stream);
  stream.enqueue_host([ch = channel_, log = log(), seq, call = std::move(call),
                       record = std::move(record)]() mutable {
    record.start = std::chrono::steady_clock::now();
    const Deadline deadline = record.start + ch->options().timeout;
    const std::vector<int64_t> counts =
        ch->agree(seq, call.sig, call.send_elems, call.recv_elems, deadline);
    const std::string what = ch->where(call.sig, seq);
    switch (call.sig.op) {
      case CollectiveOp::AllGather: mpi_all_gather(*ch, call, what, deadline); break;
      case CollectiveOp::ReduceScatter: mpi_reduce_scatter(*ch, call, what, deadline); break;
      case CollectiveOp::AllReduce: mpi_all_reduce(*ch, call, what, deadline); break;
      case CollectiveOp::AllToAllV: mpi_all_to_all_v(*ch, call, counts, what, deadline); break;
      case CollectiveOp::Broadcast: mpi_broadcast(*ch, call, what, deadline); break;
      case CollectiveOp::Barrier: break;  // agree() is the barrier: every rank has arrived
    }
    record.end = std::chrono::steady_clock::now();
    log->add(std::move(record));
  });
}

}  // namespace moezero::comm
