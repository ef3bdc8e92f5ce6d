// comm/cuda_world.cpp — World::run_cuda: one rank thread per GPU, NCCL communicators
// bootstrapped in process. Without the CUDA backend it throws a clear error.
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/world.h"
#include "core/error.h"
#include "kernels/backend.h"
#if MOEZERO_HAVE_CUDA
#include "comm/nccl/nccl_bootstrap.h"
#include "comm/nccl/nccl_communicator.h"
#endif

namespace moezero::comm {

void World::run_cuda(int world_size, const std::function<void(RankContext&)>& fn,
                     const WorldOptions& options) {
  std::string why;
  if (!cuda_available(&why)) MOEZERO_THROW("World::run_cuda: CUDA is unavailable: ", why);
#if MOEZERO_HAVE_CUDA
  const int gpus = cuda_device_count();
  MOEZERO_CHECK(world_size >= 1 && world_size <= gpus, "World::run_cuda: ", world_size,
                " ranks need as many GPUs, this machine has ", gpus);
  InProcessNcclBootstrap bootstrap(options.comm.timeout);
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Device> device;
      try {
        device = make_cuda_device(r);
        RankContext ctx{r, world_size, device.get(), nullptr, {}};
        Device* dev = device.get();
        ctx.make_comm = [&, r, dev](const ProcessGroup& g, const std::string& channel) {
          return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(
              g, r, channel, *dev, bootstrap.exchange(), options.comm));
        };
        fn(ctx);
        device->synchronize();
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) first = std::current_exception();
      }
      try {
        device.reset();
      } catch (...) {
        std::lock_guard lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
#else
  (void)world_size;
  (void)fn;
  (void)options;
#endif
}

}  // namespace moezero::comm
