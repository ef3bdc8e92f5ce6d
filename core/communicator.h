// core/communicator.h — the Communicator interface: NCCL-shaped asynchronous collectives over
// one ProcessGroup, enqueued on a Stream. Implemented in comm/ (LocalCommunicator: ranks as
// threads; NcclCommunicator: GPUs).
//
// Semantics (every collective):
// - Asynchronous: the call validates its arguments, takes the next sequence number and
//   returns at once; the data moves when `stream` reaches the call, as with NCCL. Buffers must
//   stay valid (send unmodified) until the stream has passed the call. A failure during the
//   collective (timeout, mismatch, peer abort) puts `stream` into its sticky error state.
// - Counts are ELEMENT counts of `dtype` (as NCCL), never bytes. Layouts are packed.
// - Matching: a Communicator is one (group, channel) pair, like one NCCL communicator per
//   stream: the n-th call on rank A's communicator meets the n-th call on every other rank's
//   communicator of the same group and channel (its sequence number). Calls on other channels
//   never match each other, so collectives on different streams cannot cross.
//   Every rank of the group must issue the same calls (op, dtype, counts, root) in the same
//   order; implementations report a divergence as an Error naming both ranks' calls
//   (LocalCommunicator always; NcclCommunicator when CommOptions::call_check is on).
// - Waiting is bounded: a collective whose peers do not arrive within CommOptions::timeout
//   fails with moezero::TimeoutError naming the op, the group, the missing ranks and the seq.
// - Reductions: Sum, Avg (sum, then divided by the group size), Max. Floating types accumulate
//   in fp32 (bf16/f16 are rounded once, at the end); the local implementation reduces in group-
//   rank order, so results are bit-identical across runs and on every rank.
// - In place: all_reduce and broadcast when send == recv; all_gather when
//   send == recv + rank * send_elems; reduce_scatter when recv == send + rank * recv_elems.
//   all_to_all_v never in place. Other overlaps of send and recv are errors.
// - Trace: every call appends a CommRecord (op, group, bytes, stream, seq, start/end) to the
//   communicator's log; an optional CollectiveObserver (the trace recorder) is told of every
//   call as it is enqueued, so that it can time the call with device events on its stream.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/process_groups.h"

namespace moezero {

enum class CollectiveOp : uint8_t {
  AllGather,
  ReduceScatter,
  AllReduce,
  AllToAllV,
  Broadcast,
  Barrier
};
enum class ReduceOp : uint8_t { Sum, Avg, Max };

const char* collective_op_name(CollectiveOp op);  // "all_gather", ...
const char* reduce_op_name(ReduceOp op);          // "sum", "avg", "max"

// nccl-tests bus-bandwidth factor of `op` on n ranks: busbw = algbw * factor.
// (n-1)/n for all_gather, reduce_scatter, all_to_all_v; 2(n-1)/n for all_reduce; 1 for
// broadcast; 0 for barrier.
double bus_factor(CollectiveOp op, int n);

// Link emulation for communicators that move bytes through memory (comm_emulation config).
// With a link of `link_gbps` gigaBITS per second (1e9 bit/s) and `latency_us` microseconds,
// a collective completes no earlier than latency + bus_bytes / bandwidth after the last rank
// arrived, where bus_bytes = nccl-tests size * bus_factor. link_gbps == 0 disables the
// bandwidth term; both 0 disables emulation. The LocalCommunicator shares each rank's link
// between its concurrent collectives and splits traffic into two tiers when ranks_per_node > 0
// (comm/net_model.h: the model and its assumptions).
struct CommEmulation {
  double link_gbps = 0.0;        // NIC (between nodes), per direction; 0: no bandwidth cost
  double latency_us = 0.0;       // per algorithm step over the NIC
  int ranks_per_node = 0;        // 0: one tier (every rank its own node, all traffic on the NIC)
  double intra_node_gbps = 0.0;  // per direction inside a node; 0: no bandwidth cost
  double intra_node_latency_us = 0.0;  // per algorithm step inside a node
  // NICs per node (ranks_per_node > 0): 0: every rank its own NIC and a ring crosses a node
  // boundary on the NICs of the two ranks at that hop (one NIC per node for a world ring);
  // K > 0: K NICs per node, a ring's node crossings spread over them as NCCL's channels do
  // (comm/sim/nic_traffic.h); K = ranks_per_node is one NIC per GPU (HGX nodes).
  int nics_per_node = 0;
  bool enabled() const {
    return link_gbps > 0.0 || latency_us > 0.0 ||
           (ranks_per_node > 0 && (intra_node_gbps > 0.0 || intra_node_latency_us > 0.0));
  }
};

enum class CallCheck : uint8_t {
  Off,  // no cross-rank check beyond what the implementation needs for memory safety
  On,   // debug: ranks compare (op, dtype, counts, root) per call; NCCL pays one extra
        // small collective and a host sync per call for it
};

struct CommOptions {
  // Longest wait for the peers of one collective. Default: a few minutes (a slow peer in a
  // real run is not an error); tests use milliseconds.
  std::chrono::milliseconds timeout{std::chrono::minutes(3)};
  CommEmulation emulation;                // LocalCommunicator only
  CallCheck call_check = CallCheck::Off;  // LocalCommunicator checks always (it is free there)
};

struct CommEmulationConfig;
struct CommConfig;
// The options of the `comm_emulation` and `comm` config sections (core/config.h):
// timeout_s -> timeout, check_divergence -> call_check, comm_emulation.* -> emulation.
CommOptions make_comm_options(const CommEmulationConfig& emulation, const CommConfig& comm);

// One entry of a communicator's trace log. Times are when this rank's stream began the call
// (start) and when it left it (end); for NCCL, host times at enqueue (device times come from
// events in the trace recorder).
struct CommRecord {
  CollectiveOp op;
  std::string group;    // ProcessGroup::str()
  std::string channel;  // the communicator's channel ("gather", "a2a", "reduce", ...)
  std::string stream;   // Stream::name()
  uint64_t seq = 0;     // sequence number on this (group, channel)
  uint64_t bytes = 0;   // nccl-tests size of this rank's call (all_gather: recv bytes;
                        // reduce_scatter: send bytes; all_to_all_v: this rank's send bytes)
  std::chrono::steady_clock::time_point start, end;
};

// Thread-safe append-only log of CommRecords, shared (by shared_ptr) between a communicator
// and the stream tasks it enqueued, so either may outlive the other.
class CommTraceLog {
 public:
  void add(CommRecord r);
  std::vector<CommRecord> snapshot() const;
  void clear();

