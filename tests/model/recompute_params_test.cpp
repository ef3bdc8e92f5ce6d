// tests/model/recompute_params_test.cpp — activation checkpointing at the model level
// (model/transformer.h, model/recompute_params.h) against SimpleParams, which poisons released
// parameters with NaN and throws on a double acquire: every mode gives the loss and gradients
// of `none` bit for bit (dense and MoE, f32 and bf16, every backend), and a fully checkpointed
// backward acquires each group once for its recompute and backward together.
#include "model/recompute_params.h"

#include <cstring>

#include "tests/model/model_test_util.h"

namespace moezero::test {
namespace {

using model::Transformer;

class CheckpointingTest : public ModelTest {};

void expect_same(const RunResult& a, const RunResult& b, const std::string& what) {
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, 4), 0) << what << ": " << a.loss << " vs " << b.loss;
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t g = 0; g < a.grads.size(); ++g) {
    ASSERT_EQ(a.grads[g].size(), b.grads[g].size());
    EXPECT_EQ(std::memcmp(a.grads[g].data(), b.grads[g].data(), a.grads[g].size() * 4), 0)
        << what << " group " << g;
  }
}

TEST_P(CheckpointingTest, EveryModeGivesTheSameLossAndGradients) {
  for (int64_t experts : {0, 4}) {
    ModelConfig cfg = tiny_config();
    cfg.num_experts = experts;
    cfg.top_k = 2;
    const Batch b = random_batch(cfg, 3, 8, 2);
    for (DType dt : {DType::F32, DType::BF16}) {
      const std::string what =
          std::string(experts ? "moe " : "dense ") + std::string(dtype_name(dt));
      Transformer ref(cfg);
      SimpleParams pr(dev(), s(), ref.param_groups(), dt, 5);
      const RunResult none = run(ref, pr, b, 0.05f);
      for (ActivationCheckpointing mode :
           {ActivationCheckpointing::Selective, ActivationCheckpointing::Full}) {
        Transformer m(cfg);
        m.set_activation_checkpointing(mode);
        SimpleParams p(dev(), s(), m.param_groups(), dt, 5);
        const RunResult got = run(m, p, b, 0.05f);
        expect_same(none, got, what + (mode == ActivationCheckpointing::Full ? " full" : " sel"));
        EXPECT_FALSE(p.any_acquired());
        const RunResult again = run(m, p, b, 0.05f);  // the same model, a second micro-batch
        expect_same(none, again, what + " again");
      }
    }
  }
}

// Backward of a fully checkpointed layer: the recompute acquires attention and FFN (their
// releases are held), the backward takes them back without an acquire and releases them after
// their gradients: each group is acquired once in backward, as without checkpointing.
TEST_P(CheckpointingTest, FullBackwardAcquiresEachGroupOnce) {
  const ModelConfig cfg = tiny_config();
  Transformer model(cfg);
  model.set_activation_checkpointing(ActivationCheckpointing::Full);
  SimpleParams p(dev(), s(), model.param_groups(), DType::F32, 1);
  p.clear_calls();
  run(model, p, random_batch(cfg, 2, 5, 0), 0.1f);
  using C = SimpleParams::Call;
  std::vector<SimpleParams::Event> want;
  const int G = model.group_count();
  for (int g = 0; g < G; ++g) {  // forward as without checkpointing
    want.push_back({C::Acquire, g});
    want.push_back({C::Release, g});
  }
  for (C c : {C::Acquire, C::Grad, C::GradReady, C::Release}) want.push_back({c, G - 1});  // head
  for (int l = static_cast<int>(cfg.n_layers) - 1; l >= 0; --l) {
    const int attn = 1 + 2 * l, ffn = attn + 1;
    want.push_back({C::Acquire, attn});  // recompute
    want.push_back({C::Acquire, ffn});
    for (int g : {ffn, attn})  // backward: held, no acquire
      for (C c : {C::Grad, C::GradReady, C::Release}) want.push_back({c, g});
  }
  want.push_back({C::Grad, 0});
  want.push_back({C::GradReady, 0});
  ASSERT_EQ(p.calls().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(p.calls()[i] == want[i])
        << "call " << i << ": got (" << int(p.calls()[i].call) << ", " << p.calls()[i].group
        << "), want (" << int(want[i].call) << ", " << want[i].group << ")";
  EXPECT_FALSE(p.any_acquired());
}

// SimpleParams, except that group 2 may not be held (a live-parameter limit).
class NoHoldOfTwo final : public ParamProvider {
 public:
  explicit NoHoldOfTwo(SimpleParams& p) : p_(p) {}
  int group_count() const override { return p_.group_count(); }
  const GroupLayout& layout(int g) const override { return p_.layout(g); }
  DType compute_dtype() const override { return p_.compute_dtype(); }
  Tensor acquire(int g, Stream& s) override { return p_.acquire(g, s); }
  void release(int g, Stream& s) override { p_.release(g, s); }
  Tensor grad(int g, Stream& s) override { return p_.grad(g, s); }
  void grad_ready(int g, Stream& s) override { p_.grad_ready(g, s); }
  bool may_hold(int g) const override { return g != 2; }

 private:
  SimpleParams& p_;
};

// A group that may not be held is released for real; finish_block releases what the backward
// did not take back; a release of a group acquired before the wrapper passes through.
TEST_P(CheckpointingTest, RecomputeParamsHoldsOnlyWhatMayBeHeld) {
  const ModelConfig cfg = tiny_config();
  Transformer model(cfg);
  SimpleParams p(dev(), s(), model.param_groups(), DType::F32, 1);
  NoHoldOfTwo limited(p);
  model::RecomputeParams rp(limited);
  p.acquire(4, s());  // acquired before the wrapper
  rp.hold_releases();
  rp.acquire(1, s());
  rp.release(1, s());  // held
  rp.acquire(2, s());
  rp.release(2, s());  // may not be held: released
  rp.acquire(3, s());
  rp.release(3, s());  // held
  EXPECT_EQ(rp.held_count(), 2u);
  rp.stop_holding();
  p.clear_calls();
  rp.acquire(1, s());  // taken back: no acquire of p
  rp.release(1, s());  // now released for real
  rp.acquire(2, s());  // acquired again
  rp.release(2, s());
  using C = SimpleParams::Call;
  const std::vector<SimpleParams::Event> want = {{C::Release, 1}, {C::Acquire, 2}, {C::Release, 2}};
  EXPECT_EQ(p.calls(), want);
  EXPECT_EQ(rp.held_count(), 1u);  // group 3
  rp.release(4, s());              // passes through
  rp.finish_block(s());            // releases group 3
  EXPECT_EQ(rp.held_count(), 0u);
  EXPECT_FALSE(p.any_acquired());
}

INSTANTIATE_TEST_SUITE_P(Backends, CheckpointingTest, ::testing::ValuesIn(compiled_backends()),
                         [](const auto& info) {
                           return std::string(device_kind_name(info.param));
                         });

}  // namespace
}  // namespace moezero::test
