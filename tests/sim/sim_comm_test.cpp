// The simulated communicator (comm/sim/): collectives' modelled times against the formulas
// (ring all-gather / reduce-scatter / all-reduce, tree all-reduce for small sizes, direct
// all-to-all-v, broadcast) at sizes 2-8 on one and two nodes, concurrency on one NIC, small
// backed buffers moving real values (also with absent members), representative ranks against
// the full world, timeouts and bad options.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <vector>

#include "comm/sim/sim_network.h"
#include "comm/world.h"
#include "core/error.h"
#include "core/host_exchange.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace moezero::comm {
namespace {

constexpr size_t kBig = size_t{64} << 20;  // 64 MiB: unbacked

// nics: NICs per node (0: one per GPU). The formulas of the tests over two nodes that say "one
// NIC per node" hold there; nic_traffic_test.cpp checks how a node's NICs share the traffic.
SimWorldOptions cluster(int nodes, int gpus_per_node, std::vector<int> present = {}, int nics = 0) {
  SimWorldOptions o;
  o.topology = SimTopology{nodes, gpus_per_node, "nvlink4", "eth_100g", nics};
  o.present = std::move(present);
  o.gpu = sim::gpu_profile("h100");
  o.gpu.launch_s = 0.0;  // collectives start at 0: times are the formulas alone
  o.comm.timeout = std::chrono::seconds(20);
  return o;
}

double bytes_per_s(const char* link) { return link_profile(link).effective_gbps() * 1e9 / 8.0; }
double step_s(const char* link) { return link_profile(link).latency_us * 1e-6; }

// Runs fn on every present rank and returns each one's virtual time after it (by rank).
std::map<int, double> run_times(const SimWorldOptions& o,
                                const std::function<void(RankContext&, Stream&)>& fn) {
  std::mutex mu;
  std::map<int, double> times;
  World::run_sim(o, [&](RankContext& ctx) {
    Stream& s = ctx.device->create_stream("comm");
    fn(ctx, s);
    ctx.device->synchronize();
    std::lock_guard lock(mu);
    times[ctx.rank] = *ctx.device->virtual_time_s();
  });
  return times;
}

double the_time(const std::map<int, double>& times) {
  const double t = times.begin()->second;
  for (const auto& [r, v] : times) EXPECT_NEAR(v, t, 1e-12) << "rank " << r;
  return t;
}

double all_gather_time(const SimWorldOptions& o, size_t total_bytes) {
  return the_time(run_times(o, [&](RankContext& ctx, Stream& s) {
    auto comm = ctx.communicator(ctx.world_group(), "gather");
    const size_t n = static_cast<size_t>(ctx.world_size);
    Buffer send = ctx.device->allocator().allocate(total_bytes / n, MemTag::CommBuffer, s);
    Buffer recv = ctx.device->allocator().allocate(total_bytes, MemTag::CommBuffer, s);
    comm->all_gather(send.data(), recv.data(), total_bytes / n / 2, DType::BF16, s);
    s.synchronize();
  }));
}

TEST(SimComm, RingAllGatherOnOneNodeMatchesTheFormula) {
  for (int n = 2; n <= 8; ++n) {
    const double size = static_cast<double>(kBig / n / 2 * 2 * n);  // what the ranks gather
    const double want = (n - 1.0) / n * size / bytes_per_s("nvlink4") + (n - 1) * step_s("nvlink4");
    EXPECT_NEAR(all_gather_time(cluster(1, n), kBig), want, 1e-12) << n << " ranks";
  }
}

TEST(SimComm, RingAllGatherOverTwoNodesWithOneNicEachIsAsSlowAsItsNicHops) {
  for (int n = 2; n <= 8; n += 2) {
    const double size = static_cast<double>(kBig / n / 2 * 2 * n);
    const double want =
        (n - 1.0) / n * size / bytes_per_s("eth_100g") + (n - 1) * step_s("eth_100g");
    EXPECT_NEAR(all_gather_time(cluster(2, n / 2, {}, 1), kBig), want, 1e-12) << n << " ranks";
  }
}

double all_reduce_time(const SimWorldOptions& o, size_t bytes) {
  return the_time(run_times(o, [&](RankContext& ctx, Stream& s) {
    auto comm = ctx.communicator(ctx.world_group(), "reduce");
    Buffer buf = ctx.device->allocator().allocate(bytes, MemTag::CommBuffer, s);
    comm->all_reduce(buf.data(), buf.data(), bytes / 4, DType::F32, ReduceOp::Sum, s);
    s.synchronize();
  }));
}

TEST(SimComm, LargeAllReduceIsARing) {
  for (int n = 2; n <= 8; n += 2) {
    const double want =
        2.0 * (n - 1) / n * kBig / bytes_per_s("eth_100g") + 2 * (n - 1) * step_s("eth_100g");
    EXPECT_NEAR(all_reduce_time(cluster(2, n / 2, {}, 1), kBig), want, 1e-12) << n << " ranks";
  }
}

TEST(SimComm, SmallAllReduceIsATree) {
  const size_t s = 4096;
  for (int n = 4; n <= 8; n += 2) {
    const double tree =
        2.0 * s / bytes_per_s("eth_100g") + 2 * std::ceil(std::log2(n)) * step_s("eth_100g");
    const double ring =
        2.0 * (n - 1) / n * s / bytes_per_s("eth_100g") + 2 * (n - 1) * step_s("eth_100g");
    ASSERT_LT(tree, ring);
    EXPECT_NEAR(all_reduce_time(cluster(2, n / 2, {}, 1), s), tree, 1e-12) << n << " ranks";
  }
  // The choice itself, by name.
  CollectiveShape shape{CollectiveOp::AllReduce, {0, 1, 2, 3, 4, 5, 6, 7}, 4096.0, 0, {}};
  Algorithm algo = Algorithm::Ring;
  choose_traffic(topology_network(cluster(2, 4).topology), shape, &algo);
  EXPECT_STREQ(algorithm_name(algo), "tree");
  shape.size_bytes = 1e9;
  choose_traffic(topology_network(cluster(2, 4).topology), shape, &algo);
  EXPECT_STREQ(algorithm_name(algo), "ring");
}

TEST(SimComm, ReduceScatterAndBroadcastMatchTheFormulas) {
  for (int n = 2; n <= 8; n += 3) {
    const double rs = the_time(run_times(cluster(1, n), [&](RankContext& ctx, Stream& s) {
      auto comm = ctx.communicator(ctx.world_group(), "reduce");
      Buffer send = ctx.device->allocator().allocate(kBig, MemTag::Grad, s);
      Buffer recv = ctx.device->allocator().allocate(kBig / n, MemTag::Grad, s);
      comm->reduce_scatter(send.data(), recv.data(), kBig / n / 4, DType::F32, ReduceOp::Sum, s);
    }));
    const double size = static_cast<double>(kBig / n / 4 * 4 * n);
    EXPECT_NEAR(rs, (n - 1.0) / n * size / bytes_per_s("nvlink4") + (n - 1) * step_s("nvlink4"),
                1e-12);
    const double bc = the_time(run_times(cluster(1, n), [&](RankContext& ctx, Stream& s) {
      auto comm = ctx.communicator(ctx.world_group(), "bcast");
      Buffer buf = ctx.device->allocator().allocate(kBig, MemTag::Other, s);
      comm->broadcast(buf.data(), buf.data(), kBig / 4, DType::F32, 0, s);
    }));
    EXPECT_NEAR(bc, 1.0 * kBig / bytes_per_s("nvlink4") + (n - 1) * step_s("nvlink4"), 1e-12);
  }
}

double uniform_a2a_time(const SimWorldOptions& o, size_t elems_per_peer) {
  return the_time(run_times(o, [&](RankContext& ctx, Stream& s) {
    auto comm = ctx.communicator(ctx.world_group(), "a2a");
    const size_t n = static_cast<size_t>(ctx.world_size);
    std::vector<size_t> counts(n, elems_per_peer);
    Buffer send = ctx.device->allocator().allocate(n * elems_per_peer * 2, MemTag::Activation, s);
    Buffer recv = ctx.device->allocator().allocate(n * elems_per_peer * 2, MemTag::Activation, s);
    comm->all_to_all_v(send.data(), counts, recv.data(), counts, DType::BF16, s);
  }));
}

TEST(SimComm, AllToAllVMatchesTheFormula) {
  const size_t c = size_t{1} << 20;  // 2 MiB of bf16 to each peer
  for (int n = 2; n <= 8; n += 2) {
    // One node: every peer over NVLink, one step.
    EXPECT_NEAR(uniform_a2a_time(cluster(1, n), c),
                (n - 1.0) * c * 2 / bytes_per_s("nvlink4") + step_s("nvlink4"), 1e-12);
    // Two nodes: n/2 peers over the NIC (the slow part), a step at the NIC's latency.
    const double nic = n / 2.0 * c * 2 / bytes_per_s("eth_100g");
    const double nvl = (n / 2.0 - 1.0) * c * 2 / bytes_per_s("nvlink4");
    EXPECT_NEAR(uniform_a2a_time(cluster(2, n / 2), c), std::max(nic, nvl) + step_s("eth_100g"),
                1e-12);
  }
}

TEST(SimComm, ConcurrentCollectivesShareOneNic) {
  // Two ranks on two nodes; two all-gathers at once on two streams: the NIC serves them one
  // after the other, so the pair takes twice one alone (and one of them ends at one alone).
  const double one = (1.0 / 2) * kBig / bytes_per_s("eth_100g");
  const double lat = step_s("eth_100g");
  std::mutex mu;
  std::vector<double> ends;
  World::run_sim(cluster(2, 1), [&](RankContext& ctx) {
    Stream& s1 = ctx.device->create_stream("gather");
    Stream& s2 = ctx.device->create_stream("reduce");
    auto c1 = ctx.communicator(ctx.world_group(), "gather");
    auto c2 = ctx.communicator(ctx.world_group(), "reduce");
    Buffer a = ctx.device->allocator().allocate(kBig, MemTag::FullParam, s1);
    Buffer b = ctx.device->allocator().allocate(kBig, MemTag::FullParam, s2);
    auto start = ctx.device->create_event();
    auto e1 = ctx.device->create_event(), e2 = ctx.device->create_event();
    start->record(s1);
    c1->all_gather(static_cast<std::byte*>(a.data()) + ctx.rank * kBig / 2, a.data(), kBig / 4,
                   DType::BF16, s1);
    c2->all_gather(static_cast<std::byte*>(b.data()) + ctx.rank * kBig / 2, b.data(), kBig / 4,
                   DType::BF16, s2);
    e1->record(s1);
    e2->record(s2);
    ctx.device->synchronize();
    std::lock_guard lock(mu);
    ends.push_back(e1->elapsed_ms_since(*start) * 1e-3);
    ends.push_back(e2->elapsed_ms_since(*start) * 1e-3);
  });
  ASSERT_EQ(ends.size(), 4u);
  std::sort(ends.begin(), ends.end());
  EXPECT_NEAR(ends[0], one + lat, 1e-6);
  EXPECT_NEAR(ends[1], one + lat, 1e-6);
  EXPECT_NEAR(ends[2], 2 * one + lat, 1e-6);
  EXPECT_NEAR(ends[3], 2 * one + lat, 1e-6);
  // On one stream they queue the same way, without the help of the NIC model.
  const double serial = the_time(run_times(cluster(2, 1), [&](RankContext& ctx, Stream& s) {
    auto c = ctx.communicator(ctx.world_group(), "gather");
    Buffer a = ctx.device->allocator().allocate(kBig, MemTag::FullParam, s);
    for (int i = 0; i < 2; ++i)
      c->all_gather(static_cast<std::byte*>(a.data()) + ctx.rank * kBig / 2, a.data(), kBig / 4,
                    DType::BF16, s);
  }));
  EXPECT_NEAR(serial, 2 * (one + lat), 1e-12);
}

// A channel keeps each (op, size, root)'s flows: collectives of two sizes, then the first
// again, in one world take what each takes alone; a broadcast from another root is its own.
TEST(SimComm, RepeatedCollectivesTakeWhatEachTakesAlone) {
  const SimWorldOptions o = cluster(2, 2, {}, 1);
  const double small = all_gather_time(o, kBig / 4), big = all_gather_time(o, kBig);
  auto broadcast_time = [&](int root, int times) {
    return the_time(run_times(o, [&](RankContext& ctx, Stream& s) {
      auto comm = ctx.communicator(ctx.world_group(), "bcast");
      Buffer buf = ctx.device->allocator().allocate(kBig, MemTag::CommBuffer, s);
      for (int i = 0; i < times; ++i)
        comm->broadcast(buf.data(), buf.data(), kBig / 2, DType::BF16, root, s);
      s.synchronize();
    }));
  };
  const double sequence = the_time(run_times(o, [&](RankContext& ctx, Stream& s) {
    auto comm = ctx.communicator(ctx.world_group(), "gather");
    Buffer send = ctx.device->allocator().allocate(kBig / 4, MemTag::CommBuffer, s);
    Buffer recv = ctx.device->allocator().allocate(kBig, MemTag::CommBuffer, s);
    for (size_t total : {kBig / 4, kBig, kBig / 4})
      comm->all_gather(send.data(), recv.data(), total / 4 / 2, DType::BF16, s);
    s.synchronize();
  }));
  EXPECT_NEAR(sequence, 2 * small + big, 1e-12);
  const double root0 = broadcast_time(0, 1), root3 = broadcast_time(3, 1);
  const double both = the_time(run_times(o, [&](RankContext& ctx, Stream& s) {
    auto comm = ctx.communicator(ctx.world_group(), "bcast");
    Buffer buf = ctx.device->allocator().allocate(kBig, MemTag::CommBuffer, s);
    comm->broadcast(buf.data(), buf.data(), kBig / 2, DType::BF16, 0, s);
    comm->broadcast(buf.data(), buf.data(), kBig / 2, DType::BF16, 3, s);
    s.synchronize();
  }));
  EXPECT_NEAR(both, root0 + root3, 1e-12);
  EXPECT_NEAR(broadcast_time(3, 2), 2 * root3, 1e-12);
}

// The same for all-to-all-v, whose flows follow from the present members' send counts: two
// patterns, then the first again; with representative ranks too (absent ones copy them).
TEST(SimComm, RepeatedAllToAllsTakeWhatEachTakesAlone) {
  for (std::vector<int> present : {std::vector<int>{}, std::vector<int>{0, 1}}) {
    const SimWorldOptions o = cluster(2, 2, present, 1);
    auto a2a_time = [&](const std::vector<int>& patterns) {
      return the_time(run_times(o, [&](RankContext& ctx, Stream& s) {
        auto comm = ctx.communicator(ctx.world_group(), "a2a");
        Buffer send = ctx.device->allocator().allocate(kBig, MemTag::CommBuffer, s);
        Buffer recv = ctx.device->allocator().allocate(kBig, MemTag::CommBuffer, s);
        for (int k : patterns) {  // pattern k: rank r sends (1 + k + r + p) << 16 to p
          std::vector<size_t> out(4), in(4);
          for (size_t p = 0; p < 4; ++p) {
            out[p] = (1 + k + static_cast<size_t>(ctx.rank) + p) << 16;
            in[p] = (1 + k + p + static_cast<size_t>(ctx.rank)) << 16;
          }
          comm->all_to_all_v(send.data(), out, recv.data(), in, DType::BF16, s);
        }
        s.synchronize();
      }));
    };
    const double first = a2a_time({0}), second = a2a_time({5});
    ASSERT_NE(first, second);
    EXPECT_NEAR(a2a_time({0, 5, 0}), 2 * first + second, 1e-12) << present.size();
  }
}

// What reserve() places of a world ring on 2 nodes with node 1 not modelled: node 0's flows;
// reserving that part ends where reserving the whole does.
TEST(SimComm, ModelledPartReservesLikeTheWhole) {
  const SimNetworkSpec spec = topology_network(SimTopology{2, 4, "nvlink4", "eth_100g", 2});
  CollectiveShape shape;
  shape.op = CollectiveOp::AllGather;
  shape.ranks = {0, 1, 2, 3, 4, 5, 6, 7};
  shape.size_bytes = 1e8;
  const Traffic whole = choose_traffic(spec, shape, nullptr);
  PortTimelines a(spec), b(spec);
  a.model_only_nodes({1, 0});
  b.model_only_nodes({1, 0});
  const Traffic part = a.modelled_part(whole);
  ASSERT_LT(part.flows.size(), whole.flows.size());
  ASSERT_FALSE(part.flows.empty());
  EXPECT_EQ(part.latency_s, whole.latency_s);
  for (const Flow& f : part.flows)
    EXPECT_LT(f.rank, f.tier == Tier::InterNode ? 2 : 4) << "a flow of node 1";
  for (double start : {0.0, 0.001, 0.5})
    EXPECT_DOUBLE_EQ(a.reserve(part, start), b.reserve(whole, start)) << start;
}

TEST(SimComm, PortTimelinesFillTheEarliestGap) {
  SimNetworkSpec spec;
  spec.tiers.link_gbps = 8.0;  // 1e9 bytes/s
  PortTimelines ports(spec);
  auto one_flow = [](double bytes) {
    return Traffic{{Flow{0, Tier::InterNode, Direction::Send, bytes}}, 0.5};
  };
  EXPECT_DOUBLE_EQ(ports.reserve(one_flow(1e9), 10.0), 11.5);  // [10, 11) + latency
  EXPECT_DOUBLE_EQ(ports.reserve(one_flow(2e9), 10.5), 13.5);  // after it: [11, 13)
  EXPECT_DOUBLE_EQ(ports.reserve(one_flow(1e9), 0.0), 1.5);    // the gap before: [0, 1)
  EXPECT_DOUBLE_EQ(ports.reserve(one_flow(9e9), 1.0), 10.5);   // exactly fills [1, 10)
  EXPECT_DOUBLE_EQ(ports.reserve(one_flow(1e9), 0.0), 14.5);   // busy until 13: [13, 14)
  // Another port (the receive side) is free.
  EXPECT_DOUBLE_EQ(
      ports.reserve(Traffic{{Flow{0, Tier::InterNode, Direction::Recv, 1e9}}, 0.0}, 0.0), 1.0);
}

TEST(SimComm, BackedBuffersMoveRealValues) {
  World::run_sim(cluster(1, 4), [&](RankContext& ctx) {
    Stream& s = ctx.device->create_stream("comm");
    auto comm = ctx.communicator(ctx.world_group(), "small");
    Buffer buf = ctx.device->allocator().allocate(64, MemTag::Other, s);
    Buffer out = ctx.device->allocator().allocate(64, MemTag::Other, s);
    float v = static_cast<float>(ctx.rank + 1);
    ctx.device->memcpy_async(buf.data(), &v, sizeof v, s);
    comm->all_reduce(buf.data(), out.data(), 1, DType::F32, ReduceOp::Sum, s);
    float sum = 0;
    ctx.device->memcpy_async(&sum, out.data(), sizeof sum, s);
    s.synchronize();
    EXPECT_EQ(sum, 10.0f);
    // host_exchange (the trainer's per-step words) works on simulated devices.
    const int64_t mine[2] = {ctx.rank, 100 + ctx.rank};
    const std::vector<int64_t> all = all_gather_words(*ctx.device, s, *comm, mine);
    ASSERT_EQ(all.size(), 8u);
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(all[2 * r], r);
      EXPECT_EQ(all[2 * r + 1], 100 + r);
    }
    // all_to_all_v: rank r sends r * 10 + p to p.
    int32_t send[4], recv[4] = {-1, -1, -1, -1};
    for (int p = 0; p < 4; ++p) send[p] = ctx.rank * 10 + p;
    Buffer dsend = ctx.device->allocator().allocate(16, MemTag::Other, s);
    Buffer drecv = ctx.device->allocator().allocate(16, MemTag::Other, s);
    ctx.device->memcpy_async(dsend.data(), send, 16, s);
    const std::vector<size_t> ones(4, 1);
    comm->all_to_all_v(dsend.data(), ones, drecv.data(), ones, DType::I32, s);
    ctx.device->memcpy_async(recv, drecv.data(), 16, s);
    s.synchronize();
    for (int p = 0; p < 4; ++p) EXPECT_EQ(recv[p], p * 10 + ctx.rank);
  });
}

