// comm/host_communicator.h — the part LocalCommunicator (ranks as threads) and MpiCommunicator
// (ranks as processes) share: collectives that run as host work on a CPU stream. It checks
// each call's arguments on the host and throws at the call (null buffers, overlaps, counts,
// root, stream device); an implementation only enqueues the checked call (submit).
#pragma once

#include <string>
#include <vector>

#include "comm/call_signature.h"
#include "core/communicator.h"

namespace moezero::comm {

// One rank's call, as checked on the host at enqueue.
struct HostCall {
  CallSignature sig;
  const void* send = nullptr;
  void* recv = nullptr;
  std::vector<size_t> send_elems;  // all_to_all_v: per peer
  std::vector<size_t> recv_elems;  // all_to_all_v: per peer
};

class HostCommunicator : public Communicator {
 public:
  void all_gather(const void* send, void* recv, size_t send_elems, DType dtype,
                  Stream& stream) final;
  void reduce_scatter(const void* send, void* recv, size_t recv_elems, DType dtype, ReduceOp op,
                      Stream& stream) final;
  void all_reduce(const void* send, void* recv, size_t elems, DType dtype, ReduceOp op,
                  Stream& stream) final;
  void all_to_all_v(const void* send, std::span<const size_t> send_elems, void* recv,
                    std::span<const size_t> recv_elems, DType dtype, Stream& stream) final;
  void broadcast(const void* send, void* recv, size_t elems, DType dtype, int root,
                 Stream& stream) final;
  void barrier(Stream& stream) final;

 protected:
  // [in] name: the implementation's name for errors ("LocalCommunicator"); [in] stream_hint:
  // appended to the error of a stream of another kind (may be empty); [in] stream_kind: the
  // device kind whose streams it takes (Cpu; Sim for the simulated communicator).
  HostCommunicator(ProcessGroup group, int global_rank, std::string channel, std::string name,
                   std::string stream_hint, DeviceKind stream_kind = DeviceKind::Cpu);
  // Takes the next sequence number and enqueues the checked call on `stream` (which is a CPU
  // stream); wraps the enqueue in an ObservedCall.
  virtual void submit(HostCall call, Stream& stream) = 0;

 private:
  void check_stream(Stream& stream, const char* op) const;

  std::string name_, stream_hint_;
  DeviceKind stream_kind_;
};

}  // namespace moezero::comm
