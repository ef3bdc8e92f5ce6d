// comm/world.h — World::run: N ranks as threads of this process, each with its own CPU
// Device, sharing one LocalWorld. The way tests, benchmarks and the CPU trainer start ranks.
//
//   comm::World::run(4, [](comm::RankContext& ctx) {
//     auto gather = ctx.communicator(ctx.world_group(), "gather");
//     Stream& s = ctx.device->create_stream("gather");
//     gather->all_gather(shard, full, n, DType::F32, s);
//     s.synchronize();
//   });
//
// Failure: the first exception thrown by any rank (by its function, or by its streams,
// which run() synchronises after the function returns) is rethrown by run() once every rank
// thread has ended. When a rank throws, the world is aborted, so the other ranks' pending
// collectives fail at once instead of waiting for their timeout.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comm/local/local_world.h"
#include "comm/sim/sim_links.h"
#include "core/communicator.h"
#include "core/device.h"
#include "kernels/backend.h"
#include "kernels/sim/sim_device.h"

namespace moezero::comm {

// The message of a rank's failure (what() of a std::exception, else "unknown exception"), for
// the abort reason the other ranks report.
std::string describe_exception(const std::exception_ptr& e);

struct RankContext {
  int rank = 0;  // global rank
  int world_size = 1;
  Device* device = nullptr;     // this rank's device ("cpu:<rank>", "sim:<rank> (h100)", ...)
  LocalWorld* world = nullptr;  // ranks as threads on CPU devices (World::run)
  // Set instead of `world` by World::run_cuda / run_mpi / run_sim: creates an NCCL, MPI or
  // simulated communicator.
  std::function<std::unique_ptr<Communicator>(const ProcessGroup&, const std::string&)> make_comm;

  ProcessGroup world_group() const { return make_world_group(world_size); }
  // This rank's communicator on (group, channel): LocalWorld's, or NCCL's under run_cuda.
  std::unique_ptr<Communicator> communicator(const ProcessGroup& group,
                                             const std::string& channel) const {
    if (make_comm) return make_comm(group, channel);
    return world->make_communicator(group, rank, channel);
  }
};

struct WorldOptions {
  CommOptions comm;         // timeout and link emulation of every communicator
  CpuDeviceOptions device;  // per-rank device options (allocator capacity)
};

// A simulated cluster (docs/simulator.md): virtual world size, the ranks run as threads, the
// topology and links, the GPU profile of every rank's simulated device.
struct SimWorldOptions {
  int world_size = 0;        // 0: topology.nodes * topology.gpus_per_node (else must equal it)
  std::vector<int> present;  // global ranks run as threads; empty: all of them
  SimTopology topology;
  sim::GpuProfile gpu = sim::gpu_profile("h100");
  sim::SimDeviceOptions device;  // capacity (0: the profile's memory), backed threshold
  CommOptions comm;              // timeout (wall) of collectives; emulation is ignored
  // When set, this network instead of the topology's links (nodes and GPUs per node still
  // size the world; every rank its own NIC, net_model.h, whatever topology.nics_per_node
  // says): CommEmulation{} is an ideal network (no bandwidth or latency cost, bench's
  // compute-only row); a config's comm_emulation models the link `moezero bench` emulates.
  std::optional<CommEmulation> network;
};

class World {
 public:
  // Runs fn on `world_size` rank threads and returns when all have ended; rethrows the first
  // exception of any rank.
  static void run(int world_size, const std::function<void(RankContext&)>& fn,
                  const WorldOptions& options = {});
  // The same with one CUDA GPU per rank (rank r uses cuda:r) and NCCL communicators
  // (in-process unique-id bootstrap). Needs world_size <= the number of GPUs. NCCL
  // collectives time out on their own (options.comm.timeout); a failing rank cannot wake the
  // others earlier. Throws when this build or machine has no CUDA.
  static void run_cuda(int world_size, const std::function<void(RankContext&)>& fn,
                       const WorldOptions& options = {});
  // One rank per MPI process (`mpirun -np N ...`, see comm/mpi_launch.h): runs fn once, for
  // this process's rank; rank and world size come from MPI_COMM_WORLD. device == Cpu: the
  // CPU device "cpu:<rank>" and MpiCommunicators (comm/mpi/); device == Cuda: GPU
  // <local rank> (one GPU per process on each machine) and NcclCommunicators whose unique ids
  // are broadcast through MPI. When fn or its streams fail, prints "moezero: rank R of N
  // failed: ..." to stderr and aborts the whole job (MPI_Abort), so that no peer is left
  // waiting; it never returns with a failure. Throws (on every rank alike) when this build
  // has no MPI, the process was not started by an MPI launcher, or (CUDA) a machine runs
  // more processes than it has GPUs.
  static void run_mpi(DeviceKind device, const std::function<void(RankContext&)>& fn,
                      const WorldOptions& options = {});
  // The simulated backend: one thread per PRESENT rank, each with a simulated device
  // ("sim:<rank>") on options.gpu and SimCommunicators of one SimWorld (comm/sim/sim_world.h:
  // virtual time, absent members modelled). ctx.rank is the global rank, ctx.world_size the
  // virtual world size. Failure handling as run(). Throws UserError on bad options.
  static void run_sim(const SimWorldOptions& options, const std::function<void(RankContext&)>& fn);
};

}  // namespace moezero::comm