TEST(SimComm, AbsentMembersCopyPresentOnes) {
  // World 8, ranks 0 and 4 present: the absent 1, 2, 3, 5, 6, 7 copy 0, 4, 0, 4, 0, 4.
  World::run_sim(cluster(2, 4, {0, 4}), [&](RankContext& ctx) {
    ASSERT_EQ(ctx.world_size, 8);
    Stream& s = ctx.device->create_stream("comm");
    auto comm = ctx.communicator(ctx.world_group(), "small");
    Buffer buf = ctx.device->allocator().allocate(64, MemTag::Other, s);
    Buffer all = ctx.device->allocator().allocate(64, MemTag::Other, s);
    const float v = static_cast<float>(ctx.rank + 1);  // 1 and 5
    ctx.device->memcpy_async(buf.data(), &v, sizeof v, s);
    comm->all_gather(buf.data(), all.data(), 1, DType::F32, s);
    comm->all_reduce(buf.data(), buf.data(), 1, DType::F32, ReduceOp::Sum, s);
    float gathered[8], sum = 0;
    ctx.device->memcpy_async(gathered, all.data(), sizeof gathered, s);
    ctx.device->memcpy_async(&sum, buf.data(), sizeof sum, s);
    s.synchronize();
    const float want[8] = {1, 1, 5, 1, 5, 5, 1, 5};
    for (int p = 0; p < 8; ++p) EXPECT_EQ(gathered[p], want[p]) << p;
    EXPECT_EQ(sum, 4 * (1.0f + 5.0f));
  });
}

