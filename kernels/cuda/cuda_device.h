// kernels/cuda/cuda_device.h — the plain-C++ entry points of the CUDA backend.
//
// Included by kernels/backend.cpp, which g++ compiles: no CUDA header may appear here. The
// device classes themselves live in kernels/cuda/cuda_objects.h (CUDA-only).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/device.h"

namespace moezero::cuda {

// True when the CUDA runtime works and sees at least one GPU. Otherwise false and, when `why`
// is given, *why = the CUDA error text (e.g. "cudaErrorInsufficientDriver: CUDA driver version
// is insufficient for CUDA runtime version") or "no CUDA device found". Never throws.
bool cuda_runtime_available(std::string* why);

// Number of visible GPUs (0 when the runtime is unavailable). Never throws.
int cuda_device_count();

// Free memory of GPU `index` in bytes (cudaMemGetInfo); 0 when unknown. Never throws.
uint64_t cuda_free_memory(int index);

// Creates the device for GPU `index` (its default stream, allocator and op table).
// Throws moezero::Error when the index is out of range or CUDA fails.
std::unique_ptr<Device> make_cuda_device(int index);

}  // namespace moezero::cuda
