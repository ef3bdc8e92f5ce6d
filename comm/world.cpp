// comm/world.cpp — rank threads, first-exception propagation, abort on failure.
#include "comm/world.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/sim/sim_world.h"
#include "core/error.h"

namespace moezero::comm {

std::string describe_exception(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

namespace {

// One thread per rank of `ranks`: a device from make_device, the context from make_ctx, then
// fn. The first failure of any rank (its fn, or its streams, surfaced by the final
// synchronize) aborts the world through `abort`, so the others' pending collectives fail at
// once, and is rethrown once every thread has ended.
void run_rank_threads(const std::vector<int>& ranks,
                      const std::function<std::unique_ptr<Device>(int)>& make_device,
                      const std::function<RankContext(int, Device*)>& make_ctx,
                      const std::function<void(const std::string&)>& abort,
                      const std::function<void(RankContext&)>& fn) {
  std::mutex mu;
  std::exception_ptr first;
  auto fail = [&](int rank, std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!first) first = e;
    }
    abort("rank " + std::to_string(rank) + " failed: " + describe_exception(e));
  };
  std::vector<std::thread> threads;
  threads.reserve(ranks.size());
  for (int r : ranks) {
    threads.emplace_back([&, r] {
      std::unique_ptr<Device> device;
      try {
        device = make_device(r);
        RankContext ctx = make_ctx(r, device.get());
        fn(ctx);
        device->synchronize();  // surfaces errors of work still queued on its streams
      } catch (...) {
        fail(r, std::current_exception());
      }
      // Destroying the device joins its stream workers; after an abort their pending
      // collectives fail at once, so this does not wait for a timeout.
      try {
        device.reset();
      } catch (...) {
        fail(r, std::current_exception());
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace

void World::run(int world_size, const std::function<void(RankContext&)>& fn,
                const WorldOptions& options) {
  LocalWorld world(world_size, options.comm);
  std::vector<int> ranks(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) ranks[static_cast<size_t>(r)] = r;
  run_rank_threads(
      ranks, [&](int r) { return make_cpu_device(r, options.device); },
      [&](int r, Device* d) {
        return RankContext{r, world_size, d, &world, {}};
      },
      [&](const std::string& why) { world.abort(why); }, fn);
}

void World::run_sim(const SimWorldOptions& options, const std::function<void(RankContext&)>& fn) {
  const SimTopology& topo = options.topology;
  // A given network (ideal, or the link bench emulates) keeps net_model's per-rank NICs.
  const SimNetworkSpec network =
      options.network ? SimNetworkSpec{*options.network, 0} : topology_network(topo);
  const int cluster = topo.nodes * topo.gpus_per_node;
  const int world_size = options.world_size == 0 ? cluster : options.world_size;
  MOEZERO_REQUIRE(world_size == cluster, "simulated world: world size ", world_size,
                  " differs from the cluster's ", topo.nodes, " nodes x ", topo.gpus_per_node,
                  " GPUs = ", cluster);
  SimWorld world(world_size, options.present, network, options.comm);
  run_rank_threads(
      world.present(), [&](int r) { return sim::make_sim_device(r, options.gpu, options.device); },
      [&](int r, Device* d) {
        return RankContext{r, world_size, d, nullptr,
                           [&world, r](const ProcessGroup& g, const std::string& channel) {
                             return world.make_communicator(g, r, channel);
                           }};
      },
      [&](const std::string& why) { world.abort(why); }, fn);
}

}  // namespace moezero::comm