 private:
  mutable std::mutex mu_;
  std::vector<CommRecord> records_;
};

class Communicator;

// Watches every collective a rank's communicators issue (the trace recorder, core/trace.h).
// Both calls come from the host thread that issues the collective, around its enqueue on
// `stream`: begin_collective before, end_collective after (so an implementation can record
// events on the stream around the call; it must never synchronise). Implementations of
// Communicator call them through Communicator::ObservedCall.
class CollectiveObserver {
 public:
  virtual ~CollectiveObserver() = default;
  // [in] bytes: the call's CommRecord::bytes. Returns a token handed back to end_collective.
  virtual uint64_t begin_collective(const Communicator& comm, CollectiveOp op, uint64_t bytes,
                                    Stream& stream) = 0;
  virtual void end_collective(uint64_t token, Stream& stream) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const ProcessGroup& group() const { return group_; }
  int rank() const { return group_rank_; }  // group rank of this communicator
  int size() const { return group_.size(); }
  int global_rank() const { return group_.ranks[static_cast<size_t>(group_rank_)]; }
  const std::string& channel() const { return channel_; }

  // recv (size, send_elems) = every rank's send (send_elems), in group-rank order.
  virtual void all_gather(const void* send, void* recv, size_t send_elems, DType dtype,
                          Stream& stream) = 0;
  // recv (recv_elems) = op over ranks of send[rank*recv_elems, (rank+1)*recv_elems);
  // send is (size, recv_elems).
  virtual void reduce_scatter(const void* send, void* recv, size_t recv_elems, DType dtype,
                              ReduceOp op, Stream& stream) = 0;
  // recv (elems) = op over ranks of send (elems).
  virtual void all_reduce(const void* send, void* recv, size_t elems, DType dtype, ReduceOp op,
                          Stream& stream) = 0;
  // [in] send_elems[p]: elements this rank sends to group rank p, packed in p order in send;
  // [in] recv_elems[p]: elements received from p, packed in p order in recv. Both of length
  // size(); zeros allowed. send_elems[p] on rank r must equal recv_elems[r] on rank p.
  // The count vectors are copied at the call.
  virtual void all_to_all_v(const void* send, std::span<const size_t> send_elems, void* recv,
                            std::span<const size_t> recv_elems, DType dtype, Stream& stream) = 0;
  // recv (elems) = root's send (elems) on every rank; send is read on the root only.
  virtual void broadcast(const void* send, void* recv, size_t elems, DType dtype, int root,
                         Stream& stream) = 0;
  // Completes on the stream when every rank's stream has reached it.
  virtual void barrier(Stream& stream) = 0;

  // Trace records of the calls completed so far (a copy).
  std::vector<CommRecord> records() const { return log_->snapshot(); }
  void clear_records() { log_->clear(); }

  // [in] observer: told of every later call (null: none, the default). Not owned; it must
  // outlive the calls. Set by the rank's host thread between calls.
  void set_observer(CollectiveObserver* observer) { observer_ = observer; }
  CollectiveObserver* observer() const { return observer_; }

 protected:
  Communicator(ProcessGroup group, int global_rank, std::string channel);
  const std::shared_ptr<CommTraceLog>& log() const { return log_; }

  // Every implementation brackets the enqueue of each call with one of these (RAII): it tells
  // the observer, if any, before and after (also when the enqueue throws). No observer: one
  // branch, nothing else.
  class ObservedCall {
   public:
    ObservedCall(const Communicator& comm, CollectiveOp op, uint64_t bytes, Stream& stream)
        : observer_(comm.observer_), stream_(stream) {
      if (observer_) token_ = observer_->begin_collective(comm, op, bytes, stream);
    }
    ~ObservedCall() {
      if (observer_) observer_->end_collective(token_, stream_);
    }
    ObservedCall(const ObservedCall&) = delete;
    ObservedCall& operator=(const ObservedCall&) = delete;

   private:
    CollectiveObserver* observer_;
    Stream& stream_;
    uint64_t token_ = 0;
  };

 private:
  ProcessGroup group_;
  int group_rank_;
  std::string channel_;
  std::shared_ptr<CommTraceLog> log_ = std::make_shared<CommTraceLog>();
  CollectiveObserver* observer_ = nullptr;
};

}  // namespace moezero
