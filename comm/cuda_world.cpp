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
  // Every rank's device while it lives (guarded by mu): when one rank fails, the others'
  // host waits end at once (Device::abort_host_waits), their communicators aborted by their
  // own threads, instead of each waiting out comm.timeout_s on a peer that is gone.
  std::vector<Device*> live(static_cast<size_t>(world_size), nullptr);
  auto fail = [&](int rank, std::exception_ptr e) {
    std::lock_guard lock(mu);
    if (!first) {
      first = e;
      const std::string why = "rank " + std::to_string(rank) + " failed: " + describe_exception(e);
      for (int o = 0; o < world_size; ++o)
        if (o != rank && live[static_cast<size_t>(o)])
          live[static_cast<size_t>(o)]->abort_host_waits(why);
    }
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Device> device;
      try {
        device = make_cuda_device(r);
        device->set_host_wait_limit(options.comm.timeout);  // every wait may need a peer
        {
          std::lock_guard lock(mu);
          live[static_cast<size_t>(r)] = device.get();
        }
        RankContext ctx{r, world_size, device.get(), nullptr, {}};
        Device* dev = device.get();
        ctx.make_comm = [&, r, dev](const ProcessGroup& g, const std::string& channel) {
          return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(
              g, r, channel, *dev, bootstrap.exchange(), options.comm));
        };
        fn(ctx);
        device->synchronize();
      } catch (...) {
        fail(r, std::current_exception());
      }
      {
        std::lock_guard lock(mu);
        live[static_cast<size_t>(r)] = nullptr;
      }
      try {
        device.reset();
      } catch (...) {
        fail(r, std::current_exception());
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
