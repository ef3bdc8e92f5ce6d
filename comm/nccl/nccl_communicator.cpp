// comm/nccl/nccl_communicator.cpp — NCCL calls behind the Communicator interface, with bounded
// waits (non-blocking communicators polled with ncclCommGetAsyncError) and abort on timeout.
#include "comm/nccl/nccl_communicator.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/cuda/cuda_stream.h"

namespace moezero::comm {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kSigWords = 8;  // int64 words per call signature row
constexpr auto kPollInterval = std::chrono::microseconds(100);

ncclDataType_t nccl_dtype(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::F16: return ncclFloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::I8: return ncclInt8;
  }
  MOEZERO_THROW("nccl: unsupported dtype ", static_cast<int>(t));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  MOEZERO_THROW("nccl: unsupported reduce op ", static_cast<int>(op));
}

void encode(const CallSignature& sig, int64_t* row) {
  std::memset(row, 0, kSigWords * sizeof(int64_t));
  row[0] = static_cast<int64_t>(sig.op);
  row[1] = static_cast<int64_t>(sig.dtype);
  row[2] = static_cast<int64_t>(sig.elems);
  row[3] = static_cast<int64_t>(sig.reduce);
  row[4] = sig.root;
}

}  // namespace

#define MOEZERO_NCCL_CALL(expr, what) call((expr), #expr, (what))

NcclCommunicator::NcclCommunicator(ProcessGroup group, int global_rank, std::string channel,
                                   Device& device, const NcclIdExchange& exchange,
                                   CommOptions options)
    : Communicator(std::move(group), global_rank, std::move(channel)),
      device_(device),
      options_(options) {
  MOEZERO_CHECK(device.kind() == DeviceKind::Cuda, "NcclCommunicator needs a CUDA device, got ",
                device.name());
  MOEZERO_CUDA_CHECK(cudaSetDevice(device.index()));
  const std::string key = this->channel() + "@" + this->group().str();
  std::optional<ncclUniqueId> root_id;
  if (rank() == 0) {
    ncclUniqueId id;
    MOEZERO_CUDA_CHECK(ncclGetUniqueId(&id));
    root_id = id;
  }
  ncclUniqueId id = exchange(key, root_id);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  MOEZERO_NCCL_CALL(ncclCommInitRankConfig(&comm_, size(), id, rank(), &config),
                    "ncclCommInitRankConfig for " + key);
  MOEZERO_CUDA_CHECK(cudaMalloc(&sig_device_, (size() + 1) * kSigWords * sizeof(int64_t)));
  MOEZERO_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&sig_host_),
                                    (size() + 1) * kSigWords * sizeof(int64_t)));
  expiry_hook_ = device_.add_wait_expiry_hook([this] { return abort_for_host_wait(); });
}

std::string NcclCommunicator::abort_for_host_wait() {
  std::string last;
  {
    std::lock_guard lock(last_mu_);
    last = last_call_;
  }
  const bool was = aborted_.exchange(true);
  if (!was && comm_ != nullptr) ncclCommAbort(comm_);
  if (last.empty()) return "";
  return "NCCL " + last + (was ? " (communicator aborted earlier)" : " (communicator aborted)");
}

