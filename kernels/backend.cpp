// kernels/backend.cpp — the device factory: CPU always, CUDA when built and a GPU is usable.
#include "kernels/backend.h"

#include "core/error.h"
#include "kernels/cpu/cpu_device.h"
#if MOEZERO_HAVE_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

namespace moezero {

std::unique_ptr<Device> make_cpu_device(int index, CpuDeviceOptions options) {
  return std::make_unique<cpu::CpuDevice>(index, options.capacity_bytes);
}

bool cuda_available(std::string* why) {
#if MOEZERO_HAVE_CUDA
  return cuda::cuda_runtime_available(why);
#else
  if (why) *why = "this build has no CUDA backend (configure with MOEZERO_CUDA=ON)";
  return false;
#endif
}

int cuda_device_count() {
#if MOEZERO_HAVE_CUDA
  return cuda::cuda_runtime_available(nullptr) ? cuda::cuda_device_count() : 0;
#else
  return 0;
#endif
}

uint64_t cuda_free_memory(int index) {
#if MOEZERO_HAVE_CUDA
  return cuda::cuda_runtime_available(nullptr) ? cuda::cuda_free_memory(index) : 0;
#else
  (void)index;
  return 0;
#endif
}

std::unique_ptr<Device> make_cuda_device(int index) {
  std::string why;
  if (!cuda_available(&why)) MOEZERO_THROW("cannot create cuda:", index, ": ", why);
#if MOEZERO_HAVE_CUDA
  return cuda::make_cuda_device(index);
#else
  return nullptr;
#endif
}

std::unique_ptr<Device> make_device(DeviceKind kind, int index) {
  switch (kind) {
    case DeviceKind::Cpu: return make_cpu_device(index);
    case DeviceKind::Cuda: return make_cuda_device(index);
    case DeviceKind::Sim: break;
  }
  MOEZERO_THROW("make_device: a simulated device needs a GPU profile: use ",
                "sim::make_sim_device (kernels/sim/sim_device.h)");
}

std::vector<DeviceKind> available_backends() {
  std::vector<DeviceKind> v{DeviceKind::Cpu};
  if (cuda_available()) v.push_back(DeviceKind::Cuda);
  return v;
}

std::vector<DeviceKind> compiled_backends() {
  std::vector<DeviceKind> v{DeviceKind::Cpu};
#if MOEZERO_HAVE_CUDA
  v.push_back(DeviceKind::Cuda);
#endif
  return v;
}

}  // namespace moezero