// A symmetric program: compute, a world all-gather, a node all-reduce, a world all-to-all.
void symmetric_program(RankContext& ctx, Stream& comm_stream) {
  Stream& compute = ctx.device->create_stream("compute");
  const int per_node = 4;
  const int node = ctx.rank / per_node;
  ProcessGroup node_group{"node" + std::to_string(node), {}};
  for (int r = 0; r < per_node; ++r) node_group.ranks.push_back(node * per_node + r);
  auto world = ctx.communicator(ctx.world_group(), "gather");
  auto local = ctx.communicator(node_group, "reduce");
  auto a2a = ctx.communicator(ctx.world_group(), "a2a");
  TensorBuffer a(*ctx.device, DType::BF16, {2048, 2048}, MemTag::Activation, compute);
  TensorBuffer c(*ctx.device, DType::BF16, {2048, 2048}, MemTag::Activation, compute);
  Buffer full = ctx.device->allocator().allocate(kBig, MemTag::FullParam, comm_stream);
  auto ready = ctx.device->create_event(), done = ctx.device->create_event();
  for (int layer = 0; layer < 3; ++layer) {
    world->all_gather(static_cast<std::byte*>(full.data()) + ctx.rank * kBig / 8, full.data(),
                      kBig / 16, DType::BF16, comm_stream);
    ready->record(comm_stream);
    compute.wait(*ready);
    ctx.device->ops().gemm(compute, GemmArgs{a, a, c});
    done->record(compute);
    local->all_reduce(full.data(), full.data(), kBig / 32, DType::BF16, ReduceOp::Sum, comm_stream);
    comm_stream.wait(*done);
    std::vector<size_t> counts(8, size_t{1} << 18);
    a2a->all_to_all_v(a.view().data(), counts, c.view().data(), counts, DType::BF16, comm_stream);
  }
}

