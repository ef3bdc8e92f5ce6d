// benchmarks/comm_bench.cpp — LocalCommunicator: achieved bus bandwidth of each collective
// next to what the emulated link allows, measured in the same run.
//
// Table 1 (emulated link, default 2 Gbit/s + 20 us, below what 2 shared cores copy): for each
// collective and size, the network model's time of one call alone (comm/net_model.h: NCCL
// algorithm bytes per rank over its NIC, latency per algorithm step) and the achieved time per
// call; busbw = bus_bytes / time. ratio = achieved busbw / model
// busbw: 1.0 means the emulation holds the collective to exactly the link's speed; below 1 is
// overhead (thread wake-ups, the copies themselves when they are slower than the link). Table 2 (no
// emulation): the raw shared-memory speed of the same collectives; its baseline is single-threaded
// std::memcpy of the same bytes in this run, ratio = busbw / memcpy GB/s. Usage: comm_bench
// [--ranks N] [--gbps X] [--latency-us Y] [--quick]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "comm/net_model.h"
#include "comm/world.h"
#include "core/communicator.h"
#include "core/error.h"

namespace {

using namespace moezero;
using Clock = std::chrono::steady_clock;

struct Case {
  CollectiveOp op;
  size_t size_bytes;  // nccl-tests size (CommRecord::bytes)
};

// Seconds per call of `c` on `n` ranks (rank 0's view, between two barriers).
double time_collective(int n, const Case& c, int iters, const comm::WorldOptions& opts) {
  double seconds = 0.0;
  comm::World::run(
      n,
      [&](comm::RankContext& ctx) {
        auto comm = ctx.communicator(ctx.world_group(), "bench");
        Stream& s = ctx.device->create_stream("bench");
        const size_t elems = c.size_bytes / sizeof(float);
        const size_t shard = elems / static_cast<size_t>(n);
        std::vector<float> a(elems, 1.0f), b(elems, 0.0f);
        std::vector<size_t> counts(static_cast<size_t>(n), shard);
        auto once = [&] {
          switch (c.op) {
            case CollectiveOp::AllGather:
              comm->all_gather(a.data(), b.data(), shard, DType::F32, s);
              break;
            case CollectiveOp::ReduceScatter:
              comm->reduce_scatter(a.data(), b.data(), shard, DType::F32, ReduceOp::Sum, s);
              break;
            case CollectiveOp::AllReduce:
              comm->all_reduce(a.data(), b.data(), elems, DType::F32, ReduceOp::Sum, s);
              break;
            case CollectiveOp::AllToAllV:
              comm->all_to_all_v(a.data(), counts, b.data(), counts, DType::F32, s);
              break;
            case CollectiveOp::Broadcast:
              comm->broadcast(a.data(), b.data(), elems, DType::F32, 0, s);
              break;
            case CollectiveOp::Barrier: comm->barrier(s); break;
          }
        };
        once();  // warm-up: first touch of the buffers
        comm->barrier(s);
        s.synchronize();
        const auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) once();
        s.synchronize();
        const double dt = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
        if (ctx.rank == 0) seconds = dt;
      },
      opts);
  return seconds;
}

double memcpy_gbps(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  std::memcpy(b.data(), a.data(), bytes);
  const int iters = 5;
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) std::memcpy(b.data(), a.data(), bytes);
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  return static_cast<double>(bytes) / dt / 1e9 + 0.0 * b[bytes - 1];
}

// Seconds the network model gives one call of `op` (nccl-tests size `bytes`) on n ranks alone.
double model_seconds(const CommEmulation& spec, CollectiveOp op, int n, size_t bytes) {
  comm::CollectiveShape shape;
  shape.op = op;
  for (int r = 0; r < n; ++r) shape.ranks.push_back(r);
  shape.size_bytes = static_cast<double>(bytes);
  if (op == CollectiveOp::AllToAllV)
    shape.a2a_bytes.assign(
        static_cast<size_t>(n),
        std::vector<double>(static_cast<size_t>(n), static_cast<double>(bytes) / n));
  comm::NetworkModel model(spec);
  return model.projected_completion_s(model.start(0.0, comm::collective_traffic(spec, shape)));
}

std::string size_str(size_t bytes) {
  return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB"
                             : std::to_string(bytes >> 10) + " KiB";
}

int run(int argc, char** argv) {
  int n = 4;
  double gbps = 2.0, latency_us = 20.0;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      MOEZERO_CHECK(i + 1 < argc, "comm_bench: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--ranks")
      n = std::stoi(next());
    else if (a == "--gbps")
      gbps = std::stod(next());
    else if (a == "--latency-us")
      latency_us = std::stod(next());
    else if (a == "--quick")
      quick = true;
    else
      MOEZERO_THROW("comm_bench: unknown argument '", a, "' (see the header of comm_bench.cpp)");
  }
  MOEZERO_CHECK(n >= 2, "comm_bench: --ranks must be >= 2, got ", n);
  const std::vector<CollectiveOp> ops{CollectiveOp::AllGather, CollectiveOp::ReduceScatter,
                                      CollectiveOp::AllReduce, CollectiveOp::AllToAllV,
                                      CollectiveOp::Broadcast};
  std::vector<size_t> sizes{256u << 10, 4u << 20, 32u << 20};
  if (quick) sizes.pop_back();
  const int iters = quick ? 3 : 5;

  comm::WorldOptions emulated;
  emulated.comm.emulation = CommEmulation{gbps, latency_us};
  std::printf("comm_bench: %d ranks (threads), emulated link %.1f Gbit/s (%.3f GB/s) + %.0f us\n\n",
              n, gbps, gbps / 8.0, latency_us);
  std::printf("%-15s %8s %10s %10s %12s %12s %7s\n", "collective", "size", "model ms",
              "achieved ms", "model GB/s", "achieved GB/s", "ratio");
  for (CollectiveOp op : ops) {
    for (size_t bytes : sizes) {
      const double bus_bytes = static_cast<double>(bytes) * bus_factor(op, n);
      const double model_s = model_seconds(emulated.comm.emulation, op, n, bytes);
      const double got_s = time_collective(n, {op, bytes}, iters, emulated);
      const double model_bw = bus_bytes / model_s / 1e9, got_bw = bus_bytes / got_s / 1e9;
      std::printf("%-15s %8s %10.3f %10.3f %12.3f %12.3f %7.2f\n", collective_op_name(op),
                  size_str(bytes).c_str(), model_s * 1e3, got_s * 1e3, model_bw, got_bw,
                  got_bw / model_bw);
    }
  }

  const size_t raw_bytes = sizes.back();
  const double base = memcpy_gbps(raw_bytes);
  std::printf(
      "\nno emulation, %s: shared-memory bus bandwidth vs single-thread memcpy (%.2f GB/s)\n",
      size_str(raw_bytes).c_str(), base);
  std::printf("%-15s %8s %10s %12s %7s\n", "collective", "size", "ms", "busbw GB/s", "ratio");
  for (CollectiveOp op : ops) {
    const double bus_bytes = static_cast<double>(raw_bytes) * bus_factor(op, n);
    const double got_s = time_collective(n, {op, raw_bytes}, iters, comm::WorldOptions{});
    std::printf("%-15s %8s %10.3f %12.3f %7.2f\n", collective_op_name(op),
                size_str(raw_bytes).c_str(), got_s * 1e3, bus_bytes / got_s / 1e9,
                bus_bytes / got_s / 1e9 / base);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_bench: %s\n", e.what());
    return 1;
  }
}
