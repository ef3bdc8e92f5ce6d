// ZeroEngine::set_full_params_host: every rank writes its range of the fp32 master and of the
// compute copy; reading back (full_params_host, a collective) and acquiring (a gather under
// stage 3) give exactly the values written, at every world size, ZeRO stage and compute dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "comm/world.h"
#include "core/error.h"
#include "core/ops.h"
#include "zero/zero_engine.h"

namespace moezero {
namespace {

std::vector<GroupSpec> groups() {
  std::vector<GroupSpec> g;
  g.push_back({"embed", GroupKind::Dense, -1, -1, {{"embed.weight", Shape{50, 8}}}});
  g.push_back({"block",
               GroupKind::Dense,
               0,
               -1,
               {{"block.norm", Shape{8}, ParamInit::Ones, 0.0f, false},
                {"block.w", Shape{37, 16}, ParamInit::Normal, 0.5f}}});
  g.push_back({"tiny", GroupKind::Dense, -1, -1, {{"tiny.bias", Shape{7}, ParamInit::Zeros}}});
  return g;
}

// Values unlike the initialisation (and not representable in bf16, so rounding shows).
std::vector<float> values_of(int g, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = std::sin(0.731f * float(i) + float(g)) + 0.001f * float(i);
  return v;
}

struct Case {
  int world;
  int stage;
  DType dtype;
};

class SetFullParams : public ::testing::TestWithParam<Case> {};

TEST_P(SetFullParams, ReadBackAndAcquireGiveTheValues) {
  const Case c = GetParam();
  std::mutex mu;
  std::vector<std::string> failures;
  comm::World::run(c.world, [&](comm::RankContext& ctx) {
    Device& dev = *ctx.device;
    EngineStreams st{&dev.create_stream("compute"), &dev.create_stream("gather"),
                     &dev.create_stream("reduce")};
    auto wg = ctx.world_group();
    auto gather = ctx.communicator(wg, "gather");
    auto reduce = ctx.communicator(wg, "reduce");
    auto misc = ctx.communicator(wg, "misc");
    ZeroOptions opt;
    opt.zero.stage = c.stage;
    opt.compute_dtype = c.dtype;
    opt.zero.param_persistence_threshold = 100;  // "tiny" (7) stays replicated under stage 3
    ZeroEngine eng(
        dev, st, groups(),
        [&](const GroupSpec&) {
          return GroupComms{gather.get(), reduce.get()};
        },
        *misc, opt);
    Stream& cs = *st.compute;
    for (int g = 0; g < eng.group_count(); ++g)
      eng.set_full_params_host(g, values_of(g, eng.layout(g).numel()));
    for (int g = 0; g < eng.group_count(); ++g) {
      const int64_t n = eng.layout(g).numel();
      const std::vector<float> want = values_of(g, n);
      const std::vector<float> master = eng.full_params_host(g);
      // The compute copy, through the normal acquire path (a gather at stage 3).
      Tensor p = eng.acquire(g, cs);
      TensorBuffer pf(dev, DType::F32, Shape{n}, MemTag::Other, cs);
      dev.ops().cast(cs, p.view_elems(0, Shape{n}), pf);
      std::vector<float> compute(static_cast<size_t>(n));
      dev.memcpy_async(compute.data(), pf.view().data(), compute.size() * 4, cs);
      cs.synchronize();
      eng.release(g, cs);
      for (int64_t i = 0; i < n; ++i) {
        const auto k = static_cast<size_t>(i);
        const float rounded =
            c.dtype == DType::F32 ? want[k] : bf16_to_float(float_to_bf16(want[k]));
        if (master[k] != want[k] || compute[k] != rounded) {
          std::lock_guard lock(mu);
          failures.push_back("rank " + std::to_string(ctx.rank) + " group " + std::to_string(g) +
                             " elem " + std::to_string(i) + ": master " +
                             std::to_string(master[k]) + " compute " + std::to_string(compute[k]) +
                             " want " + std::to_string(want[k]));
          return;
        }
      }
    }
    eng.finish_backward();
    dev.synchronize();
  });
  for (const auto& f : failures) ADD_FAILURE() << f;
}

INSTANTIATE_TEST_SUITE_P(WorldStageDtype, SetFullParams,
                         ::testing::Values(Case{1, 0, DType::F32}, Case{2, 0, DType::F32},
                                           Case{2, 1, DType::BF16}, Case{3, 2, DType::F32},
                                           Case{3, 3, DType::F32}, Case{2, 3, DType::BF16},
                                           Case{4, 3, DType::BF16}),
                         [](const auto& info) {
                           return "w" + std::to_string(info.param.world) + "_stage" +
                                  std::to_string(info.param.stage) + "_" +
                                  std::string(dtype_name(info.param.dtype));
                         });

TEST(SetFullParamsErrors, WrongSizeAndGatheredGroupAreRefused) {
  comm::World::run(1, [&](comm::RankContext& ctx) {
    Device& dev = *ctx.device;
    EngineStreams st{&dev.create_stream("compute"), &dev.create_stream("gather"),
                     &dev.create_stream("reduce")};
    auto wg = ctx.world_group();
    auto gather = ctx.communicator(wg, "gather");
    auto reduce = ctx.communicator(wg, "reduce");
    auto misc = ctx.communicator(wg, "misc");
    ZeroOptions opt;
    opt.zero.stage = 3;
    opt.zero.param_persistence_threshold = 1;
    opt.zero.shard_single_rank = true;  // one rank, gathered on acquire
    ZeroEngine eng(
        dev, st, groups(),
        [&](const GroupSpec&) {
          return GroupComms{gather.get(), reduce.get()};
        },
        *misc, opt);
    Stream& cs = *st.compute;
    const int64_t n = eng.layout(0).numel();
    try {
      eng.set_full_params_host(0, std::vector<float>(static_cast<size_t>(n + 1)));
      ADD_FAILURE() << "a wrong size was accepted";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("'embed' holds " + std::to_string(n) + " values, got " +
                                 std::to_string(n + 1)),
                std::string::npos)
          << e.message();
    }
    eng.acquire(0, cs);
    try {
      eng.set_full_params_host(0, values_of(0, n));
      ADD_FAILURE() << "an acquired group was overwritten";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("'embed' is gathered"), std::string::npos) << e.message();
    }
    eng.release(0, cs);
    eng.set_full_params_host(0, values_of(0, n));  // fine once released
    EXPECT_EQ(eng.full_params_host(0), values_of(0, n));
    dev.synchronize();
  });
}

}  // namespace
}  // namespace moezero
