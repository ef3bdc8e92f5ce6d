// ZeroEngine gradient health (docs/health.md) without a model: per-shard squares that add up
// to the exact gradient norm; a NaN written through the grad hook on one rank is located
// (group, parameter, element, kind) on that rank only, the step is not applied on any rank, and
// the optimizer state is untouched: a run with the poisoned step skipped ends bit for bit where
// a run without it ends.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "comm/world.h"
#include "core/error.h"
#include "core/ops.h"
#include "zero/zero_engine.h"

namespace moezero {
namespace {

std::vector<GroupSpec> groups() {
  std::vector<GroupSpec> g;
  g.push_back({"embed", GroupKind::Dense, -1, -1, {{"embed.weight", Shape{64, 8}}}});
  g.push_back({"layers.0.block",
               GroupKind::Dense,
               0,
               -1,
               {{"layers.0.norm.weight", Shape{8}, ParamInit::Ones, 0.0f, false},
                {"layers.0.w1.weight", Shape{32, 17}}}});
  g.push_back({"head", GroupKind::Dense, -1, -1, {{"head.weight", Shape{45}}}});
  return g;
}

// Gradient element i of group g on `rank` for data index d (exact in fp32 sums of 2-4 terms
// is not needed: the reference below sums in double and the test allows fp32 rounding).
float grad_value(int g, int64_t i, int d, int rank) {
  return std::sin(0.3f * float(i) + 1.7f * float(g) + 0.9f * float(d) + 0.5f * float(rank));
}

struct RunOut {
  std::vector<std::vector<std::vector<float>>> params;  // [rank][group]
  std::vector<std::vector<StepResult>> results;         // [rank][step]
};

// One engine step per entry of `data`; at step `poison` (index into data) the last rank writes
// `bad` into element 7 of parameter 1 of group 1 through the grad hook.
RunOut run(int world, int stage, const std::vector<int>& data, int poison, float bad,
           DType dtype = DType::F32) {
  RunOut out;
  out.params.resize(static_cast<size_t>(world));
  out.results.resize(static_cast<size_t>(world));
  std::mutex mu;
  comm::World::run(world, [&](comm::RankContext& ctx) {
    Device& dev = *ctx.device;
    EngineStreams st{&dev.create_stream("compute"), &dev.create_stream("gather"),
                     &dev.create_stream("reduce")};
    auto wg = ctx.world_group();
    auto gather = ctx.communicator(wg, "gather");
    auto reduce = ctx.communicator(wg, "reduce");
    auto misc = ctx.communicator(wg, "misc");
    ZeroOptions opt;
    opt.zero.stage = stage;
    opt.compute_dtype = dtype;
    opt.zero.param_persistence_threshold = 16;
    opt.grad_hook = [&](const GradReadyInfo& gi) {
      if (ctx.rank != world - 1 || gi.step != poison || gi.group != 1) return;
      const int64_t at = gi.layout->offset(1) + 7;
      gi.stream->device().ops().fill(*gi.stream, gi.grad.view_elems(at, Shape{1}), bad);
    };
    ZeroEngine eng(
        dev, st, groups(),
        [&](const GroupSpec&) {
          return GroupComms{gather.get(), reduce.get()};
        },
        *misc, opt);
    Stream& cs = *st.compute;
    std::vector<StepResult> results;
    for (int d : data) {
      std::vector<std::vector<float>> host;
      for (int g = 0; g < eng.group_count(); ++g) {
        eng.acquire(g, cs);
        const int64_t n = eng.layout(g).numel();
        auto& v = host.emplace_back(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = grad_value(g, i, d, ctx.rank);
        Tensor gr = eng.grad(g, cs);
        dev.memcpy_async(gr.data(), v.data(), size_t(n) * 4, cs);
        eng.grad_ready(g, cs);
        eng.release(g, cs);
      }
      eng.finish_backward();
      results.push_back(eng.step(AdamWHyper{0.05f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f}));
      cs.synchronize();
    }
    std::vector<std::vector<float>> params;
    for (int g = 0; g < eng.group_count(); ++g) params.push_back(eng.full_params_host(g));
    dev.synchronize();
    std::lock_guard lock(mu);
    out.params[static_cast<size_t>(ctx.rank)] = params;
    out.results[static_cast<size_t>(ctx.rank)] = results;
  });
  return out;
}

TEST(ZeroHealth, ShardSquaresAddUpToTheGradientNormAtEveryStage) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {1, 2, 3}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + " world " + std::to_string(world));
      const RunOut o = run(world, stage, {0, 1}, -1, 0.0f);
      const auto specs = groups();
      for (size_t s = 0; s < 2; ++s) {
        const StepResult& r = o.results[0][s];
        ASSERT_EQ(r.shard_sq_slots, 3);
        ASSERT_EQ(r.shard_sq.size(), size_t(world) * 3);
        double total = 0.0;
        for (size_t g = 0; g < specs.size(); ++g) {
          const int64_t n = GroupLayout(specs[g]).numel();
          double ref = 0.0;  // the reduced gradient: sum over ranks
          for (int64_t i = 0; i < n; ++i) {
            double sum = 0.0;
            for (int rank = 0; rank < world; ++rank) sum += grad_value(int(g), i, int(s), rank);
            ref += sum * sum;
          }
          double got = 0.0;
          for (int rank = 0; rank < world; ++rank) got += r.shard_sq[size_t(rank) * 3 + g];
          EXPECT_NEAR(got, ref, 1e-5 * ref) << "group " << g << " step " << s;
          total += got;
        }
        EXPECT_NEAR(r.grad_norm, std::sqrt(total), 1e-12 * r.grad_norm);
        for (int rank = 1; rank < world; ++rank) {
          EXPECT_EQ(o.results[size_t(rank)][s].shard_sq, r.shard_sq) << "identical on every rank";
          EXPECT_EQ(o.results[size_t(rank)][s].grad_norm, r.grad_norm);
        }
        EXPECT_FALSE(r.nonfinite.has_value());
      }
    }
  }
}

