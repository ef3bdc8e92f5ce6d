// comm/mpi/mpi_reduce.cpp — reduce_scatter and all_reduce with moezero's own reduction order.
//
// reduce_scatter: MPI_Ialltoall gives this rank chunk `rank` of every peer's send, in group-
// rank order, in a staging buffer (size, recv_elems); reduce_elems then reduces it exactly as
// LocalCommunicator does (fp32 accumulation, rank order, one rounding).
// all_reduce: the same over slices: rank r reduces elements [r*elems/n, (r+1)*elems/n) (the
// local backend's partition; elementwise results do not depend on it), then MPI_Iallgatherv
// assembles every slice in every rank's recv. Traffic: 2 (n-1)/n elems per rank, as a ring.
// In place (send == recv) is safe: phase 1 has read send before phase 2 writes recv.
#include <memory>
#include <vector>

#include "comm/local/reduce.h"
#include "comm/mpi/mpi_collectives.h"

namespace moezero::comm {

namespace {
using Bytes = std::vector<std::byte>;
}

void mpi_reduce_scatter(MpiChannel& ch, const MpiCall& call, const std::string& what,
                        Deadline deadline) {
  const int count = mpi_count(call.sig.elems, "reduce_scatter");
  if (count == 0) return;
  const size_t n = size_t(ch.size());
  const size_t chunk_bytes = call.sig.elems * dtype_size_bytes(call.sig.dtype);
  auto staging = std::make_shared<Bytes>(n * chunk_bytes);  // (size, recv_elems)
  const MPI_Datatype type = mpi_elem_type(call.sig.dtype);
  MPI_Request req = MPI_REQUEST_NULL;
  MOEZERO_MPI_CHECK(
      MPI_Ialltoall(call.send, count, type, staging->data(), count, type, ch.comm(), &req));
  ch.wait({&req, 1}, what, deadline, staging);
  std::vector<const void*> inputs(n);
  for (size_t p = 0; p < n; ++p) inputs[p] = staging->data() + p * chunk_bytes;
  reduce_elems(call.recv, inputs, call.sig.elems, call.sig.dtype, call.sig.reduce);
}

void mpi_all_reduce(MpiChannel& ch, const MpiCall& call, const std::string& what,
                    Deadline deadline) {
  const size_t elems = call.sig.elems;
  mpi_count(elems, "all_reduce");
  if (elems == 0) return;
  const size_t n = size_t(ch.size()), r = size_t(ch.rank());
  const size_t elem_bytes = dtype_size_bytes(call.sig.dtype);
  std::vector<int> begin(n), len(n);  // slice of each rank, elements
  for (size_t p = 0; p < n; ++p) {
    begin[p] = static_cast<int>(elems * p / n);
    len[p] = static_cast<int>(elems * (p + 1) / n) - begin[p];
  }
  const size_t mine_elems = size_t(len[r]);
  // Phase 1: slice r of every rank's send -> staging (size, mine_elems), in rank order.
  auto staging = std::make_shared<Bytes>(n * mine_elems * elem_bytes + mine_elems * elem_bytes);
  std::byte* gathered = staging->data();
  std::byte* reduced = staging->data() + n * mine_elems * elem_bytes;
  std::vector<int> recv_counts(n, len[r]), recv_displs(n);
  for (size_t p = 0; p < n; ++p) recv_displs[p] = static_cast<int>(p * mine_elems);
  const MPI_Datatype type = mpi_elem_type(call.sig.dtype);
  MPI_Request req = MPI_REQUEST_NULL;
  MOEZERO_MPI_CHECK(MPI_Ialltoallv(call.send, len.data(), begin.data(), type, gathered,
                                   recv_counts.data(), recv_displs.data(), type, ch.comm(), &req));
  ch.wait({&req, 1}, what, deadline, staging);
  if (mine_elems > 0) {
    std::vector<const void*> inputs(n);
    for (size_t p = 0; p < n; ++p) inputs[p] = gathered + p * mine_elems * elem_bytes;
    reduce_elems(reduced, inputs, mine_elems, call.sig.dtype, call.sig.reduce);
  }
  // Phase 2: every reduced slice to every rank.
  MOEZERO_MPI_CHECK(MPI_Iallgatherv(reduced, len[r], type, call.recv, len.data(), begin.data(),
                                    type, ch.comm(), &req));
  ch.wait({&req, 1}, what, deadline, staging);
}

}  // namespace moezero::comm