TEST(SimComm, RepresentativeRanksGiveTheFullWorldsTimes) {
  for (int nics : {1, 2, 4}) {  // NICs per node: shared by ranks, or one per GPU
    SimWorldOptions full = cluster(2, 4, {}, nics);
    full.gpu.launch_s = 4e-6;
    SimWorldOptions rep = full;
    rep.present = {0, 4};
    const std::map<int, double> all = run_times(full, symmetric_program);
    const std::map<int, double> two = run_times(rep, symmetric_program);
    // Node 0 alone present: node 1's ports are not modelled (its symmetric copy).
    rep.present = {0, 1, 2, 3};
    const std::map<int, double> node0 = run_times(rep, symmetric_program);
    ASSERT_EQ(all.size(), 8u);
    ASSERT_EQ(two.size(), 2u);
    EXPECT_NEAR(node0.at(0), all.at(0), 1e-12) << nics;
    EXPECT_NEAR(node0.at(3), all.at(3), 1e-12) << nics;
    // The link was paid: the world all-gathers' bytes between nodes, over the node's NICs.
    EXPECT_GT(two.at(0), 3.0 * kBig * 7 / 8 / nics / bytes_per_s("eth_100g")) << nics;
    EXPECT_NEAR(two.at(0), all.at(0), 1e-12) << nics;
    EXPECT_NEAR(two.at(4), all.at(4), 1e-12) << nics;
    EXPECT_NEAR(all.at(0), all.at(5), 1e-12) << nics;  // symmetric: every rank alike
  }
}

