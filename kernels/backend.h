// kernels/backend.h — creating devices of either backend, and asking what is available.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"

namespace moezero {

struct CpuDeviceOptions {
  // Allocator capacity in bytes; 0 = unlimited. Lets tests and small-device runs hit OOM.
  size_t capacity_bytes = 0;
};

std::unique_ptr<Device> make_cpu_device(int index = 0, CpuDeviceOptions options = {});

// One line naming the CPU backend's GEMM library and the kernel family it runs on this machine,
// e.g. "GEMM oneDNN 2.6.3, avx512_core_amx kernels, one thread per call" (printed by
// `moezero train`). Says so when an AVX-512 machine would run narrower OpenBLAS kernels.
std::string cpu_gemm_description();

// Per-tile timing of the CPU backend's GEMMs (`moezero train --gemm-profile`): on, every tile
// call (one single-threaded library GEMM, kernels/cpu/cpu_gemm_library.cpp; profile in
// cpu_gemm_profile.cpp) is timed and counted by shape; enabling or disabling clears what was
// recorded. The rate GEMMs reach inside a training step, with their operands wherever the step left
// them, against the hot-cache rate of benchmarks/gemm_rate. Off by default (then one relaxed atomic
// load per tile).
void cpu_gemm_profile_enable(bool on);
// What was recorded: all tiles, per operand layout (A, B transposed or not; bf16), and the `top`
// tile shapes with the most time; calls, seconds, GFLOP/s (2 m n k per call) each.
std::string cpu_gemm_profile_report(size_t top = 10);

// True when this build has the CUDA backend and a usable GPU + driver. When false and `why`
// is given, *why says why ("built without CUDA", "CUDA driver version is insufficient", ...).
bool cuda_available(std::string* why = nullptr);
int cuda_device_count();  // 0 when !cuda_available()
// Free memory of GPU `index` in bytes (cudaMemGetInfo); 0 when unknown or without CUDA.
uint64_t cuda_free_memory(int index);
// Throws moezero::Error when CUDA is unavailable (with the reason).
std::unique_ptr<Device> make_cuda_device(int index = 0);

// Creates a device of `kind` (index as above).
std::unique_ptr<Device> make_device(DeviceKind kind, int index = 0);

// The backends that can run here: always Cpu; Cuda when cuda_available().
std::vector<DeviceKind> available_backends();
// The backends this build has compiled in (Cuda even without a GPU), for parameterised tests
// that must skip with a message rather than vanish.
std::vector<DeviceKind> compiled_backends();

}  // namespace moezero
