// comm/mpi/mpi_communicator.cpp — argument checks and the stream task of each collective.
#include "comm/mpi/mpi_communicator.h"

#include <cstdint>

#include "comm/local/link_emulation.h"
#include "core/error.h"

namespace moezero::comm {

namespace {

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

void check_buffer(const void* p, size_t bytes, const char* op, const char* which) {
  MOEZERO_CHECK(p != nullptr || bytes == 0, op, ": ", which, " is null with ", bytes, " bytes");
}

void check_stream(Stream& stream, const char* op) {
  MOEZERO_CHECK(stream.device().kind() == DeviceKind::Cpu, op,
                ": MpiCommunicator needs a CPU stream, got '", stream.name(), "' on ",
                stream.device().name(), " (CUDA ranks under MPI use NCCL)");
}

}  // namespace

MpiCommunicator::MpiCommunicator(std::shared_ptr<MpiChannel> channel, int global_rank)
    : Communicator(channel->group(), global_rank, channel->name()), channel_(std::move(channel)) {}

void MpiCommunicator::submit(MpiCall call, Stream& stream) {
  const uint64_t seq = channel_->take_seq();
  const Arrival sized{call.sig, call.send, call.recv, call.send_elems, call.recv_elems};
  CommRecord record{
      call.sig.op, group().str(), channel(), stream.name(), seq, call_size_bytes(sized, size()), {},
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

void MpiCommunicator::all_gather(const void* send, void* recv, size_t send_elems, DType dtype,
                                 Stream& stream) {
  check_stream(stream, "all_gather");
  const size_t chunk_bytes = send_elems * dtype_size_bytes(dtype);
  const size_t recv_bytes = chunk_bytes * static_cast<size_t>(size());
  check_buffer(send, chunk_bytes, "all_gather", "send");
  check_buffer(recv, recv_bytes, "all_gather", "recv");
  const void* in_place =
      static_cast<const std::byte*>(recv) + static_cast<size_t>(rank()) * chunk_bytes;
  MOEZERO_CHECK(send == in_place || !overlap(send, chunk_bytes, recv, recv_bytes),
                "all_gather: send overlaps recv but is not recv + rank * send_elems (in place)");
  submit(MpiCall{{CollectiveOp::AllGather, dtype, send_elems}, send, recv, {}, {}}, stream);
}

void MpiCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_elems, DType dtype,
                                     ReduceOp op, Stream& stream) {
  check_stream(stream, "reduce_scatter");
  const size_t chunk_bytes = recv_elems * dtype_size_bytes(dtype);
  const size_t send_bytes = chunk_bytes * static_cast<size_t>(size());
  check_buffer(send, send_bytes, "reduce_scatter", "send");
  check_buffer(recv, chunk_bytes, "reduce_scatter", "recv");
  const void* in_place =
      static_cast<const std::byte*>(send) + static_cast<size_t>(rank()) * chunk_bytes;
  MOEZERO_CHECK(
      recv == in_place || !overlap(send, send_bytes, recv, chunk_bytes),
      "reduce_scatter: recv overlaps send but is not send + rank * recv_elems (in place)");
  submit(MpiCall{{CollectiveOp::ReduceScatter, dtype, recv_elems, op}, send, recv, {}, {}}, stream);
}

void MpiCommunicator::all_reduce(const void* send, void* recv, size_t elems, DType dtype,
                                 ReduceOp op, Stream& stream) {
  check_stream(stream, "all_reduce");
  const size_t bytes = elems * dtype_size_bytes(dtype);
  check_buffer(send, bytes, "all_reduce", "send");
  check_buffer(recv, bytes, "all_reduce", "recv");
  MOEZERO_CHECK(send == recv || !overlap(send, bytes, recv, bytes),
                "all_reduce: send and recv overlap partially (in place needs send == recv)");
  submit(MpiCall{{CollectiveOp::AllReduce, dtype, elems, op}, send, recv, {}, {}}, stream);
}

void MpiCommunicator::all_to_all_v(const void* send, std::span<const size_t> send_elems, void* recv,
                                   std::span<const size_t> recv_elems, DType dtype,
                                   Stream& stream) {
  check_stream(stream, "all_to_all_v");
  const size_t n = static_cast<size_t>(size());
  MOEZERO_CHECK(send_elems.size() == n && recv_elems.size() == n,
                "all_to_all_v: need one count per group rank (", n, "), got ", send_elems.size(),
                " send and ", recv_elems.size(), " recv counts");
  size_t send_total = 0, recv_total = 0;
  for (size_t c : send_elems) send_total += c;
  for (size_t c : recv_elems) recv_total += c;
  const size_t elem_bytes = dtype_size_bytes(dtype);
  check_buffer(send, send_total * elem_bytes, "all_to_all_v", "send");
  check_buffer(recv, recv_total * elem_bytes, "all_to_all_v", "recv");
  MOEZERO_CHECK(!overlap(send, send_total * elem_bytes, recv, recv_total * elem_bytes),
                "all_to_all_v: send and recv overlap (not supported in place)");
  submit(MpiCall{{CollectiveOp::AllToAllV, dtype, send_total},
                 send,
                 recv,
                 {send_elems.begin(), send_elems.end()},
                 {recv_elems.begin(), recv_elems.end()}},
         stream);
}

void MpiCommunicator::broadcast(const void* send, void* recv, size_t elems, DType dtype, int root,
                                Stream& stream) {
  check_stream(stream, "broadcast");
  MOEZERO_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " out of range [0, ", size(),
                ") of group ", group().str());
  const size_t bytes = elems * dtype_size_bytes(dtype);
  if (rank() == root) check_buffer(send, bytes, "broadcast", "send (root)");
  check_buffer(recv, bytes, "broadcast", "recv");
  if (rank() == root)
    MOEZERO_CHECK(send == recv || !overlap(send, bytes, recv, bytes),
                  "broadcast: send and recv overlap partially on the root");
  submit(MpiCall{{CollectiveOp::Broadcast, dtype, elems, ReduceOp::Sum, root}, send, recv, {}, {}},
         stream);
}

void MpiCommunicator::barrier(Stream& stream) {
  check_stream(stream, "barrier");
  submit(MpiCall{{CollectiveOp::Barrier, DType::F32, 0}, nullptr, nullptr, {}, {}}, stream);
}

}  // namespace moezero::comm
