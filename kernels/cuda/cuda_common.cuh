// kernels/cuda/cuda_common.cuh — shared pieces of the CUDA op kernels: element conversions,
// dtype dispatch, launch sizing, block/warp reductions, kernel error reports, the per-op
// context (stream, device, scratch allocation).
//
// Every kernel loads its storage type (float, __nv_bfloat16, __half) into fp32, computes in
// fp32 and rounds once on store (round to nearest even, as core/dtype.h on the host).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/cuda_check.h"
#include "core/ops.h"
#include "kernels/cuda/cuda_objects.h"

namespace moezero::cuda {

// ---- element conversions ----------------------------------------------------------------
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) {
  return __float2half_rn(x);
}

// ---- dtype dispatch (host) ----------------------------------------------------------------
template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) for the activation dtypes f32 / bf16; throws for anything else.
template <typename F>
void dispatch_act(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: f(TypeTag<float>{}); return;
    case DType::BF16: f(TypeTag<__nv_bfloat16>{}); return;
    default: MOEZERO_THROW(op, ": dtype ", dtype_name(t), " not supported on CUDA (f32, bf16)");
  }
}
// As dispatch_act, plus f16 (storage-only ops: cast, fill, scale, add, axpy, sum_squares).
template <typename F>
void dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: f(TypeTag<float>{}); return;
    case DType::BF16: f(TypeTag<__nv_bfloat16>{}); return;
    case DType::F16: f(TypeTag<__half>{}); return;
    default: MOEZERO_THROW(op, ": dtype ", dtype_name(t), " is not a float dtype");
  }
}

// ---- launch sizing --------------------------------------------------------------------------
constexpr int kThreads = 256;
// Grid for a grid-stride loop over n elements (enough blocks to fill an H200 several times).
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 132 * 32));
}
// Grid of one block per row; rows must fit gridDim.x.
inline unsigned grid_rows(int64_t rows) {
  MOEZERO_CHECK(rows > 0 && rows <= INT_MAX, "row count ", rows, " out of the launch range");
  return static_cast<unsigned>(rows);
}

// ---- reductions -----------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide sum / max, result returned to every thread. `scratch` holds >= 32 floats.
// Must be called by all threads of the block; blockDim.x a multiple of 32. The reduction
// order is fixed, so results are deterministic.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// ---- kernel error reports -------------------------------------------------------------------
// First report on a stream wins; see DeviceErrorRecord in cuda_objects.h.
__device__ __forceinline__ void report_kernel_error(KernelErrorSink sink, int code, long long where,
                                                    long long value, long long limit) {
  if (atomicCAS(sink.claim, 0, 1) == 0) {
    volatile DeviceErrorRecord* rec = sink.record;
    rec->where = where;
    rec->value = value;
    rec->limit = limit;
    __threadfence_system();
    rec->code = code;
    __threadfence_system();
  }
}

// ---- per-op context -------------------------------------------------------------------------
// Makes the stream's device current and gathers what a do_* method needs.
struct OpContext {
  explicit OpContext(Stream& s) : stream(as_cuda_stream(s)), device(as_cuda_device(s.device())) {
    device.make_current();
    st = stream.handle();
  }
  // Stream-ordered scratch: freed (stream-safely) when the Buffer goes out of scope.
  Buffer scratch(size_t bytes, const char* what) {
    return device.allocator().allocate(bytes, MemTag::Other, stream, what);
  }
  KernelErrorSink err() const { return stream.error_sink(); }

  CudaStream& stream;
  CudaDevice& device;
  cudaStream_t st = nullptr;
};

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.data());
}

}  // namespace moezero::cuda
