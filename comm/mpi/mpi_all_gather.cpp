// comm/mpi/mpi_all_gather.cpp — all_gather (MPI_Iallgather) and broadcast (MPI_Ibcast): no
// arithmetic, so MPI moves the bytes directly between the callers' buffers.
#include <cstring>

#include "comm/mpi/mpi_collectives.h"

namespace moezero::comm {

void mpi_all_gather(MpiChannel& ch, const MpiCall& call, const std::string& what,
                    Deadline deadline) {
  const int count = mpi_count(call.sig.elems, "all_gather");
  if (count == 0) return;  // every rank agreed on the same count
  const MPI_Datatype type = mpi_elem_type(call.sig.dtype);
  const size_t chunk_bytes = call.sig.elems * dtype_size_bytes(call.sig.dtype);
  const void* own = static_cast<const std::byte*>(call.recv) + size_t(ch.rank()) * chunk_bytes;
  const void* send = call.send == own ? MPI_IN_PLACE : call.send;
  MPI_Request req = MPI_REQUEST_NULL;
  MOEZERO_MPI_CHECK(MPI_Iallgather(send, count, type, call.recv, count, type, ch.comm(), &req));
  ch.wait({&req, 1}, what, deadline);
}

void mpi_broadcast(MpiChannel& ch, const MpiCall& call, const std::string& what,
                   Deadline deadline) {
  const int count = mpi_count(call.sig.elems, "broadcast");
  if (count == 0) return;
  const size_t bytes = call.sig.elems * dtype_size_bytes(call.sig.dtype);
  if (ch.rank() == call.sig.root && call.send != call.recv)
    std::memcpy(call.recv, call.send, bytes);
  MPI_Request req = MPI_REQUEST_NULL;
  MOEZERO_MPI_CHECK(
      MPI_Ibcast(call.recv, count, mpi_elem_type(call.sig.dtype), call.sig.root, ch.comm(), &req));
  ch.wait({&req, 1}, what, deadline);
}

}  // namespace moezero::comm
