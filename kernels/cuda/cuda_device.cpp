// kernels/cuda/cuda_device.cpp — CudaDevice, CudaStream, CudaEvent (see cuda_objects.h) and
// the plain entry points of cuda_device.h / cuda_stream.h.
#include "kernels/cuda/cuda_device.h"

#include <cstring>
#include <utility>

#include "core/cuda_check.h"
#include "kernels/cuda/cuda_objects.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_stream.h"

namespace moezero::cuda {

namespace {
// cuBLAS on Hopper wants up to 32 MiB of workspace per handle for its best kernels.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

// The message of a published DeviceErrorRecord: the CPU backend's wording (kernels/cpu).
std::string kernel_error_message(int code, long long where, long long value, long long limit) {
  auto ids = [&](const char* op) {
    return detail::concat(op, ": ids[", where, "] = ", value, " is outside [0, V = ", limit, ")");
  };
  auto targets = [&](const char* op) {
    return detail::concat(op, ": targets[", where, "] = ", value, " is outside [0, V = ", limit,
                          ") and is not -1 (ignore)");
  };
  auto experts = [&](const char* op) {
    return detail::concat(op, ": expert_ids[", where, "] = ", value, " is outside [0, E = ", limit,
                          ") and is not -1 (dropped)");
  };
  auto cols = [&](const char* op) {
    return detail::concat(op, ": idx[", where, "] = ", value, " is outside [0, C = ", limit,
                          ") and is not -1 (absent)");
  };
  switch (code) {
    case kEmbeddingForwardId: return ids("embedding_forward");
    case kEmbeddingBackwardId: return ids("embedding_backward");
    case kCrossEntropyForwardTarget: return targets("cross_entropy_forward");
    case kCrossEntropyBackwardTarget: return targets("cross_entropy_backward");
    case kExpertHistogramId: return experts("expert_histogram");
    case kSortByExpertId: return experts("sort_by_expert");
    case kGatherColsIdx: return cols("gather_cols");
    case kScatterAddColsIdx: return cols("scatter_add_cols");
    default: return detail::concat("unknown kernel error code ", code);
  }
}
}  // namespace

// ---- plain entry points ---------------------------------------------------------------------

bool cuda_runtime_available(std::string* why) {
  int n = 0;
  cudaError_t st = cudaGetDeviceCount(&n);
  if (st != cudaSuccess) {
    (void)cudaGetLastError();  // do not leave the error for the next check
    if (why) *why = std::string(cudaGetErrorName(st)) + ": " + cudaGetErrorString(st);
    return false;
  }
  if (n <= 0) {
    if (why) *why = "no CUDA device found";
    return false;
  }
  return true;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

uint64_t cuda_free_memory(int index) {
  int before = 0;
  size_t free_b = 0, total_b = 0;
  if (cudaGetDevice(&before) != cudaSuccess || cudaSetDevice(index) != cudaSuccess ||
      cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  (void)cudaSetDevice(before);
  return static_cast<uint64_t>(free_b);
}

std::unique_ptr<Device> make_cuda_device(int index) {
  int n = cuda_device_count();
  MOEZERO_CHECK(index >= 0 && index < n, "cuda device index ", index, " out of range: ", n,
                " visible device(s)");
  return std::make_unique<CudaDevice>(index);
}

cudaStream_t cuda_stream_handle(Stream& s) { return as_cuda_stream(s).handle(); }

std::unique_ptr<Ops> make_cuda_ops() { return std::make_unique<CudaOps>(); }

CudaStream& as_cuda_stream(Stream& s) {
  MOEZERO_CHECK(s.device().kind() == DeviceKind::Cuda, "stream '", s.name(), "' is on ",
                s.device().name(), ", not a CUDA device");
  return static_cast<CudaStream&>(s);
}

CudaDevice& as_cuda_device(Device& d) {
  MOEZERO_CHECK(d.kind() == DeviceKind::Cuda, "device ", d.name(), " is not a CUDA device");
  return static_cast<CudaDevice&>(d);
}

// ---- CudaStream -----------------------------------------------------------------------------

struct CudaStream::HostTask {
  CudaStream* stream;
  std::function<void()> fn;
};

CudaStream::CudaStream(CudaDevice& device, std::string name)
    : Stream(std::move(name)), device_(device) {
  try {
    device_.make_current();
    MOEZERO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    void* p = nullptr;
    MOEZERO_CUDA_CHECK(cudaHostAlloc(&p, sizeof(DeviceErrorRecord), cudaHostAllocMapped));
    err_host_ = static_cast<DeviceErrorRecord*>(p);
    std::memset(p, 0, sizeof(DeviceErrorRecord));
    void* d = nullptr;
    MOEZERO_CUDA_CHECK(cudaHostGetDevicePointer(&d, p, 0));
    err_dev_ = static_cast<DeviceErrorRecord*>(d);
    MOEZERO_CUDA_CHECK(cudaMalloc(&err_claim_, sizeof(int)));
    // First in this stream's order, so every kernel that may report sees it zeroed.
    MOEZERO_CUDA_CHECK(cudaMemsetAsync(err_claim_, 0, sizeof(int), stream_));
  } catch (...) {
    release();
    throw;
  }
}

CudaStream::~CudaStream() { release(); }

void CudaStream::release() noexcept {
  // Must not throw: failures here are ignored (the stream is going away).
  cudaSetDevice(device_.index());
  if (stream_) cudaStreamSynchronize(stream_);
  if (cublas_) cublasDestroy(cublas_);
  if (cublas_workspace_) cudaFree(cublas_workspace_);
  if (err_host_) cudaFreeHost(err_host_);
  if (err_claim_) cudaFree(err_claim_);
  if (stream_) cudaStreamDestroy(stream_);
  cublas_ = nullptr;
  cublas_workspace_ = nullptr;
  err_host_ = nullptr;
  err_dev_ = nullptr;
  err_claim_ = nullptr;
  stream_ = nullptr;
  (void)cudaGetLastError();
}

Device& CudaStream::device() const { return device_; }

cublasHandle_t CudaStream::cublas() {
  std::call_once(cublas_once_, [this] {
    device_.make_current();
    MOEZERO_CUDA_CHECK(cublasCreate(&cublas_));
    MOEZERO_CUDA_CHECK(cublasSetStream(cublas_, stream_));
    MOEZERO_CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes));
    MOEZERO_CUDA_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
    // Pointer mode host (alpha/beta are host floats); default math (no TF32 for f32 inputs,
    // so f32 GEMMs match the CPU reference closely).
    MOEZERO_CUDA_CHECK(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST));
    MOEZERO_CUDA_CHECK(cublasSetMathMode(cublas_, kCublasMathMode));
  });
  return cublas_;
}