NcclCommunicator::~NcclCommunicator() {
  // Never throws: a failed finalize falls back to abort.
  if (expiry_hook_ >= 0) device_.remove_wait_expiry_hook(expiry_hook_);
  cudaSetDevice(device_.index());
  if (comm_ != nullptr && !aborted_) {
    const ncclResult_t fin = ncclCommFinalize(comm_);
    const bool clean = fin == ncclSuccess || fin == ncclInProgress;
    const auto deadline = Clock::now() + options_.timeout;
    ncclResult_t state = clean ? ncclInProgress : fin;
    while (clean && state == ncclInProgress && Clock::now() < deadline) {
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
      if (state == ncclInProgress) std::this_thread::sleep_for(kPollInterval);
    }
    if (state == ncclSuccess) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  if (sig_device_) cudaFree(sig_device_);
  if (sig_host_) cudaFreeHost(sig_host_);
}

std::string NcclCommunicator::where(const CallSignature& sig, uint64_t seq) const {
  return sig.str() + " on group " + group().str() + " channel '" + channel() + "' seq " +
         std::to_string(seq);
}

void NcclCommunicator::abort_with_timeout(const std::string& what) {
  if (!aborted_ && comm_ != nullptr) ncclCommAbort(comm_);
  aborted_ = true;
  MOEZERO_THROW_AS(TimeoutError, what, ": timed out after ", options_.timeout.count(),
                   " ms (NCCL communicator of group ", group().str(),
                   " aborted; a peer did not join)");
}

void NcclCommunicator::wait_ready(const std::string& what) {
  const auto start = Clock::now();
  const auto deadline = start + options_.timeout;
  for (;;) {
    try {
      device_.check_host_wait(start, what);  // another rank failed: abort
    } catch (...) {
      if (!aborted_.exchange(true) && comm_ != nullptr) ncclCommAbort(comm_);  // maybe unhooked
      throw;
    }
    ncclResult_t state = ncclSuccess;
    MOEZERO_CUDA_CHECK(ncclCommGetAsyncError(comm_, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) {
      check_status(state, what.c_str(), __FILE__, __LINE__);
    }
    if (Clock::now() > deadline) abort_with_timeout(what);
    std::this_thread::sleep_for(kPollInterval);
  }
}

void NcclCommunicator::call(ncclResult_t status, const char* expr, const std::string& what) {
  if (status == ncclInProgress) return wait_ready(what);
  if (status != ncclSuccess) check_status(status, (what + ": " + expr).c_str(), __FILE__, __LINE__);
}

void NcclCommunicator::synchronize(Stream& stream) {
  MOEZERO_CHECK(!aborted_, "NcclCommunicator of group ", group().str(), " was aborted");
  cudaStream_t h = cuda::cuda_stream_handle(stream);
  const auto start = Clock::now();
  const auto deadline = start + options_.timeout;
  for (;;) {
    device_.check_host_wait(start, "stream '" + stream.name() + "' on group " + group().str());
    const cudaError_t q = cudaStreamQuery(h);
    if (q == cudaSuccess) return stream.check();
    if (q != cudaErrorNotReady) MOEZERO_CUDA_CHECK(q);
    ncclResult_t state = ncclSuccess;
    MOEZERO_CUDA_CHECK(ncclCommGetAsyncError(comm_, &state));
    if (state != ncclSuccess && state != ncclInProgress)
      check_status(state, "NCCL asynchronous error", __FILE__, __LINE__);
    if (Clock::now() > deadline)
      abort_with_timeout("synchronize of stream '" + stream.name() + "' on group " + group().str() +
                         " channel '" + channel() + "' (last seq " +
                         std::to_string(next_seq_ == 0 ? 0 : next_seq_ - 1) + ")");
    std::this_thread::sleep_for(kPollInterval);
  }
}

void NcclCommunicator::check_call(const CallSignature& sig, Stream& stream) {
  cudaStream_t h = cuda::cuda_stream_handle(stream);
  const size_t row_bytes = kSigWords * sizeof(int64_t);
  auto* rows = static_cast<int64_t*>(sig_device_);
  int64_t* mine = sig_host_ + static_cast<size_t>(size()) * kSigWords;  // spare pinned row
  encode(sig, mine);
  MOEZERO_CUDA_CHECK(
      cudaMemcpyAsync(rows + rank() * kSigWords, mine, row_bytes, cudaMemcpyHostToDevice, h));
  MOEZERO_NCCL_CALL(ncclAllGather(rows + rank() * kSigWords, rows, kSigWords, ncclInt64, comm_, h),
                    "call check of " + sig.str());
  MOEZERO_CUDA_CHECK(
      cudaMemcpyAsync(sig_host_, rows, size() * row_bytes, cudaMemcpyDeviceToHost, h));
  synchronize(stream);
  for (int r = 0; r < size(); ++r) {
    const CallSignature other = decode_signature(sig_host_ + static_cast<size_t>(r) * kSigWords);
    if (!other.matches(sig))
      MOEZERO_THROW("collective divergence on group ", group().str(), " channel '", channel(),
                    "' seq ", next_seq_ - 1, ": rank ", global_rank(), " called ", sig.str(),
                    " but rank ", group().ranks[static_cast<size_t>(r)], " called ", other.str());
  }
}

uint64_t NcclCommunicator::begin(const CallSignature& sig, Stream& stream) {
  MOEZERO_CHECK(!aborted_, sig.str(), ": NcclCommunicator of group ", group().str(),
                " was aborted by an earlier timeout");
  MOEZERO_CHECK(&stream.device() == &device_, sig.str(), ": stream '", stream.name(), "' is on ",
                stream.device().name(), ", the communicator on ", device_.name());
  MOEZERO_CUDA_CHECK(cudaSetDevice(device_.index()));
  const uint64_t seq = next_seq_++;
  {
    std::lock_guard lock(last_mu_);
    last_call_ = where(sig, seq);
  }
  if (options_.call_check == CallCheck::On) check_call(sig, stream);
  const auto now = Clock::now();
  log()->add(
      CommRecord{sig.op, group().str(), channel(), stream.name(), seq, call_bytes(sig), now, now});
  return seq;
}

uint64_t NcclCommunicator::call_bytes(const CallSignature& sig) const {
  const uint64_t elem_bytes = dtype_size_bytes(sig.dtype);
  switch (sig.op) {
    case CollectiveOp::AllGather:
    case CollectiveOp::ReduceScatter: return sig.elems * static_cast<uint64_t>(size()) * elem_bytes;
    case CollectiveOp::AllReduce:
    case CollectiveOp::Broadcast:
    case CollectiveOp::AllToAllV: return sig.elems * elem_bytes;
    case CollectiveOp::Barrier: break;
  }
  return 0;
}

void NcclCommunicator::all_gather(const void* send, void* recv, size_t send_elems, DType dtype,
                                  Stream& stream) {
  const CallSignature sig{CollectiveOp::AllGather, dtype, send_elems};
  const uint64_t seq = begin(sig, stream);
  const ObservedCall observed(*this, sig.op, call_bytes(sig), stream);
  MOEZERO_NCCL_CALL(ncclAllGather(send, recv, send_elems, nccl_dtype(dtype), comm_,
                                  cuda::cuda_stream_handle(stream)),
                    where(sig, seq));
}

void NcclCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_elems, DType dtype,
                                      ReduceOp op, Stream& stream) {
  const CallSignature sig{CollectiveOp::ReduceScatter, dtype, recv_elems, op};
  const uint64_t seq = begin(sig, stream);
  const ObservedCall observed(*this, sig.op, call_bytes(sig), stream);
  MOEZERO_NCCL_CALL(ncclReduceScatter(send, recv, recv_elems, nccl_dtype(dtype), nccl_op(op), comm_,
                                      cuda::cuda_stream_handle(stream)),
                    where(sig, seq));
}

void NcclCommunicator::all_reduce(const void* send, void* recv, size_t elems, DType dtype,
                                  ReduceOp op, Stream& stream) {
  const CallSignature sig{CollectiveOp::AllReduce, dtype, elems, op};
  const uint64_t seq = begin(sig, stream);
  const ObservedCall observed(*this, sig.op, call_bytes(sig), stream);
  MOEZERO_NCCL_CALL(ncclAllReduce(send, recv, elems, nccl_dtype(dtype), nccl_op(op), comm_,
                                  cuda::cuda_stream_handle(stream)),
                    where(sig, seq));
}

void NcclCommunicator::all_to_all_v(const void* send, std::span<const size_t> send_elems,
                                    void* recv, std::span<const size_t> recv_elems, DType dtype,
                                    Stream& stream) {
  const size_t n = static_cast<size_t>(size());
  MOEZERO_CHECK(send_elems.size() == n && recv_elems.size() == n,
                "all_to_all_v: need one count per group rank (", n, "), got ", send_elems.size(),
                " send and ", recv_elems.size(), " recv counts");
  size_t send_total = 0;
  for (size_t c : send_elems) send_total += c;
  const CallSignature sig{CollectiveOp::AllToAllV, dtype, send_total};
  const uint64_t seq = begin(sig, stream);
  const ObservedCall observed(*this, sig.op, call_bytes(sig), stream);
  const std::string what = where(sig, seq);
  cudaStream_t h = cuda::cuda_stream_handle(stream);
  const ncclDataType_t dt = nccl_dtype(dtype);
  const size_t elem_bytes = dtype_size_bytes(dtype);
  auto* s = static_cast<const std::byte*>(send);
  auto* r = static_cast<std::byte*>(recv);
  MOEZERO_CUDA_CHECK(ncclGroupStart());
  for (size_t p = 0; p < n; ++p) {
    if (send_elems[p] > 0)
      MOEZERO_NCCL_CALL(ncclSend(s, send_elems[p], dt, static_cast<int>(p), comm_, h), what);
    if (recv_elems[p] > 0)
      MOEZERO_NCCL_CALL(ncclRecv(r, recv_elems[p], dt, static_cast<int>(p), comm_, h), what);
    s += send_elems[p] * elem_bytes;
    r += recv_elems[p] * elem_bytes;
  }
  MOEZERO_NCCL_CALL(ncclGroupEnd(), what);
}

void NcclCommunicator::broadcast(const void* send, void* recv, size_t elems, DType dtype, int root,
                                 Stream& stream) {
  MOEZERO_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " out of range [0, ", size(),
                ") of group ", group().str());
  const CallSignature sig{CollectiveOp::Broadcast, dtype, elems, ReduceOp::Sum, root};
  const uint64_t seq = begin(sig, stream);
  const ObservedCall observed(*this, sig.op, call_bytes(sig), stream);
  MOEZERO_NCCL_CALL(ncclBroadcast(send, recv, elems, nccl_dtype(dtype), root, comm_,
                                  cuda::cuda_stream_handle(stream)),
                    where(sig, seq));
}

void NcclCommunicator::barrier(Stream& stream) {
  const CallSignature sig{CollectiveOp::Barrier, DType::I64, 0};
  const uint64_t seq = begin(sig, stream);
  const ObservedCall observed(*this, sig.op, call_bytes(sig), stream);
  // One int64 all-reduced in place: completes on the stream once every rank reached it.
  auto* word = static_cast<int64_t*>(sig_device_) + static_cast<size_t>(size()) * kSigWords;
  MOEZERO_NCCL_CALL(
      ncclAllReduce(word, word, 1, ncclInt64, ncclSum, comm_, cuda::cuda_stream_handle(stream)),
      where(sig, seq));
}

}  // namespace moezero::comm
