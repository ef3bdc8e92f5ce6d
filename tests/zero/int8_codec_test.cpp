// BlockInt8Codec (zero/int8_codec.h): the wire layout and its round trip on the CPU device, and
// the engine's quantised gathers at world sizes 3 and 4 (ZeRO++ qwZ): every rank holds the same
// full parameters, within half a quantisation step of the exact ones, the same in the step's
// second gather of a group (forward and backward), and the wire bytes follow the layout exactly.
#include "zero/int8_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "comm/world.h"
#include "core/error.h"
#include "core/ops.h"
#include "kernels/backend.h"
#include "zero/zero_engine.h"

namespace moezero {
namespace {

TEST(BlockInt8Codec, WirePartIsValuesPaddingThenScales) {
  const BlockInt8Codec c(256);
  for (DType dt : {DType::F32, DType::BF16}) {
    EXPECT_EQ(c.wire_shape(1024, dt).dtype, DType::I8);
    EXPECT_EQ(c.wire_shape(1024, dt).elems, 1024 + 4 * 4);
    EXPECT_EQ(c.wire_shape(1001, dt).elems, 1004 + 4 * 4);  // 3 bytes of padding, 4 blocks
    EXPECT_EQ(c.wire_shape(1, dt).elems, 4 + 4);
    EXPECT_EQ(c.wire_shape(0, dt).elems, 0);
  }
  EXPECT_FALSE(c.exact());
  EXPECT_FALSE(c.in_place());
  EXPECT_TRUE(IdentityCodec().exact());
  EXPECT_THROW(BlockInt8Codec(0), Error);
}

TEST(BlockInt8Codec, EncodeDecodeRoundTripsWithinHalfAStep) {
  auto dev = make_cpu_device();
  Stream& s = dev->default_stream();
  Ops& ops = dev->ops();
  const int64_t n = 1001, block = 100;
  const BlockInt8Codec c(block);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = std::sin(0.7f * float(i)) * float(1 + i % 5);
  TensorBuffer shard(*dev, DType::F32, Shape{n}, MemTag::Other, s);
  TensorBuffer wire(*dev, DType::I8, Shape{c.wire_shape(n, DType::F32).elems}, MemTag::Other, s);
  TensorBuffer back(*dev, DType::F32, Shape{n}, MemTag::Other, s);
  dev->memcpy_async(shard.view().data(), x.data(), size_t(n) * 4, s);
  ops.fill(s, wire, 99.0);  // the padding must be written, not left over
  c.encode(ops, s, shard, wire);
  c.decode(ops, s, wire, back);
  std::vector<int8_t> w(static_cast<size_t>(wire.view().numel()));
  std::vector<float> got(static_cast<size_t>(n));
  dev->memcpy_async(w.data(), wire.view().data(), w.size(), s);
  dev->memcpy_async(got.data(), back.view().data(), size_t(n) * 4, s);
  s.synchronize();
  for (int64_t i = n; i < BlockInt8Codec::scales_offset(n); ++i) EXPECT_EQ(w[size_t(i)], 0);
  for (int64_t b = 0; b * block < n; ++b) {
    float amax = 0, scale = 0;
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i)
      amax = std::max(amax, std::fabs(x[size_t(i)]));
    std::memcpy(&scale, &w[size_t(BlockInt8Codec::scales_offset(n) + 4 * b)], 4);
    EXPECT_EQ(scale, amax / 127.0f) << "block " << b;
    for (int64_t i = b * block; i < std::min(n, (b + 1) * block); ++i) {
      EXPECT_EQ(int(w[size_t(i)]), int(std::nearbyint(x[size_t(i)] / scale))) << i;
      EXPECT_LE(std::fabs(got[size_t(i)] - x[size_t(i)]), scale / 2 * (1 + 0x1p-20)) << i;
    }
  }
}

std::vector<GroupSpec> groups() {
  return {{"embed", GroupKind::Dense, -1, -1, {{"embed.weight", Shape{301, 8}}}},
          {"block0",
           GroupKind::Dense,
           0,
           -1,
           {{"block0.norm", Shape{8}, ParamInit::Ones, 0.0f, false},
            {"block0.w", Shape{97, 16}, ParamInit::Normal, 0.5f}}},
          {"block1", GroupKind::Dense, 1, -1, {{"block1.w", Shape{2003}}}},
          {"tiny", GroupKind::Dense, -1, -1, {{"tiny.bias", Shape{7}, ParamInit::Zeros}}}};
}

// What each rank saw: [pass][group] the acquired full parameters (numel elements, as fp32), and
// [group] the exact ones (fp32 masters, full_params_host).
struct RankView {
  std::vector<std::vector<float>> pass[2];
  std::vector<std::vector<float>> exact;
};
struct GatherRun {
  std::vector<RankView> ranks;
  EngineCounters counters;  // rank 0
};

std::vector<float> to_host(Device& dev, Stream& s, const Tensor& t, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  TensorBuffer f(dev, DType::F32, Shape{n}, MemTag::Other, s);
  dev.ops().cast(s, t.view_elems(0, Shape{n}), f);
  dev.memcpy_async(out.data(), f.view().data(), size_t(n) * 4, s);
  s.synchronize();
  return out;
}

// Acquires and releases every group twice (a forward and a backward of one step, no cache).
GatherRun gather_twice(int world, DType dt, std::shared_ptr<const GatherCodec> codec) {
  GatherRun out;
  out.ranks.resize(size_t(world));
  std::mutex mu;
  comm::World::run(world, [&](comm::RankContext& ctx) {
    Device& dev = *ctx.device;
    EngineStreams st{&dev.create_stream("compute"), &dev.create_stream("gather"),
                     &dev.create_stream("reduce")};
    auto wg = ctx.world_group();
    auto gather = ctx.communicator(wg, "gather");
    auto reduce = ctx.communicator(wg, "reduce");
    auto misc = ctx.communicator(wg, "misc");
    ZeroOptions o;
    o.compute_dtype = dt;
    o.zero.param_persistence_threshold = 64;  // "tiny" stays replicated
    o.gather_codec = codec;
    ZeroEngine eng(
        dev, st, groups(),
        [&](const GroupSpec&) {
          return GroupComms{gather.get(), reduce.get()};
        },
        *misc, o, nullptr);
    RankView v;
    for (auto& pass : v.pass) {
      for (int g = 0; g < eng.group_count(); ++g) {
        const Tensor p = eng.acquire(g, *st.compute);
        pass.push_back(to_host(dev, *st.compute, p, eng.layout(g).numel()));
        eng.release(g, *st.compute);
      }
    }
    for (int g = 0; g < eng.group_count(); ++g) v.exact.push_back(eng.full_params_host(g));
    dev.synchronize();
    std::lock_guard lock(mu);
    out.ranks[size_t(ctx.rank)] = std::move(v);
    if (ctx.rank == 0) out.counters = eng.counters();
  });
  return out;
}

TEST(BlockInt8Codec, EngineGathersAreIdenticalOnEveryRankAndWithinTheBound) {
  const int64_t block = 64;
  for (DType dt : {DType::F32, DType::BF16}) {
    for (int world : {3, 4}) {
      const std::string what = std::string(dtype_name(dt)) + " world " + std::to_string(world);
      const GatherRun q = gather_twice(world, dt, std::make_shared<BlockInt8Codec>(block));
      const GatherRun id = gather_twice(world, dt, nullptr);
      const std::vector<GroupSpec> specs = groups();
      uint64_t wire = 0, full = 0;
      int sharded = 0;
      for (size_t g = 0; g < specs.size(); ++g) {
        const GroupLayout layout(specs[g]);
        const bool is_sharded = layout.numel() >= 64;
        for (int r = 0; r < world; ++r) {
          const RankView& v = q.ranks[size_t(r)];
          // Every rank decodes every part: the same full parameters everywhere, and the second
          // gather of the step gives the first one's values.
          ASSERT_EQ(v.pass[0][g], q.ranks[0].pass[0][g]) << what << " rank " << r << " group " << g;
          ASSERT_EQ(v.pass[1][g], v.pass[0][g]) << what << " rank " << r << " group " << g;
          // The identity gather is exact (the compute-dtype copy of the master).
          ASSERT_EQ(id.ranks[size_t(r)].pass[0][g].size(), v.pass[0][g].size());
        }
        if (!is_sharded) {  // replicated: no codec
          EXPECT_EQ(q.ranks[0].pass[0][g], id.ranks[0].pass[0][g]) << what;
          continue;
        }
        ++sharded;
        const auto padded = layout.padded_numel(world), shard = padded / world;
        const std::vector<float>& x = id.ranks[0].pass[0][g];  // exact compute-dtype values
        const std::vector<float>& d = q.ranks[0].pass[0][g];
        const double out_ulp = dt == DType::F32 ? 0x1p-24 : 0x1p-8;
        const auto n = int64_t(x.size());
        for (int64_t lo = 0; lo < n; lo += block) {  // blocks counted inside each rank's shard
          const int64_t hi = std::min({n, lo + block, (lo / shard + 1) * shard});
          double amax = 0;
          for (int64_t i = lo; i < hi; ++i) amax = std::max(amax, std::fabs(double(x[size_t(i)])));
          const double half = static_cast<float>(amax / 127.0) / 2.0 * (1 + 0x1p-20);
          for (int64_t i = lo; i < hi; ++i)
            ASSERT_LE(std::fabs(d[size_t(i)] - x[size_t(i)]),
                      half + out_ulp * std::fabs(x[size_t(i)]))
                << what << " group " << g << " element " << i;
          lo = hi - block;  // the next block starts at hi (a shard edge or lo + block)
        }
        const uint64_t part = uint64_t(BlockInt8Codec::scales_offset(shard)) +
                              4 * uint64_t((shard + block - 1) / block);
        wire += 2 * uint64_t(world) * part;
        full += 2 * uint64_t(padded) * dtype_size_bytes(dt);
      }
      EXPECT_EQ(q.counters.gathers, uint64_t(2 * sharded)) << what;
      EXPECT_EQ(q.counters.gathered_wire_bytes, wire) << what;
      EXPECT_EQ(q.counters.gathered_bytes, full) << what;
      EXPECT_EQ(id.counters.gathered_bytes, full) << what;
      EXPECT_EQ(id.counters.gathered_wire_bytes, full) << what << ": identity sends the shards";
      // About (1 + 4 / block) / 4 of fp32's bytes, (1 + 4 / block) / 2 of bf16's.
      const double ratio = double(wire) / double(full);
      const double expect = (1.0 + 4.0 / block) / double(dtype_size_bytes(dt));
      EXPECT_NEAR(ratio, expect, 0.02 * expect) << what;
      // The fp32 masters were never touched by the codec.
      for (size_t g = 0; g < specs.size(); ++g)
        EXPECT_EQ(q.ranks[0].exact[g], id.ranks[0].exact[g]) << what << " group " << g;
    }
  }
}

}  // namespace
}  // namespace moezero
