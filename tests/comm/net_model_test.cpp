// tests/comm/net_model_test.cpp — the network cost model (comm/net_model.h): bytes per port of
// each collective and processor-shared completion times. Modelled times only, no wall clock.
#include "comm/net_model.h"

#include <gtest/gtest.h>

#include "comm/local/emulated_network.h"

namespace moezero::comm {
namespace {

// 8 Gbit/s = 1e9 bytes/s: one byte per nanosecond keeps the expected times readable.
constexpr double kGbps = 8.0;
constexpr double kBytesPerS = 1e9;
// Relative tolerance of floating-point sharing arithmetic.
constexpr double kRel = 1e-9;

CommEmulation one_tier(double latency_us = 0.0) {
  CommEmulation e;
  e.link_gbps = kGbps;
  e.latency_us = latency_us;
  return e;
}

Traffic one_flow(int rank, Direction dir, double bytes, double latency_s = 0.0) {
  return Traffic{{Flow{rank, Tier::InterNode, dir, bytes}}, latency_s};
}

double run_alone(NetworkModel& m, NetworkModel::Id id) {
  m.advance_to(m.projected_completion_s(id));
  EXPECT_TRUE(m.finished(id));
  return m.completion_s(id);
}

TEST(NetModel, OneTransferTakesBytesOverBandwidthPlusLatency) {
  NetworkModel m(one_tier());
  const auto id = m.start(1.0, one_flow(0, Direction::Send, 4e6, 20e-6));
  EXPECT_NEAR(run_alone(m, id), 1.0 + 4e6 / kBytesPerS + 20e-6, kRel);
}

TEST(NetModel, TwoTransfersOnOneNicTakeTheSumOfTheirTimes) {
  NetworkModel m(one_tier());
  const auto a = m.start(0.0, one_flow(0, Direction::Send, 2e6));
  const auto b = m.start(0.0, one_flow(0, Direction::Send, 6e6));
  m.advance_to(1.0);
  // Shared equally: a finishes after 2 * 2e6 bytes of port time, b after all 8e6.
  EXPECT_NEAR(m.completion_s(a), 4e6 / kBytesPerS, kRel);
  EXPECT_NEAR(m.completion_s(b), 8e6 / kBytesPerS, kRel);
}

TEST(NetModel, SendAndReceiveDoNotShare) {
  NetworkModel m(one_tier());
  const auto a = m.start(0.0, one_flow(0, Direction::Send, 4e6));
  const auto b = m.start(0.0, one_flow(0, Direction::Recv, 4e6));
  m.advance_to(1.0);
  EXPECT_NEAR(m.completion_s(a), 4e-3, kRel);
  EXPECT_NEAR(m.completion_s(b), 4e-3, kRel);
}

TEST(NetModel, DifferentRanksDoNotShare) {
  NetworkModel m(one_tier());
  const auto a = m.start(0.0, one_flow(0, Direction::Send, 4e6));
  const auto b = m.start(0.0, one_flow(1, Direction::Send, 4e6));
  m.advance_to(1.0);
  EXPECT_NEAR(m.completion_s(a), 4e-3, kRel);
  EXPECT_NEAR(m.completion_s(b), 4e-3, kRel);
}

TEST(NetModel, AFlowJoiningMidwaySlowsTheFirstDown) {
  NetworkModel m(one_tier());
  const auto a = m.start(0.0, one_flow(0, Direction::Send, 4e6));
  EXPECT_NEAR(m.projected_completion_s(a), 4e-3, kRel);
  // At 1 ms, a has 3e6 bytes left; b joins with 1e6: both at half rate until b is done at
  // 3 ms (a then has 2e6 left), a alone after that: done at 5 ms.
  const auto b = m.start(1e-3, one_flow(0, Direction::Send, 1e6));
  EXPECT_NEAR(m.projected_completion_s(a), 5e-3, kRel);
  m.advance_to(1.0);
  EXPECT_NEAR(m.completion_s(b), 3e-3, kRel);
  EXPECT_NEAR(m.completion_s(a), 5e-3, kRel);
  EXPECT_DOUBLE_EQ(m.start_s(b), 1e-3);
  m.release(a);
  m.release(b);
  EXPECT_EQ(m.active_flows(), 0u);
}

TEST(NetModel, RingAllGatherMovesNMinusOneOverNAndPaysNMinusOneSteps) {
  const CommEmulation spec = one_tier(10.0);
  CollectiveShape s{CollectiveOp::AllGather, {0, 1, 2, 3}, 8e6, 0, {}};
  const Traffic t = collective_traffic(spec, s);
  ASSERT_EQ(t.flows.size(), 8u);  // send and receive of each rank
  for (const Flow& f : t.flows) EXPECT_DOUBLE_EQ(f.bytes, 6e6);
  EXPECT_NEAR(t.latency_s, 3 * 10e-6, kRel);
  NetworkModel m(spec);
  EXPECT_NEAR(run_alone(m, m.start(0.0, t)), 6e-3 + 30e-6, kRel);

  s.op = CollectiveOp::AllReduce;
  const Traffic ar = collective_traffic(spec, s);
  for (const Flow& f : ar.flows) EXPECT_DOUBLE_EQ(f.bytes, 12e6);
  EXPECT_NEAR(ar.latency_s, 6 * 10e-6, kRel);
}

TEST(NetModel, BroadcastChainsFromTheRoot) {
  CollectiveShape s{CollectiveOp::Broadcast, {0, 1, 2}, 1e6, 1, {}};
  const Traffic t = collective_traffic(one_tier(), s);
  double sent[3] = {}, recv[3] = {};
  for (const Flow& f : t.flows) (f.dir == Direction::Send ? sent : recv)[f.rank] += f.bytes;
  // Chain 1 -> 2 -> 0: the root receives nothing, the last rank sends nothing.
  EXPECT_EQ(sent[1], 1e6);
  EXPECT_EQ(sent[2], 1e6);
  EXPECT_EQ(sent[0], 0.0);
  EXPECT_EQ(recv[1], 0.0);
  EXPECT_EQ(recv[0], 1e6);
}

TEST(NetModel, TwoTierAllGatherFollowsTheSlowTier) {
  CommEmulation spec = one_tier(20.0);  // NIC: 1e9 bytes/s, 20 us
  spec.ranks_per_node = 2;
  spec.intra_node_gbps = 80.0;  // 10x faster inside a node
  spec.intra_node_latency_us = 2.0;
  // Ranks 0,1 | 2,3: hops 0->1 and 2->3 intra, 1->2 and 3->0 over the NIC.
  EXPECT_EQ(tier_between(spec, 0, 1), Tier::IntraNode);
  EXPECT_EQ(tier_between(spec, 1, 2), Tier::InterNode);
  const CollectiveShape s{CollectiveOp::AllGather, {0, 1, 2, 3}, 8e6, 0, {}};
  NetworkModel m(spec);
  const double nic_time = 6e6 / kBytesPerS + 3 * 20e-6;
  EXPECT_NEAR(run_alone(m, m.start(0.0, collective_traffic(spec, s))), nic_time, kRel);

  // Inside one node only: the fast tier sets the time.
  const CollectiveShape in_node{CollectiveOp::AllGather, {2, 3}, 8e6, 0, {}};
  NetworkModel m2(spec);
  EXPECT_NEAR(run_alone(m2, m2.start(0.0, collective_traffic(spec, in_node))),
              4e6 / (10 * kBytesPerS) + 2e-6, kRel);
}

// comm_emulation.nics_per_node (comm/local/emulated_network.h): with one NIC per GPU a world
// ring's node crossings spread over both NICs of each node, as NCCL's channels do, so the
// NIC-bound all-gather takes half the time of the one-ring model; 0 keeps net_model's flows.
TEST(NetModel, EmulatedNicsPerNodeSpreadARingOverTheNodesNics) {
  CommEmulation spec = one_tier();
  spec.ranks_per_node = 2;
  spec.intra_node_gbps = 80.0;
  const CollectiveShape s{CollectiveOp::AllGather, {0, 1, 2, 3}, 8e6, 0, {}};
  NetworkModel one(spec);
  EXPECT_NEAR(run_alone(one, one.start(0.0, emulated_traffic(spec, s))), 6e6 / kBytesPerS, kRel);
  spec.nics_per_node = 2;
  NetworkModel two(spec);
  EXPECT_NEAR(run_alone(two, two.start(0.0, emulated_traffic(spec, s))), 3e6 / kBytesPerS, kRel);
  // A strided group (one member per node) has one NIC per node either way.
  const CollectiveShape strided{CollectiveOp::AllGather, {0, 2}, 8e6, 0, {}};
  NetworkModel m3(spec);
  EXPECT_NEAR(run_alone(m3, m3.start(0.0, emulated_traffic(spec, strided))), 4e6 / kBytesPerS,
              kRel);
}

TEST(NetModel, AllToAllUnevenTheBusiestRankSetsTheTime) {
  const CommEmulation spec = one_tier(5.0);
  // Rank 2 receives 3e6 from rank 0 and 1e6 from rank 1: its receive side is the busiest.
  CollectiveShape s{CollectiveOp::AllToAllV, {0, 1, 2}, 0.0, 0, {}};
  s.a2a_bytes = {{9e9, 0.5e6, 3e6}, {0.5e6, 0.0, 1e6}, {0.2e6, 0.1e6, 7e9}};
  const Traffic t = collective_traffic(spec, s);
  EXPECT_NEAR(t.latency_s, 5e-6, kRel);
  NetworkModel m(spec);
  EXPECT_NEAR(run_alone(m, m.start(0.0, t)), 4e6 / kBytesPerS + 5e-6, kRel);
}

TEST(NetModel, ZeroBandwidthIsLatencyOnlyAndSingleRankIsFree) {
  CommEmulation spec;
  spec.latency_us = 7.0;
  NetworkModel m(spec);
  const CollectiveShape s{CollectiveOp::AllGather, {0, 1}, 1e9, 0, {}};
  EXPECT_NEAR(run_alone(m, m.start(0.0, collective_traffic(spec, s))), 7e-6, kRel);
  const CollectiveShape alone{CollectiveOp::AllReduce, {3}, 1e9, 0, {}};
  const Traffic t = collective_traffic(spec, alone);
  EXPECT_TRUE(t.flows.empty());
  EXPECT_EQ(t.latency_s, 0.0);
}

}  // namespace
}  // namespace moezero::comm
