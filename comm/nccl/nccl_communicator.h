// comm/nccl/nccl_communicator.h — Communicator over NCCL, one ncclComm_t per (group, channel),
// so that collectives on different streams never serialise or deadlock against each other.
// Built only with the CUDA backend (MOEZERO_HAVE_CUDA).
//
// - Created collectively: every member of the group constructs its NcclCommunicator (from its
//   own thread or process) with the same group and channel; the unique id travels through the
//   injected NcclIdExchange (nccl_bootstrap.h).
// - Non-blocking NCCL (config.blocking = 0): no NCCL call can block the host forever. Init and
//   enqueue are polled with ncclCommGetAsyncError up to CommOptions::timeout; on timeout the
//   communicator is aborted (ncclCommAbort) and TimeoutError names the op, group and seq.
//   synchronize(stream) is the bounded host wait for the collectives in flight; NCCL cannot
//   say which peer is missing, so the message names the group instead.
// - CallCheck::On (debug): before each collective the ranks all-gather its signature (op,
//   dtype, count, root/reduce op) and compare; a divergence throws an Error naming both
//   ranks' calls. Costs one small collective and a bounded host sync per call.
// - Reductions run in NCCL's own order and precision (bf16 is not accumulated in fp32 across
//   ring steps), so results may differ in the last bits from LocalCommunicator's.
// - Trace records carry host times at enqueue (start == end); the trace recorder times the
//   device side with events.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "comm/call_signature.h"
#include "comm/nccl/nccl_bootstrap.h"
#include "core/communicator.h"

namespace moezero::comm {

class NcclCommunicator final : public Communicator {
 public:
  // [in] group, global_rank, channel: as LocalWorld::make_communicator; [in] device: a CUDA
  // device (its index is the GPU the communicator uses); [in] exchange: unique-id bootstrap;
  // [in] options: timeout and call_check (emulation is ignored).
  NcclCommunicator(ProcessGroup group, int global_rank, std::string channel, Device& device,
                   const NcclIdExchange& exchange, CommOptions options = {});
  ~NcclCommunicator() override;

  void all_gather(const void* send, void* recv, size_t send_elems, DType dtype,
                  Stream& stream) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_elems, DType dtype, ReduceOp op,
                      Stream& stream) override;
  void all_reduce(const void* send, void* recv, size_t elems, DType dtype, ReduceOp op,
                  Stream& stream) override;
  void all_to_all_v(const void* send, std::span<const size_t> send_elems, void* recv,
                    std::span<const size_t> recv_elems, DType dtype, Stream& stream) override;
  void broadcast(const void* send, void* recv, size_t elems, DType dtype, int root,
                 Stream& stream) override;
  void barrier(Stream& stream) override;

  // Blocks the host until `stream` has finished its work, bounded by the timeout; reports
  // NCCL's asynchronous errors; on timeout aborts the communicator and throws TimeoutError.
  void synchronize(Stream& stream);

  ncclComm_t handle() const { return comm_; }

 private:
  // Waits (bounded) while the non-blocking communicator reports ncclInProgress.
  void wait_ready(const std::string& what);
  // Runs one NCCL call: checks its status, waiting out ncclInProgress.
  void call(ncclResult_t status, const char* expr, const std::string& what);
  // Debug mode: compares `sig` across ranks (one all_gather of signatures).
  void check_call(const CallSignature& sig, Stream& stream);
  uint64_t begin(const CallSignature& sig, Stream& stream);  // seq, check, device, trace
  uint64_t call_bytes(const CallSignature& sig) const;       // CommRecord::bytes of the call
  [[noreturn]] void abort_with_timeout(const std::string& what);
  std::string where(const CallSignature& sig, uint64_t seq) const;

  // The device's host-wait expiry hook (Device, "Bounded host waits"): aborts this
  // communicator, so its kernels end, and names the last call issued. Runs on the rank's thread.
  std::string abort_for_host_wait();

  Device& device_;
  CommOptions options_;
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> aborted_{false};
  int expiry_hook_ = -1;
  std::mutex last_mu_;
  std::string last_call_;  // where() of the latest collective issued
  uint64_t next_seq_ = 0;
  void* sig_device_ = nullptr;   // (size, kSigWords) int64: barrier word and call signatures
  int64_t* sig_host_ = nullptr;  // pinned copy of the gathered signatures
};

}  // namespace moezero::comm
