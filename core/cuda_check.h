// core/cuda_check.h — the one check macro for every CUDA-side status type (CUDA runtime,
// cuBLAS, NCCL), in the nccl-tests habit.
//
//     MOEZERO_CUDA_CHECK(cudaMemcpyAsync(...));
//     MOEZERO_CUDA_CHECK(cublasGemmEx(...));
//     MOEZERO_CUDA_CHECK(ncclAllReduce(...));
//     my_kernel<<<grid, block, 0, stream>>>(...);
//     MOEZERO_CUDA_CHECK_LAUNCH();
//
// A failed status throws moezero::Error whose message names the expression, the status name
// and its description, e.g.
//   "cudaMalloc(&p, bytes) failed: cudaErrorMemoryAllocation (out of memory)".
// Include only from CUDA-enabled translation units (it includes cuda_runtime.h, cublas_v2.h
// and nccl.h); plain C++ code must not depend on it.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "core/error.h"

namespace moezero {

inline void check_status(cudaError_t status, const char* expr, const char* file, int line) {
  if (status == cudaSuccess) [[likely]]
    return;
  throw Error(std::string(expr) + " failed: " + cudaGetErrorName(status) + " (" +
                  cudaGetErrorString(status) + ")",
              file, line);
}

inline void check_status(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) [[likely]]
    return;
  throw Error(std::string(expr) + " failed: " + cublasGetStatusName(status) + " (" +
                  cublasGetStatusString(status) + ")",
              file, line);
}

inline void check_status(ncclResult_t status, const char* expr, const char* file, int line) {
  if (status == ncclSuccess) [[likely]]
    return;
  // ncclGetLastError gives the detail of the most recent failure on this thread (may be "").
  const char* detail = ncclGetLastError(nullptr);
  std::string msg = std::string(expr) + " failed: ncclResult " +
                    std::to_string(static_cast<int>(status)) + " (" + ncclGetErrorString(status) +
                    ")";
  if (detail != nullptr && detail[0] != '\0') msg += std::string(": ") + detail;
  throw Error(std::move(msg), file, line);
}

}  // namespace moezero

#define MOEZERO_CUDA_CHECK(expr) ::moezero::check_status((expr), #expr, __FILE__, __LINE__)
// After every kernel launch: reports a bad launch configuration (or an earlier sticky error).
#define MOEZERO_CUDA_CHECK_LAUNCH() \
  ::moezero::check_status(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