void CudaStream::set_error(std::exception_ptr e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_) {
    error_ = std::move(e);
    has_error_.store(true, std::memory_order_release);
  }
}

void CudaStream::harvest_device_error() {
  // `code` is published last (after a system fence), so once it is non-zero the rest is valid.
  volatile DeviceErrorRecord* rec = err_host_;
  int code = rec->code;
  if (code == kKernelOk || has_error()) return;
  std::string msg =
      kernel_error_message(code, rec->where, rec->value, rec->limit) +
      detail::concat(" (found on the GPU, stream '", name(), "' of ", device_.name(), ")");
  set_error(std::make_exception_ptr(Error(std::move(msg), __FILE__, __LINE__)));
}

void CudaStream::rethrow_if_error() {
  harvest_device_error();
  if (!has_error()) return;
  std::lock_guard<std::mutex> lock(mu_);
  std::rethrow_exception(error_);
}

void CUDART_CB CudaStream::run_host_task(void* raw) {
  std::unique_ptr<HostTask> task(static_cast<HostTask*>(raw));
  CudaStream* s = task->stream;
  s->harvest_device_error();   // everything before this point has completed
  if (s->has_error()) return;  // sticky: later host work is skipped
  try {
    task->fn();
  } catch (...) {
    s->set_error(std::current_exception());
  }
}

void CudaStream::enqueue_host(std::function<void()> fn) {
  device_.make_current();
  auto task = std::make_unique<HostTask>(HostTask{this, std::move(fn)});
  MOEZERO_CUDA_CHECK(cudaLaunchHostFunc(stream_, &CudaStream::run_host_task, task.get()));
  (void)task.release();  // owned by run_host_task from now on
}

void CudaStream::wait(const Event& event) {
  const auto* ev = dynamic_cast<const CudaEvent*>(&event);
  MOEZERO_CHECK(ev != nullptr, "stream '", name(), "' of ", device_.name(),
                " cannot wait on an event of another backend");
  device_.make_current();
  MOEZERO_CUDA_CHECK(cudaStreamWaitEvent(stream_, ev->handle(), 0));
}

// Polled, never cudaStreamSynchronize: the wait may depend on a peer's collective, and the
// device's limit (comm.timeout_s) and abort flag must be able to end it (Device, "Bounded
// host waits").
void CudaStream::synchronize() {
  device_.make_current();
  device_.bounded_host_wait(
      [&] {
        const cudaError_t st = cudaStreamQuery(stream_);
        if (st == cudaErrorNotReady) {
          (void)cudaGetLastError();
          return false;
        }
        MOEZERO_CUDA_CHECK(st);
        return true;
      },
      "stream '" + name() + "' of " + device_.name());
  rethrow_if_error();
}