TEST(SimComm, AMissingMemberTimesOutNamingTheOpAndGroup) {
  SimWorldOptions o = cluster(1, 4);
  o.comm.timeout = std::chrono::milliseconds(300);
  try {
    World::run_sim(o, [&](RankContext& ctx) {
      Stream& s = ctx.device->create_stream("comm");
      auto comm = ctx.communicator(ctx.world_group(), "reduce");
      Buffer buf = ctx.device->allocator().allocate(kBig, MemTag::Grad, s);
      if (ctx.rank != 3)
        comm->all_reduce(buf.data(), buf.data(), kBig / 4, DType::F32, ReduceOp::Sum, s);
      s.synchronize();
    });
    FAIL() << "expected a timeout";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("all_reduce"), std::string::npos) << what;
    EXPECT_NE(what.find("world{0,1,2,3}"), std::string::npos) << what;
    EXPECT_NE(what.find("present ranks {3}"), std::string::npos) << what;
  }
}

TEST(SimComm, BadClustersAreRefusedByName) {
  SimWorldOptions o = cluster(1, 2);
  o.topology.inter_link = "carrier_pigeon";
  try {
    World::run_sim(o, [](RankContext&) {});
    FAIL() << "expected an error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown link 'carrier_pigeon' (known: nvlink4"),
              std::string::npos)
        << e.what();
  }
  o = cluster(1, 2);
  o.topology.inter_link = "nvlink4";
  EXPECT_THROW(World::run_sim(o, [](RankContext&) {}), UserError);
  o = cluster(2, 2);
  o.world_size = 8;
  EXPECT_THROW(World::run_sim(o, [](RankContext&) {}), UserError);
  o = cluster(2, 2, {0, 9});
  EXPECT_THROW(World::run_sim(o, [](RankContext&) {}), UserError);
  o = cluster(2, 2, {}, -1);
  try {
    World::run_sim(o, [](RankContext&) {});
    FAIL() << "expected an error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cluster: nics_per_node must be >= 0"), std::string::npos)
        << e.what();
  }
}

TEST(SimComm, RanksOnASimulatedDeviceSeeTheVirtualWorld) {
  std::mutex mu;
  std::vector<int> ranks;
  World::run_sim(cluster(4, 8, {3, 17}), [&](RankContext& ctx) {
    EXPECT_EQ(ctx.world_size, 32);
    EXPECT_EQ(ctx.device->kind(), DeviceKind::Sim);
    EXPECT_STREQ(device_kind_name(ctx.device->kind()), "sim");
    std::lock_guard lock(mu);
    ranks.push_back(ctx.rank);
  });
  std::sort(ranks.begin(), ranks.end());
  EXPECT_EQ(ranks, (std::vector<int>{3, 17}));
}

}  // namespace
}  // namespace moezero::comm
