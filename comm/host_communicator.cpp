// comm/host_communicator.cpp — host-side argument checks of the CPU-stream communicators.
#include "comm/host_communicator.h"

#include <cstdint>

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

}  // namespace

HostCommunicator::HostCommunicator(ProcessGroup group, int global_rank, std::string channel,
                                   std::string name, std::string stream_hint,
                                   DeviceKind stream_kind)
    : Communicator(std::move(group), global_rank, std::move(channel)),
      name_(std::move(name)),
      stream_hint_(std::move(stream_hint)),
      stream_kind_(stream_kind) {}

void HostCommunicator::check_stream(Stream& stream, const char* op) const {
  MOEZERO_CHECK(stream.device().kind() == stream_kind_, op, ": ", name_, " needs a ",
                device_kind_name(stream_kind_), " stream, got '", stream.name(), "' on ",
                stream.device().name(), stream_hint_.empty() ? "" : " ", stream_hint_);
}

void HostCommunicator::all_gather(const void* send, void* recv, size_t send_elems, DType dtype,
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
  submit(HostCall{{CollectiveOp::AllGather, dtype, send_elems}, send, recv, {}, {}}, stream);
}

void HostCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_elems, DType dtype,
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
  submit(HostCall{{CollectiveOp::ReduceScatter, dtype, recv_elems, op}, send, recv, {}, {}},
         stream);
}

void HostCommunicator::all_reduce(const void* send, void* recv, size_t elems, DType dtype,
                                  ReduceOp op, Stream& stream) {
  check_stream(stream, "all_reduce");
  const size_t bytes = elems * dtype_size_bytes(dtype);
  check_buffer(send, bytes, "all_reduce", "send");
  check_buffer(recv, bytes, "all_reduce", "recv");
  MOEZERO_CHECK(send == recv || !overlap(send, bytes, recv, bytes),
                "all_reduce: send and recv overlap partially (in place needs send == recv)");
  submit(HostCall{{CollectiveOp::AllReduce, dtype, elems, op}, send, recv, {}, {}}, stream);
}

void HostCommunicator::all_to_all_v(const void* send, std::span<const size_t> send_elems,
                                    void* recv, std::span<const size_t> recv_elems, DType dtype,
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
  submit(HostCall{{CollectiveOp::AllToAllV, dtype, send_total},
                  send,
                  recv,
                  {send_elems.begin(), send_elems.end()},
                  {recv_elems.begin(), recv_elems.end()}},
         stream);
}

void HostCommunicator::broadcast(const void* send, void* recv, size_t elems, DType dtype, int root,
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
  submit(HostCall{{CollectiveOp::Broadcast, dtype, elems, ReduceOp::Sum, root}, send, recv, {}, {}},
         stream);
}

void HostCommunicator::barrier(Stream& stream) {
  check_stream(stream, "barrier");
  submit(HostCall{{CollectiveOp::Barrier, DType::F32, 0}, nullptr, nullptr, {}, {}}, stream);
}

}  // namespace moezero::comm