bool CudaStream::query() {
  device_.make_current();
  cudaError_t st = cudaStreamQuery(stream_);
  if (st == cudaErrorNotReady) {
    (void)cudaGetLastError();
    rethrow_if_error();
    return false;
  }
  MOEZERO_CUDA_CHECK(st);
  rethrow_if_error();
  return true;
}

void CudaStream::check() { rethrow_if_error(); }

// ---- CudaEvent ------------------------------------------------------------------------------

CudaEvent::CudaEvent(CudaDevice& device) : device_(device) {
  device_.make_current();
  MOEZERO_CUDA_CHECK(cudaEventCreate(&event_));  // with timing, for elapsed_ms_since
}

CudaEvent::~CudaEvent() {
  if (event_) {
    cudaSetDevice(device_.index());
    cudaEventDestroy(event_);
    (void)cudaGetLastError();
  }
}

void CudaEvent::record(Stream& stream) {
  CudaStream& cs = as_cuda_stream(stream);
  MOEZERO_CHECK(&cs.device() == &device_, "event of ", device_.name(), " recorded on stream '",
                cs.name(), "' of ", cs.device().name());
  device_.make_current();
  MOEZERO_CUDA_CHECK(cudaEventRecord(event_, cs.handle()));
  last_stream_.store(&cs, std::memory_order_release);
}

bool CudaEvent::query() const {
  device_.make_current();
  cudaError_t st = cudaEventQuery(event_);
  if (st == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  MOEZERO_CUDA_CHECK(st);
  return true;
}

void CudaEvent::synchronize() const {
  device_.make_current();
  device_.bounded_host_wait([&] { return query(); }, "an event of " + device_.name());
  if (CudaStream* s = last_stream_.load(std::memory_order_acquire)) s->check();
}

float CudaEvent::elapsed_ms_since(const Event& start) const {
  const auto* st = dynamic_cast<const CudaEvent*>(&start);
  MOEZERO_CHECK(st != nullptr, "elapsed_ms_since: start event is not a CUDA event");
  device_.make_current();
  float ms = 0.0f;
  MOEZERO_CUDA_CHECK(cudaEventElapsedTime(&ms, st->handle(), event_));
  return ms;
}

// ---- CudaDevice -----------------------------------------------------------------------------

CudaDevice::CudaDevice(int index) : index_(index) {
  make_current();
  cudaDeviceProp prop{};
  MOEZERO_CUDA_CHECK(cudaGetDeviceProperties(&prop, index_));
  name_ = detail::concat("cuda:", index_, " (", prop.name, ")");
  streams_.push_back(std::make_unique<CudaStream>(*this, "default"));
  ops_ = make_cuda_ops();
  allocator_ = std::make_unique<Allocator>(*this);
}

CudaDevice::~CudaDevice() {
  try {
    synchronize();
  } catch (...) {
    // A sticky stream error has already been reported (or never will be): nothing to do here.
  }
  allocator_.reset();  // returns cached blocks via raw_free while the streams still exist
  ops_.reset();
  streams_.clear();
}

void CudaDevice::make_current() const { MOEZERO_CUDA_CHECK(cudaSetDevice(index_)); }

Stream& CudaDevice::default_stream() { return *streams_.front(); }

Stream& CudaDevice::create_stream(std::string name) {
  auto s = std::make_unique<CudaStream>(*this, std::move(name));
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.push_back(std::move(s));
  return *streams_.back();
}

std::unique_ptr<Event> CudaDevice::create_event() { return std::make_unique<CudaEvent>(*this); }

void CudaDevice::synchronize() {
  std::vector<CudaStream*> all;
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    for (auto& s : streams_) all.push_back(s.get());
  }
  // Wait for every stream before rethrowing, so no stream is left running on error.
  std::exception_ptr first;
  for (CudaStream* s : all) {
    try {
      s->synchronize();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void* CudaDevice::raw_alloc(size_t bytes) {
  make_current();
  void* p = nullptr;
  cudaError_t st = cudaMalloc(&p, bytes);
  if (st == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // clear it: out of memory is reported by the allocator
    return nullptr;
  }
  MOEZERO_CUDA_CHECK(st);
  return p;  // cudaMalloc aligns to at least 256 bytes
}

void CudaDevice::raw_free(void* ptr) {
  if (ptr == nullptr) return;
  make_current();
  MOEZERO_CUDA_CHECK(cudaFree(ptr));
}

void CudaDevice::memcpy_async(void* dst, const void* src, size_t bytes, Stream& stream) {
  if (bytes == 0) return;
  CudaStream& cs = as_cuda_stream(stream);
  make_current();
  MOEZERO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cs.handle()));
}

void CudaDevice::memset_async(void* dst, int value, size_t bytes, Stream& stream) {
  if (bytes == 0) return;
  CudaStream& cs = as_cuda_stream(stream);
  make_current();
  MOEZERO_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, cs.handle()));
}

}  // namespace moezero::cuda
