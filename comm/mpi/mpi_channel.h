// comm/mpi/mpi_channel.h — one (group, channel) over its own MPI communicator: sequence
// numbers, the bounded wait for MPI requests, the sticky failure, and the call agreement.
//
// Every collective of an MpiCommunicator runs, on its stream's worker thread:
//   1. agree(): each rank sends its call signature (op, dtype, count, reduce op, root, and for
//      all_to_all_v its per-peer send and recv counts) to every peer and receives theirs
//      (MPI_Isend / MPI_Irecv). Every rank then holds the same table and reaches the same
//      verdict: a divergence (a call that differs from group rank 0's, or all_to_all_v counts
//      that do not pair up) fails the collective on every rank with the same Error. A rank
//      that never arrives makes the others time out naming it (its receive never completed).
//      This is the always-on divergence check of LocalCommunicator, for one latency per call.
//   2. the data moves with non-blocking MPI collectives on the channel's communicator
//      (comm/mpi/mpi_collectives.h), polled until done.
// Waiting is bounded: one deadline per collective (its start + CommOptions::timeout). At the
// deadline the channel fails for good (every later call throws the same error, as an aborted
// NCCL communicator does) and TimeoutError names the op, group, channel, seq and, where
// known, the missing ranks. The requests still pending cannot be cancelled (MPI forbids it for
// collectives), so the buffers they use are kept alive until exit; a process should then end
// (World::run_mpi aborts the job). The caller's own buffers must stay valid too, which is why
// the job is aborted rather than continued.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/call_signature.h"
#include "core/communicator.h"
#include "core/error.h"

// Checks an MPI return code (communicators use MPI_ERRORS_RETURN) and throws moezero::Error
// with MPI's error string.
#define MOEZERO_MPI_CHECK(expr) ::moezero::comm::mpi_check((expr), #expr, __FILE__, __LINE__)

namespace moezero::comm {

void mpi_check(int code, const char* expr, const char* file, int line);

// The MPI datatype moving one element of `dtype` (contiguous bytes: MPI never reduces here,
// reductions run in moezero's own order, see mpi_collectives.h). Counts above INT_MAX
// elements are refused with an Error naming `op`.
MPI_Datatype mpi_elem_type(DType dtype);
int mpi_count(size_t elems, const char* op);

using Deadline = std::chrono::steady_clock::time_point;

class MpiChannel {
 public:
  // [in] comm: owned, freed at destruction (while MPI is still initialised);
  // [in] group_rank: this process's position in group.
  MpiChannel(ProcessGroup group, std::string name, MPI_Comm comm, int group_rank,
             CommOptions options);
  ~MpiChannel();
  MpiChannel(const MpiChannel&) = delete;
  MpiChannel& operator=(const MpiChannel&) = delete;

  const ProcessGroup& group() const { return group_; }
  const std::string& name() const { return name_; }
  MPI_Comm comm() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return group_.size(); }
  const CommOptions& options() const { return options_; }

  uint64_t take_seq();  // host side, at enqueue
  Deadline deadline_from_now() const { return std::chrono::steady_clock::now() + options_.timeout; }
  // "all_gather(f32, 8 elems) on group world{0,1} channel 'gather' seq 3"
  std::string where(const CallSignature& sig, uint64_t seq) const;

  // Step 1 (see above). Throws the channel's earlier failure, an Error on divergence, or
  // TimeoutError naming the ranks that did not arrive. Returns, for all_to_all_v, the send
  // counts of every rank (size x size, row = sender), empty otherwise.
  std::vector<int64_t> agree(uint64_t seq, const CallSignature& sig,
                             std::span<const size_t> send_elems, std::span<const size_t> recv_elems,
                             Deadline deadline);

  // Polls `reqs` until all have completed. At the deadline: the channel fails, `keep` (the
  // buffers the requests use) is kept alive for good, and TimeoutError is thrown with
  // "<what>: timed out after T ms" + detail.
  void wait(std::span<MPI_Request> reqs, const std::string& what, Deadline deadline,
            std::shared_ptr<void> keep = nullptr, const std::string& detail = "");

  // Fails the channel for good with `message` (first failure wins) and throws it.
  [[noreturn]] void fail(bool timeout, const std::string& message);

 private:
  struct Failure {
    bool timeout = false;
    std::string message;
  };
  [[noreturn]] void throw_failure(const Failure& f) const;
  void throw_if_failed();
  std::string validate(const std::vector<int64_t>& table, uint64_t seq) const;

  const ProcessGroup group_;
  const std::string name_;
  MPI_Comm comm_;
  const int rank_;
  const CommOptions options_;

  std::mutex mu_;
  uint64_t next_seq_ = 0;
  std::optional<Failure> failure_;
  std::vector<std::shared_ptr<void>> orphans_;  // buffers of requests abandoned at a timeout
};

}  // namespace moezero::comm
