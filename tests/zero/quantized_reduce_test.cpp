// tests/zero/quantized_reduce_test.cpp — the two-hop gradient reduce-scatter (zero/
// quantized_reduce.h) against the one-hop reduce-scatter the engine issues otherwise, at world
// 4 on nodes of 1, 2 and 4 ranks: the node split of groups; the full-precision hop's sums (the
// same bits where the sum order is the same, fp32 re-association otherwise); the engine giving
// the same training with two hops; the int8 hop's error bound and its inter-node bytes.
#include "zero/quantized_reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "comm/world.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/process_groups.h"
#include "zero/zero_engine.h"

namespace moezero {
namespace {

constexpr int kWorld = 4;
constexpr int64_t kCols = 3000;  // elements of each rank's shard: not a multiple of the block

// Rank `rank`'s gradient part destined to group rank `dest`: varied signs and magnitudes.
float value(int rank, int dest, int64_t j) {
  const double x = std::sin(0.731 * double(j) + 1.9 * rank + 0.37 * dest);
  const double mag = std::pow(10.0, double(j % 7) - 3.0);  // 1e-3 .. 1e3
  return static_cast<float>(x * mag);
}

TEST(NodeSplit, WorldAndStridedGroups) {
  const ProcessGroup world = make_world_group(4);
  NodeSplit s = node_split(world, 2, 3);
  EXPECT_EQ(s.nodes, 2);
  EXPECT_EQ(s.per_node, 2);
  EXPECT_EQ(s.intra.ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(s.cross.ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(s.intra.name, "world.node1");
  EXPECT_EQ(s.cross.name, "world.x1");
  s = node_split(world, 0, 2);  // one tier: every rank its own node
  EXPECT_EQ(s.per_node, 1);
  EXPECT_EQ(s.cross.ranks, (std::vector<int>{0, 1, 2, 3}));
  s = node_split(world, 4, 1);  // one node
  EXPECT_EQ(s.nodes, 1);
  EXPECT_EQ(s.intra.ranks, (std::vector<int>{0, 1, 2, 3}));
  // EDP groups are strided: {1, 3} at EP 2 on nodes of 2 is one member per node.
  const ProcessGroups pgs(8, 2, 4);
  s = node_split(pgs.edp_group_of(3), 2, 3);
  EXPECT_EQ(s.nodes, 4);
  EXPECT_EQ(s.per_node, 1);
  s = node_split(pgs.edp_group_of(3), 4, 3);  // {1, 3, 5, 7}: two per node of 4
  EXPECT_EQ(s.per_node, 2);
  EXPECT_EQ(s.intra.ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(s.cross.ranks, (std::vector<int>{3, 7}));
  // EP 2 on nodes of 3: {0, 2, 4} has two ranks on node 0 and one on node 1.
  const ProcessGroups uneven(6, 2, 2);
  EXPECT_NE(node_split_error(uneven.edp_group_of(0), 3).find("2 rank(s) on node 0 but 1 on node 1"),
            std::string::npos)
      << node_split_error(uneven.edp_group_of(0), 3);
  EXPECT_THROW(node_split(uneven.edp_group_of(0), 3, 0), UserError);
  // Members of one node apart in group order.
  EXPECT_FALSE(node_split_error(ProcessGroup{"g", {0, 2, 1, 3}}, 2).empty());
}

struct ReduceOut {
  std::vector<std::vector<float>> one_hop, two_hop;   // per rank: its shard (kCols)
  std::vector<comm::LinkBytes> one_links, two_links;  // per rank: sent bytes of each
  std::vector<uint64_t> wire;                         // per rank: reduce_scatter's return
  std::vector<size_t> comm_peak;  // per rank: peak comm-buffer bytes during the two-hop call
};

// Every rank reduce-scatters the same rows once in one hop over the world and once in two hops
// over nodes of `rpn` ranks (WorldOptions' ranks_per_node, so the link tally splits by tier).
ReduceOut reduce_both(int rpn, InterNodeHop hop, int64_t block = 2048) {
  ReduceOut out;
  out.one_hop.resize(kWorld);
  out.two_hop.resize(kWorld);
  out.one_links.resize(kWorld);
  out.two_links.resize(kWorld);
  out.wire.resize(kWorld);
  out.comm_peak.resize(kWorld);
  std::mutex mu;
  comm::WorldOptions wo;
  wo.comm.timeout = std::chrono::seconds(60);
  wo.comm.emulation.ranks_per_node = rpn;
  comm::World::run(
      kWorld,
      [&](comm::RankContext& ctx) {
        Device& dev = *ctx.device;
        Stream& s = dev.create_stream("reduce");
        const ProcessGroup world = ctx.world_group();
        auto flat = ctx.communicator(world, "reduce");
        const NodeSplit split = node_split(world, rpn, ctx.rank);
        auto intra = ctx.communicator(split.intra, "reduce");
        auto cross = ctx.communicator(split.cross, "reduce");
        const TwoHopReduce two(*intra, *cross, hop, block);
        std::vector<float> rows(kWorld * kCols), permuted(kWorld * kCols);
        for (int d = 0; d < kWorld; ++d)
          for (int64_t j = 0; j < kCols; ++j) {
            rows[size_t(d * kCols + j)] = value(ctx.rank, d, j);
            permuted[size_t(two.send_row(d) * kCols + j)] = value(ctx.rank, d, j);
          }
        std::vector<float> a(kCols), b(kCols);
        flat->reduce_scatter(rows.data(), a.data(), kCols, DType::F32, ReduceOp::Sum, s);
        s.synchronize();
        const comm::LinkBytes after_one = ctx.world->link_bytes(ctx.rank);
        const Tensor send(permuted.data(), DType::F32, Shape{kWorld * kCols}, &dev);
        const Tensor recv(b.data(), DType::F32, Shape{kCols}, &dev);
        dev.allocator().reset_peak();
        const uint64_t wire = two.reduce_scatter(dev, s, send, recv);
        s.synchronize();
        const size_t comm_peak =
            dev.allocator().stats().peak_bytes[static_cast<size_t>(MemTag::CommBuffer)];
        const comm::LinkBytes after_two = ctx.world->link_bytes(ctx.rank);
        std::lock_guard lock(mu);
        const auto r = size_t(ctx.rank);
        out.one_hop[r] = a;
        out.two_hop[r] = b;
        out.one_links[r] = after_one;
        out.two_links[r] = {after_two.intra_node_bytes - after_one.intra_node_bytes,
                            after_two.inter_node_bytes - after_one.inter_node_bytes};
        out.wire[r] = wire;
        out.comm_peak[r] = comm_peak;
      },
      wo);
  return out;
}

// Full-precision hop: with one member per node (rpn 1) or one node (rpn 4) the sums run in the
// one-hop order: the same bits. With 2 nodes of 2, (x0 + x1) + (x2 + x3) against
// ((x0 + x1) + x2) + x3: each fp32 sum of n terms is within (n - 1) eps sum|x| of the exact
// one, so they differ by at most 2 (n - 1) eps sum|x| (eps = 2^-24).
TEST(TwoHopReduce, FullPrecisionHopMatchesOneHop) {
  for (int rpn : {1, 2, 4}) {
    const ReduceOut o = reduce_both(rpn, InterNodeHop::FullPrecision);
    for (int r = 0; r < kWorld; ++r) {
      int64_t differing = 0;
      for (int64_t j = 0; j < kCols; ++j) {
        const float a = o.one_hop[size_t(r)][size_t(j)], b = o.two_hop[size_t(r)][size_t(j)];
        double sum_abs = 0;
        for (int q = 0; q < kWorld; ++q) sum_abs += std::abs(double(value(q, r, j)));
        if (rpn != 2) {
          ASSERT_EQ(a, b) << "rpn " << rpn << " rank " << r << " element " << j;
        } else {
          ASSERT_LE(std::abs(double(a) - b), 2.0 * (kWorld - 1) * 0x1p-24 * sum_abs)
              << "rank " << r << " element " << j;
        }
        differing += a != b;
      }
      if (rpn == 2) {
        EXPECT_GT(differing, 0) << "the test cannot see the other sum order";
      }
    }
  }
}

// Int8 hop: rank r = m L + l gets its own node's sum exactly and every other node m''s sum
// p_m' through int8 with one scale s_b = max|p_m'| / 127 per block of `block` elements:
// |two-hop - exact| <= sum_{m' != m} s_b / 2 (times 1 + 1e-5 for the fp32 rounding of x / s_b)
// plus the fp32 sums' 2 (n - 1) eps sum|x|. One node (rpn 4) quantises nothing: the one-hop
// bits. Between the nodes each rank sends one int8 chunk per other node instead of its ring's
// fp32 shares: on 2 nodes of 2 the inter-node bytes fall from 2 x 3 shards (ranks 1 and 3 feed
// the ring across the nodes) to 4 chunks of 2 scales + 3000 values.
TEST(TwoHopReduce, Int8HopWithinHalfAStepPerOtherNode) {
  constexpr int64_t kBlock = 2048;
  for (int rpn : {1, 2, 4}) {
    const ReduceOut o = reduce_both(rpn, InterNodeHop::Int8, kBlock);
    const int L = rpn, M = kWorld / L;
    int64_t differing = 0;
    for (int r = 0; r < kWorld; ++r) {
      const int m = r / L;
      // The node sums of row r, as the intra-node reduce-scatter makes them (fp32, node order).
      std::vector<std::vector<float>> node_sum(size_t(M), std::vector<float>(kCols, 0.0f));
      for (int n = 0; n < M; ++n)
        for (int64_t j = 0; j < kCols; ++j) {
          float acc = value(n * L, r, j);
          for (int i = 1; i < L; ++i) acc += value(n * L + i, r, j);
          node_sum[size_t(n)][size_t(j)] = acc;
        }
      for (int64_t j = 0; j < kCols; ++j) {
        const float got = o.two_hop[size_t(r)][size_t(j)];
        if (M == 1) {
          ASSERT_EQ(got, o.one_hop[size_t(r)][size_t(j)]) << "one node: rank " << r;
          continue;
        }
        double exact = 0, sum_abs = 0, bound = 0;
        for (int q = 0; q < kWorld; ++q) {
          exact += value(q, r, j);
          sum_abs += std::abs(double(value(q, r, j)));
        }
        const int64_t b0 = j / kBlock * kBlock, b1 = std::min(b0 + kBlock, kCols);
        for (int n = 0; n < M; ++n) {
          if (n == m) continue;
          double mx = 0;
          for (int64_t i = b0; i < b1; ++i)
            mx = std::max(mx, std::abs(double(node_sum[size_t(n)][size_t(i)])));
          bound += mx / 127.0 / 2.0 * (1.0 + 1e-5);
        }
        bound += 2.0 * (kWorld - 1) * 0x1p-24 * sum_abs;
        ASSERT_LE(std::abs(got - exact), bound) << "rpn " << rpn << " rank " << r << " element "
                                                << j << ": " << got << " against " << exact;
        differing += got != o.one_hop[size_t(r)][size_t(j)];
      }
    }
    if (M > 1) {
      EXPECT_GT(differing, 0) << "rpn " << rpn << ": nothing was quantised?";
    }
  }
}

// The int8 hop's own state: with one member per node the chunks it receives land in the
// bucket's bytes (dead once this node's row is summed and the others quantised), so its only
// buffer is the chunks it sends, (M - 1) of them; with two per node, that and the node sums
// (the intra-node reduce-scatter's output, M rows, whose bytes then take the received chunks).
TEST(TwoHopReduce, Int8HopReceivesIntoTheBucket) {
  const int64_t blocks = (kCols + 2047) / 2048;
  const size_t chunk = size_t(blocks * 4 + (kCols + 3) / 4 * 4);
  for (int rpn : {1, 2}) {
    const ReduceOut o = reduce_both(rpn, InterNodeHop::Int8, 2048);
    const int M = kWorld / rpn;
    const size_t node_sums = rpn > 1 ? size_t(M) * kCols * 4 : 0;
    for (int r = 0; r < kWorld; ++r)
      EXPECT_EQ(o.comm_peak[size_t(r)], node_sums + size_t(M - 1) * chunk)
          << "rpn " << rpn << " rank " << r;
  }
}

TEST(TwoHopReduce, Int8HopSendsFewerInterNodeBytes) {
  const ReduceOut o = reduce_both(2, InterNodeHop::Int8, 2048);
  const uint64_t shard = kCols * 4, chunk = 2 * 4 + kCols;  // 2 fp32 scales + int8 values
  uint64_t one = 0, two = 0;
  for (int r = 0; r < kWorld; ++r) {
    const bool feeds_other_node = r % 2 == 1;  // ring 0 -> 1 -> 2 -> 3 -> 0
    EXPECT_EQ(o.one_links[size_t(r)].inter_node_bytes, feeds_other_node ? 3 * shard : 0u);
    EXPECT_EQ(o.two_links[size_t(r)].inter_node_bytes, chunk) << "rank " << r;
    EXPECT_EQ(o.two_links[size_t(r)].intra_node_bytes, 2 * shard) << "rank " << r;
    EXPECT_EQ(o.wire[size_t(r)], 2 * shard + chunk) << "rank " << r;
    one += o.one_links[size_t(r)].inter_node_bytes;
    two += o.two_links[size_t(r)].inter_node_bytes;
  }
  EXPECT_EQ(one, 6 * shard);
  EXPECT_EQ(two, 4 * chunk);
}

struct EngineRun {
  std::vector<std::vector<float>> params;  // per group, after training
  std::vector<double> norms;               // per step
  EngineCounters counters;                 // rank 0's
};

// Three steps of the quadratic objective of zero_engine_test (gradient p - t, t a function of
// (rank, step, element)) on one dense group and one small one, at world 4: one hop, or two hops
// over nodes of `rpn` ranks.
EngineRun train_engine(int stage, int rpn, bool two_hops, DType dt = DType::F32) {
  EngineRun out;
  std::mutex mu;
  comm::WorldOptions wo;
  wo.comm.timeout = std::chrono::seconds(60);
  comm::World::run(
      kWorld,
      [&](comm::RankContext& ctx) {
        Device& dev = *ctx.device;
        EngineStreams st{&dev.create_stream("compute"), &dev.create_stream("gather"),
                         &dev.create_stream("reduce")};
        const ProcessGroup wg = ctx.world_group();
        auto gather = ctx.communicator(wg, "gather");
        auto reduce = ctx.communicator(wg, "reduce");
        auto misc = ctx.communicator(wg, "misc");
        const NodeSplit split = node_split(wg, rpn, ctx.rank);
        auto intra = ctx.communicator(split.intra, "reduce");
        auto cross = ctx.communicator(split.cross, "reduce");
        std::vector<GroupSpec> groups;
        groups.push_back({"a", GroupKind::Dense, -1, -1, {{"a.w", Shape{250, 16}}}});
        groups.push_back({"b", GroupKind::Dense, -1, -1, {{"b.w", Shape{1001}}}});
        ZeroOptions opt;
        opt.zero.stage = stage;
        opt.compute_dtype = dt;
        opt.zero.param_persistence_threshold = 0;
        opt.zero.reduce_bucket_size = 6000;  // "a" alone, then "b": two buckets
        opt.inter_node_hop = InterNodeHop::FullPrecision;
        ZeroEngine eng(
            dev, st, groups,
            [&](const GroupSpec&) {
              GroupComms c{gather.get(), reduce.get()};
              if (two_hops) {
                c.reduce_intra = intra.get();
                c.reduce_cross = cross.get();
              }
              return c;
            },
            *misc, opt);
        Stream& cs = *st.compute;
        std::vector<double> norms;
        for (int step = 0; step < 3; ++step) {
          std::vector<std::vector<float>> host;
          std::vector<TensorBuffer> keep;
          for (int g = 0; g < eng.group_count(); ++g) {
            const Tensor p = eng.acquire(g, cs);
            const int64_t n = eng.layout(g).numel();
            const Tensor gr = eng.grad(g, cs);
            auto& t = host.emplace_back(size_t(n));
            for (int64_t i = 0; i < n; ++i) t[size_t(i)] = value(ctx.rank, step + g, i);
            auto& tb = keep.emplace_back(dev, DType::F32, Shape{n}, MemTag::Activation, cs);
            dev.memcpy_async(tb.view().data(), t.data(), size_t(n) * 4, cs);
            TensorBuffer pf(dev, DType::F32, Shape{n}, MemTag::Activation, cs);
            dev.ops().cast(cs, p.view_elems(0, Shape{n}), pf);
            dev.ops().axpy(cs, 0.25f, pf, gr.view_elems(0, Shape{n}));
            dev.ops().axpy(cs, -0.25f, tb, gr.view_elems(0, Shape{n}));
            eng.grad_ready(g, cs);
            eng.release(g, cs);
          }
          eng.finish_backward();
          cs.synchronize();
          norms.push_back(eng.step(AdamWHyper{0.05f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f}).grad_norm);
        }
        std::vector<std::vector<float>> params;
        for (int g = 0; g < eng.group_count(); ++g) params.push_back(eng.full_params_host(g));
        dev.synchronize();
        // The two hops ran: a node ring where a node holds several ranks, a cross-node
        // reduce-scatter where there are several nodes.
        EXPECT_EQ(intra->records().empty(), !two_hops || split.per_node == 1);
        EXPECT_EQ(cross->records().empty(), !two_hops || split.nodes == 1);
        if (ctx.rank != 0) return;
        std::lock_guard lock(mu);
        out.params = params;
        out.norms = norms;
        out.counters = eng.counters();
      },
      wo);
  return out;
}

// The engine with two full-precision hops: the same training as one hop, bit for bit where the
// sum order is the same (one member per node, one node); on 2 nodes of 2 the gradient norms
// agree to fp32 re-association (Adam's normalisation makes parameters a weaker test there).
TEST(TwoHopReduce, EngineTrainsAsOneHop) {
  for (int stage : {2, 3}) {
    const EngineRun ref = train_engine(stage, 0, false);
    for (int rpn : {1, 2, 4}) {
      const EngineRun two = train_engine(stage, rpn, true);
      const std::string what = "stage " + std::to_string(stage) + " rpn " + std::to_string(rpn);
      ASSERT_EQ(two.norms.size(), ref.norms.size());
      for (size_t s = 0; s < ref.norms.size(); ++s) {
        if (rpn == 2)
          EXPECT_NEAR(two.norms[s], ref.norms[s], 1e-6 * ref.norms[s]) << what;
        else
          EXPECT_EQ(two.norms[s], ref.norms[s]) << what;
      }
      if (rpn != 2) {
        EXPECT_EQ(two.params, ref.params) << what;
      }
      // The input bytes stay the one-hop count; in full precision the two rings' shares add up
      // to the one ring's: 3/4 of the input (2 nodes of 2: 2/4 inside, 1/4 across).
      EXPECT_EQ(two.counters.reduce_scattered_bytes, ref.counters.reduce_scattered_bytes) << what;
      EXPECT_EQ(two.counters.reduce_wire_bytes, ref.counters.reduce_wire_bytes) << what;
    }
    // One hop over 4 ranks sends 3/4 of its input.
    EXPECT_EQ(4 * ref.counters.reduce_wire_bytes, 3 * ref.counters.reduce_scattered_bytes);
  }
}

}  // namespace
}  // namespace moezero
