// kernels/cuda/cuda_stream.h — access to the raw CUDA stream behind a moezero::Stream, for
// code that calls CUDA libraries directly (the NCCL communicator, benchmarks).
#pragma once

#include <cuda_runtime.h>

#include "core/device.h"

namespace moezero::cuda {

// [in] s: a stream of a CUDA device (s.device().kind() == DeviceKind::Cuda), else throws
// moezero::Error. Returns the cudaStream_t that work enqueued on `s` runs on. The handle
// belongs to the device; do not destroy it. Callers must make `s.device()` current
// (cudaSetDevice(s.device().index())) before enqueueing on it themselves.
cudaStream_t cuda_stream_handle(Stream& s);

}  // namespace moezero::cuda
