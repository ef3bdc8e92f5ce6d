// ZeroEngine checkpoint state (zero/zero_state.cpp): the ranges the ranks of a group write
// tile [0, numel) exactly once at every stage (stage 0: only the group's first rank writes),
// and an engine of any other world size, stage and dtype imports them exactly: masters,
// moments, step count, and compute-dtype copies cast as the optimizer casts them.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>

#include "comm/world.h"
#include "core/ops.h"
#include "zero/zero_engine.h"

namespace moezero {
namespace {

using StateTensor = ZeroEngine::StateTensor;

std::vector<GroupSpec> groups() {
  std::vector<GroupSpec> g;
  g.push_back({"embed", GroupKind::Dense, -1, -1, {{"embed.weight", Shape{61, 8}}}});
  g.push_back({"block",
               GroupKind::Dense,
               0,
               -1,
               {{"block.norm", Shape{8}, ParamInit::Ones, 0.0f, false},
                {"block.w", Shape{37, 16}, ParamInit::Normal, 0.5f}}});
  g.push_back({"tiny", GroupKind::Dense, -1, -1, {{"tiny.bias", Shape{7}, ParamInit::Zeros}}});
  return g;
}

struct Store {
  std::map<std::string, std::array<std::vector<float>, 3>> state;  // full, per tensor
  std::map<std::string, std::vector<int>> writers;                 // per element
  int64_t step = 0;
};

// Runs `steps` AdamW steps on a fixed gradient, then calls fn(rank, engine) on every rank.
void with_engine(int world, int stage, DType dt, int steps,
                 const std::function<void(int, ZeroEngine&, Stream&)>& fn) {
  comm::World::run(world, [&](comm::RankContext& ctx) {
    Device& dev = *ctx.device;
    EngineStreams st{&dev.create_stream("compute"), &dev.create_stream("gather"),
                     &dev.create_stream("reduce")};
    auto gather = ctx.communicator(ctx.world_group(), "gather");
    auto reduce = ctx.communicator(ctx.world_group(), "reduce");
    auto misc = ctx.communicator(ctx.world_group(), "misc");
    ZeroOptions o;
    o.zero.stage = stage;
    o.compute_dtype = dt;
    o.zero.param_persistence_threshold = 64;  // "tiny" stays replicated at stage 3
    ZeroEngine eng(
        dev, st, groups(),
        [&](const GroupSpec&) {
          return GroupComms{gather.get(), reduce.get()};
        },
        *misc, o);
    Stream& cs = *st.compute;
    for (int s = 0; s < steps; ++s) {
      for (int g = 0; g < eng.group_count(); ++g) {
        eng.acquire(g, cs);
        dev.ops().fill(cs, eng.grad(g, cs), 0.01 * (g + 1) * (s + 1));
        eng.grad_ready(g, cs);
        eng.release(g, cs);
      }
      eng.finish_backward();
      eng.step(AdamWHyper{0.05f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f});
    }
    fn(ctx.rank, eng, cs);
    dev.synchronize();
  });
}

Store save(int world, int stage) {
  Store store;
  std::mutex mu;
  with_engine(world, stage, DType::F32, 2, [&](int, ZeroEngine& eng, Stream&) {
    for (int g = 0; g < eng.group_count(); ++g) {
      const auto r = eng.checkpoint_range(g);
      const std::string name = eng.layout(g).spec().name;
      const size_t numel = static_cast<size_t>(eng.layout(g).numel());
      std::array<std::vector<float>, 3> v;
      for (int t = 0; t < 3; ++t) v[t] = eng.export_state(g, static_cast<StateTensor>(t));
      std::lock_guard lock(mu);
      store.step = eng.step_count();
      auto& s = store.state[name];
      auto& w = store.writers[name];
      w.resize(numel, 0);
      for (int t = 0; t < 3; ++t) {
        s[t].resize(numel);
        ASSERT_EQ(v[t].size(), static_cast<size_t>(r.count_elems));
        std::copy(v[t].begin(), v[t].end(), s[t].begin() + r.begin_elems);
      }
      for (int64_t i = r.begin_elems; i < r.begin_elems + r.count_elems; ++i) ++w[size_t(i)];
    }
  });
  return store;
}

TEST(ZeroState, RangesTileEveryGroupOnceAtEveryStage) {
  for (int stage = 0; stage <= 3; ++stage)
    for (int world : {1, 3}) {
      const Store s = save(world, stage);
      EXPECT_EQ(s.step, 2);
      for (const auto& [name, w] : s.writers)
        for (size_t i = 0; i < w.size(); ++i)
          ASSERT_EQ(w[i], 1) << "stage " << stage << " world " << world << " group " << name
                             << " element " << i;
    }
}

TEST(ZeroState, ImportAtAnyLayoutReproducesTheStateExactly) {
  const Store saved = save(2, 3);
  for (int stage : {0, 1, 3})
    for (int world : {1, 3, 4})
      for (DType dt : {DType::F32, DType::BF16}) {
        const std::string what = "stage " + std::to_string(stage) + " world " +
                                 std::to_string(world) + " " + std::string(dtype_name(dt));
        with_engine(world, stage, dt, 0, [&](int rank, ZeroEngine& eng, Stream& cs) {
          eng.import_state(
              [&](int g, StateTensor t, int64_t begin, int64_t count, float* dst) {
                const auto& v = saved.state.at(eng.layout(g).spec().name)[static_cast<int>(t)];
                ASSERT_GE(begin, 0);
                ASSERT_LE(begin + count, static_cast<int64_t>(v.size()));
                std::copy(v.begin() + begin, v.begin() + begin + count, dst);
              },
              saved.step);
          EXPECT_EQ(eng.step_count(), saved.step) << what;
          for (int g = 0; g < eng.group_count(); ++g) {
            const auto& s = saved.state.at(eng.layout(g).spec().name);
            const auto r = eng.checkpoint_range(g);
            for (int t = 1; t < 3; ++t) {  // moments: this rank's range, exactly
              const auto v = eng.export_state(g, static_cast<StateTensor>(t));
              for (size_t i = 0; i < v.size(); ++i)
                ASSERT_EQ(v[i], s[t][size_t(r.begin_elems) + i]) << what << " rank " << rank;
            }
            EXPECT_TRUE(eng.full_params_host(g) == s[0]) << what << " group " << g;
            // The compute copy the model sees: the masters cast to the compute dtype.
            const int64_t n = eng.layout(g).numel();
            Tensor p = eng.acquire(g, cs);
            std::vector<uint16_t> raw(size_t(n) * 2);
            cs.synchronize();
            std::memcpy(raw.data(), p.data(), size_t(n) * dtype_size_bytes(dt));
            eng.release(g, cs);
            for (int64_t i = 0; i < n; ++i) {
              float got = 0.0f;
              if (dt == DType::F32)
                std::memcpy(&got, reinterpret_cast<const char*>(raw.data()) + i * 4, 4);
              else
                got = bf16_to_float(bf16{raw[size_t(i)]});
              const float want = dt == DType::F32 ? s[0][size_t(i)]
                                                  : bf16_to_float(float_to_bf16(s[0][size_t(i)]));
              ASSERT_EQ(got, want) << what << " group " << g << " element " << i;
            }
          }
          eng.finish_backward();
          eng.step(AdamWHyper{});  // zero gradient: a legal step after an import
        });
      }
}

TEST(ZeroState, PrefetchOrdersRoundTripAndAreChecked) {
  with_engine(1, 3, DType::F32, 2, [&](int, ZeroEngine& eng, Stream&) {
    const auto orders = eng.prefetch_orders();
    ASSERT_FALSE(orders.empty());
    EXPECT_FALSE(orders[0].second.empty());
    eng.set_prefetch_orders({});
    EXPECT_TRUE(eng.prefetch_orders().empty());
    eng.set_prefetch_orders(orders);
    EXPECT_EQ(eng.prefetch_orders(), orders);
    EXPECT_THROW(eng.set_prefetch_orders({{"world/gather", {0, 99}}}), Error);
  });
}

}  // namespace
}  // namespace moezero