TEST(ZeroHealth, PoisonedStepIsLocatedAndSkippedWithoutTouchingState) {
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  struct Case {
    int stage;
    float bad;
    DType dtype;
    int world = 2;
  };
  // World 1 fp32 (stages 2-3): the gradient goes straight into the accumulator and its scan is
  // deferred to the step (run only because the norm is not finite): the same report.
  for (Case c : {Case{0, kNaN, DType::F32}, Case{1, -kInf, DType::F32}, Case{2, kNaN, DType::F32},
                 Case{3, -kInf, DType::F32}, Case{3, kNaN, DType::BF16}, Case{1, kInf, DType::BF16},
                 Case{3, kNaN, DType::F32, 1}, Case{2, kInf, DType::F32, 1},
                 Case{3, kNaN, DType::BF16, 1}}) {
    {
      const int stage = c.stage;
      const float bad = c.bad;
      const int world = c.world;
      SCOPED_TRACE("stage " + std::to_string(stage) + " value " + std::to_string(bad) + " " +
                   std::string(dtype_name(c.dtype)) + " world " + std::to_string(world));
      const RunOut poisoned = run(world, stage, {0, 1, 2}, 1, bad, c.dtype);
      const RunOut clean = run(world, stage, {0, 2}, -1, 0.0f, c.dtype);
      for (int rank = 0; rank < world; ++rank) {
        const auto& rs = poisoned.results[size_t(rank)];
        EXPECT_TRUE(rs[0].finite);
        EXPECT_FALSE(rs[1].finite) << "rank " << rank << ": the decision is the same everywhere";
        EXPECT_TRUE(rs[2].finite);
        EXPECT_EQ(rs[1].nonfinite.has_value(), rank == world - 1) << "found where it was computed";
        // Parameters (and, through the following step, the moments and step count) untouched.
        for (size_t g = 0; g < 3; ++g) {
          const auto& a = poisoned.params[size_t(rank)][g];
          const auto& b = clean.params[size_t(rank)][g];
          ASSERT_EQ(a.size(), b.size());
          EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
              << "rank " << rank << " group " << g;
        }
      }
      const NonFiniteGrad& f = *poisoned.results[size_t(world - 1)][1].nonfinite;
      EXPECT_EQ(f.group, 1);
      EXPECT_EQ(f.param, 1);
      EXPECT_EQ(f.index, 7);
      EXPECT_EQ(f.flat_index, GroupLayout(groups()[1]).offset(1) + 7);
      EXPECT_EQ(f.kind, std::isnan(bad) ? 1 : bad > 0 ? 2 : 3);
      EXPECT_EQ(f.count, 1);
      EXPECT_EQ(f.micro_batch, 0);
      EXPECT_EQ(f.order, 1) << "group 1 was the second gradient checked";
      EXPECT_EQ(f.bad_gradients, 1);
    }
  }
}

}  // namespace
}  // namespace moezero
