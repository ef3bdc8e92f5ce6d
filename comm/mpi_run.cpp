// comm/mpi_run.cpp — World::run_mpi: this process is one rank of an MPI job. Without MPI in
// the build it throws a clear error.
#include <cstdio>
#include <exception>

#include "comm/mpi_launch.h"
#include "comm/world.h"
#include "core/error.h"
#include "kernels/backend.h"
#if MOEZERO_HAVE_MPI
#include "comm/mpi/mpi_world.h"
#endif
#if MOEZERO_HAVE_MPI && MOEZERO_HAVE_CUDA
#include "comm/nccl/nccl_bootstrap.h"
#include "comm/nccl/nccl_communicator.h"
#endif

namespace moezero::comm {

void World::run_mpi(DeviceKind device_kind, const std::function<void(RankContext&)>& fn,
                    const WorldOptions& options) {
  const std::optional<MpiProcess> proc = mpi_process();
  MOEZERO_CHECK(proc.has_value(),
                "World::run_mpi: this process was not started by an MPI launcher (mpirun -np N)");
#if MOEZERO_HAVE_MPI
  MpiWorld& mpi = MpiWorld::instance();
  if (device_kind == DeviceKind::Cuda) {
    std::string why;
    if (!cuda_available(&why)) MOEZERO_THROW("World::run_mpi: CUDA is unavailable: ", why);
    MOEZERO_CHECK(proc->local_size <= cuda_device_count(), "World::run_mpi: ", proc->local_size,
                  " processes run on this machine but it has ", cuda_device_count(),
                  " GPU(s): one GPU per process (start at most that many per host)");
  }
  std::unique_ptr<Device> device;
  try {
    RankContext ctx{proc->rank, proc->world_size, nullptr, nullptr, {}};
    if (device_kind == DeviceKind::Cuda) {
#if MOEZERO_HAVE_CUDA
      device = make_cuda_device(proc->local_rank);
      Device* dev = device.get();
      ctx.make_comm = [&options, dev, rank = proc->rank](const ProcessGroup& g,
                                                         const std::string& channel) {
        return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(
            g, rank, channel, *dev, mpi_nccl_exchange(g, options.comm.timeout), options.comm));
      };
#endif
    } else {
      device = make_cpu_device(proc->rank, options.device);
      ctx.make_comm = [&mpi, &options](const ProcessGroup& g, const std::string& channel) {
        return mpi.make_communicator(g, channel, options.comm);
      };
    }
    ctx.device = device.get();
    fn(ctx);
    device->synchronize();  // surfaces errors of work still queued on its streams
    device.reset();
  } catch (const std::exception& e) {
    // A peer may be waiting in a collective this rank will never issue: end the job now.
    std::fprintf(stderr, "moezero: rank %d of %d failed: %s\n", proc->rank, proc->world_size,
                 e.what());
    MpiWorld::abort_job(1);
  }
#else
  (void)device_kind;
  (void)fn;
  (void)options;
#endif
}

}  // namespace moezero::comm
