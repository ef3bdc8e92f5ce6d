// kernels/cuda/cuda_objects.h — CudaDevice, CudaStream, CudaEvent: core/device.h on a GPU.
//
// CUDA-only header (includes cuda_runtime.h, cublas_v2.h). Mapping onto CUDA:
// - Every stream is a cudaStreamNonBlocking stream owned by its device (the default stream
//   too: legacy stream 0 is never used, so no stream implicitly serialises with another).
// - enqueue_host = cudaLaunchHostFunc. The host fn must not call CUDA. An exception it throws
//   becomes the stream's sticky error; later host fns on that stream are skipped. Kernels
//   already enqueued cannot be skipped (CUDA has no such notion): after an error the stream's
//   device results are unspecified, and the error is rethrown by synchronize/query/check.
// - Errors found inside kernels (e.g. a token id out of range) are written to a small record
//   in mapped pinned host memory owned by the stream (DeviceErrorRecord). The stream turns a
//   set record into its sticky error when the host looks (check/query/synchronize, an event
//   synchronize, or before the next host fn runs): no host round trip per op.
// - Each stream lazily owns a cuBLAS handle bound to it, with its own workspace.
// Thread safety: a Stream is driven by one host thread at a time (as its cuBLAS handle must
// be); create_stream/create_event and the allocator may be called from any thread.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/ops.h"

namespace moezero::cuda {

// Math mode of every cuBLAS handle (each stream's, and the kernel bench's raw baseline).
// Default math: CUBLAS_COMPUTE_32F stays full fp32 (no TF32 for f32 inputs). Without
// DISALLOW_REDUCED_PRECISION_REDUCTION, cuBLAS may split k (few output tiles, long k: m 5 n 7
// k 1030, m 64 n 24 k 1030, even 300 x 260 x 33 on 132 SMs) and add the partial sums in C's
// dtype: a bf16 C then holds a sum of bf16-rounded partials (errors of several bf16 ulps of
// the partials, not one rounding of the fp32 sum). With the flag the partials are reduced in
// fp32 (in the workspace) and rounded to C's dtype once, as the CPU backend does.
inline constexpr cublasMath_t kCublasMathMode = static_cast<cublasMath_t>(
    CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);

// Error codes a kernel can report (see report_kernel_error in cuda_common.cuh); the stream
// turns them into the same messages as the CPU backend (kernels/cpu).
enum KernelErrorCode : int {
  kKernelOk = 0,
  kEmbeddingForwardId,          // ids[where] = value outside [0, V = limit)
  kEmbeddingBackwardId,         //   "
  kCrossEntropyForwardTarget,   // targets[where] = value outside [0, V = limit), not -1
  kCrossEntropyBackwardTarget,  //   "
  kExpertHistogramId,           // expert_ids[where] = value outside [0, E = limit), not -1
  kSortByExpertId,              //   "
  kGatherColsIdx,               // idx[where] = value outside [0, C = limit), not -1
  kScatterAddColsIdx,           //   "
};

// Lives in mapped pinned host memory, so the host reads it without a CUDA call. Written by at
// most one failing thread: the one that wins the claim word (in device memory: atomics on
// mapped host memory are not reliable over PCIe); it writes the details, fences, then
// publishes `code` with a plain store.
struct DeviceErrorRecord {
  int code;  // KernelErrorCode; 0 = no error
  int unused;
  long long where;
  long long value;
  long long limit;
};

// What a kernel gets to report an error (see report_kernel_error in cuda_common.cuh).
struct KernelErrorSink {
  int* claim;                 // device memory, 0 until the first report
  DeviceErrorRecord* record;  // device view of the stream's pinned record
};

class CudaDevice;

class CudaStream final : public Stream {
 public:
  CudaStream(CudaDevice& device, std::string name);
  ~CudaStream() override;

  Device& device() const override;
  void enqueue_host(std::function<void()> fn) override;
  void wait(const Event& event) override;
  void synchronize() override;
  bool query() override;
  void check() override;

  cudaStream_t handle() const { return stream_; }
  // The cuBLAS handle bound to this stream (created on first use, with a 32 MiB workspace
  // from cudaMalloc: outside the allocator's accounting).
  cublasHandle_t cublas();
  // Where kernels on this stream report errors.
  KernelErrorSink error_sink() const { return KernelErrorSink{err_claim_, err_dev_}; }
  // Makes `e` the sticky error unless one is already set.
  void set_error(std::exception_ptr e);
  bool has_error() const { return has_error_.load(std::memory_order_acquire); }

 private:
  struct HostTask;
  static void CUDART_CB run_host_task(void* task);
  // Turns a published DeviceErrorRecord into the sticky error. Safe at any time.
  void harvest_device_error();
  void rethrow_if_error();
  void release() noexcept;  // frees everything held (destructor, failed constructor)

  CudaDevice& device_;
  cudaStream_t stream_ = nullptr;
  std::mutex mu_;
  std::exception_ptr error_;
  std::atomic<bool> has_error_{false};
  std::once_flag cublas_once_;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  DeviceErrorRecord* err_host_ = nullptr;  // pinned, mapped
  DeviceErrorRecord* err_dev_ = nullptr;   // the same memory, as the device sees it
  int* err_claim_ = nullptr;               // device memory (cudaMalloc), zeroed
};

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(CudaDevice& device);
  ~CudaEvent() override;

  void record(Stream& stream) override;
  bool query() const override;
  void synchronize() const override;
  float elapsed_ms_since(const Event& start) const override;

  cudaEvent_t handle() const { return event_; }

 private:
  CudaDevice& device_;
  cudaEvent_t event_ = nullptr;
  std::atomic<CudaStream*> last_stream_{nullptr};  // stream of the last record
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int index);
  ~CudaDevice() override;

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  int index() const override { return index_; }
  std::string name() const override { return name_; }
  Stream& default_stream() override;
  Stream& create_stream(std::string name) override;
  std::unique_ptr<Event> create_event() override;
  void synchronize() override;
  Ops& ops() override { return *ops_; }
  Allocator& allocator() override { return *allocator_; }
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* ptr) override;
  bool raw_free_synchronizes() const override { return true; }  // cudaFree
  void memcpy_async(void* dst, const void* src, size_t bytes, Stream& stream) override;
  void memset_async(void* dst, int value, size_t bytes, Stream& stream) override;

  // cudaSetDevice(index): every entry point calls it first.
  void make_current() const;

 private:
  int index_;
  std::string name_;
  std::mutex streams_mu_;
  std::vector<std::unique_ptr<CudaStream>> streams_;  // [0] is the default stream
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Allocator> allocator_;  // reset first in ~CudaDevice, while streams live
};

// Checked downcasts (throw moezero::Error naming the stream when it is not a CUDA one).
CudaStream& as_cuda_stream(Stream& s);
CudaDevice& as_cuda_device(Device& d);

// The op table of the CUDA backend (kernels/cuda/cuda_ops.h).
std::unique_ptr<Ops> make_cuda_ops();

}  // namespace moezero::cuda
