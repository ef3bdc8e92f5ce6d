// comm/mpi/mpi_all_to_all_v.cpp — recv block p (recv_elems[p]) = block `rank` of p's send,
// by MPI_Ialltoallv. The counts were checked to pair up on every rank (agree()), so a
// mismatch is an Error on all ranks, never a truncated message or a hang.
#include <vector>

#include "comm/mpi/mpi_collectives.h"

namespace moezero::comm {

void mpi_all_to_all_v(MpiChannel& ch, const MpiCall& call, const std::vector<int64_t>& counts,
                      const std::string& what, Deadline deadline) {
  bool any = false;  // the same verdict on every rank: the table is the same everywhere
  for (int64_t c : counts) any = any || c != 0;
  if (!any) return;
  const size_t n = size_t(ch.size());
  std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  size_t send_at = 0, recv_at = 0;
  for (size_t p = 0; p < n; ++p) {
    send_counts[p] = mpi_count(call.send_elems[p], "all_to_all_v");
    recv_counts[p] = mpi_count(call.recv_elems[p], "all_to_all_v");
    send_displs[p] = mpi_count(send_at, "all_to_all_v (send displacement)");
    recv_displs[p] = mpi_count(recv_at, "all_to_all_v (recv displacement)");
    send_at += call.send_elems[p];
    recv_at += call.recv_elems[p];
  }
  const MPI_Datatype type = mpi_elem_type(call.sig.dtype);
  MPI_Request req = MPI_REQUEST_NULL;
  MOEZERO_MPI_CHECK(MPI_Ialltoallv(call.send, send_counts.data(), send_displs.data(), type,
                                   call.recv, recv_counts.data(), recv_displs.data(), type,
                                   ch.comm(), &req));
  ch.wait({&req, 1}, what, deadline);
}

}  // namespace moezero::comm
