// tests/model/transformer_test.cpp — the transformer's contract apart from its math: parameter
// groups (names, shapes, init, order), the acquire/grad/grad_ready/release protocol, config
// validation, determinism, ignored targets, loss accumulation and activation memory.
#include <cstring>

#include "tests/model/model_test_util.h"

namespace moezero::test {
namespace {

using model::Transformer;

class TransformerTest : public ModelTest {};

TEST(TransformerGroups, NamesShapesInitAndOrderFollowHuggingFaceMixtral) {
  const ModelConfig cfg = tiny_config();
  const Transformer model(cfg);
  const std::vector<GroupSpec> groups = model.param_groups();
  ASSERT_EQ(groups.size(), 2u + 2u * static_cast<size_t>(cfg.n_layers));
  ASSERT_EQ(model.group_count(), static_cast<int>(groups.size()));
  EXPECT_EQ(groups[0].name, "embed");
  EXPECT_EQ(groups[0].params.at(0).name, "model.embed_tokens.weight");
  EXPECT_EQ(groups[0].params.at(0).shape, (Shape{32, 16}));
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const GroupSpec& a = groups[static_cast<size_t>(1 + 2 * l)];
    const GroupSpec& f = groups[static_cast<size_t>(2 + 2 * l)];
    EXPECT_EQ(a.name, "layers." + std::to_string(l) + ".attn");
    EXPECT_EQ(f.name, "layers." + std::to_string(l) + ".ffn");
    EXPECT_EQ(a.layer, l);
    EXPECT_EQ(f.layer, l);
    EXPECT_EQ(a.kind, GroupKind::Dense);
    EXPECT_EQ(f.kind, GroupKind::Dense);
    ASSERT_EQ(a.params.size(), 5u);
    ASSERT_EQ(f.params.size(), 4u);
    EXPECT_EQ(a.params[0].name, p + "input_layernorm.weight");
    EXPECT_EQ(a.params[1].name, p + "self_attn.q_proj.weight");
    EXPECT_EQ(a.params[2].name, p + "self_attn.k_proj.weight");
    EXPECT_EQ(a.params[3].name, p + "self_attn.v_proj.weight");
    EXPECT_EQ(a.params[4].name, p + "self_attn.o_proj.weight");
    EXPECT_EQ(a.params[1].shape, (Shape{16, 16}));
    EXPECT_EQ(a.params[2].shape, (Shape{8, 16}));  // Hkv * D = 2 * 4
    EXPECT_EQ(a.params[3].shape, (Shape{8, 16}));
    EXPECT_EQ(a.params[4].shape, (Shape{16, 16}));
    EXPECT_EQ(f.params[0].name, p + "post_attention_layernorm.weight");
    EXPECT_EQ(f.params[1].name, p + "mlp.gate_proj.weight");
    EXPECT_EQ(f.params[2].name, p + "mlp.up_proj.weight");
    EXPECT_EQ(f.params[3].name, p + "mlp.down_proj.weight");
    EXPECT_EQ(f.params[1].shape, (Shape{24, 16}));
    EXPECT_EQ(f.params[3].shape, (Shape{16, 24}));
  }
  const GroupSpec& h = groups.back();
  EXPECT_EQ(h.name, "head");
  EXPECT_EQ(h.params.at(0).name, "model.norm.weight");
  EXPECT_EQ(h.params.at(1).name, "lm_head.weight");
  EXPECT_EQ(h.params.at(1).shape, (Shape{32, 16}));
  for (const GroupSpec& g : groups) {
    for (const ParamSpec& p : g.params) {
      const bool norm = p.shape.rank() == 1;
      EXPECT_EQ(p.init, norm ? ParamInit::Ones : ParamInit::Normal) << p.name;
      EXPECT_EQ(p.weight_decay, !norm) << p.name;
      if (!norm) {
        EXPECT_FLOAT_EQ(p.init_std, 0.3f) << p.name;
      }
    }
  }
}

TEST(TransformerConfig, RejectsWhatCannotBeBuilt) {
  auto expect_error = [](ModelConfig c, const std::string& needle) {
    try {
      Transformer m(c);
      ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  ModelConfig c = tiny_config();
  c.num_experts = 8;
  c.top_k = 9;
  expect_error(c, "top_k");
  c = tiny_config();
  c.n_heads = 3;
  expect_error(c, "model.n_heads");
  c = tiny_config();
  c.n_heads = 8;  // head dim 2: fine; 16 heads: head dim 1 is odd
  EXPECT_NO_THROW(Transformer{c});
  c.n_heads = 16;
  c.n_kv_heads = 1;
  expect_error(c, "odd head dim");
  c = tiny_config();
  c.n_kv_heads = 3;
  expect_error(c, "model.n_kv_heads");
  c = tiny_config();
  c.n_layers = 0;
  expect_error(c, "model.n_layers");
}

TEST_P(TransformerTest, ForwardAndBackwardFollowTheGroupProtocol) {
  const ModelConfig cfg = tiny_config();
  Transformer model(cfg);
  SimpleParams p(dev(), s(), model.param_groups(), DType::F32, 1);
  p.clear_calls();
  run(model, p, random_batch(cfg, 2, 5, 0), 0.1f);
  using C = SimpleParams::Call;
  std::vector<SimpleParams::Event> want;
  const int G = model.group_count();
  for (int g = 0; g < G; ++g) {  // forward: each group acquired and released around its use
    want.push_back({C::Acquire, g});
    want.push_back({C::Release, g});
  }
  for (int g = G - 1; g >= 1; --g) {  // backward: exact reverse order
    for (C c : {C::Acquire, C::Grad, C::GradReady, C::Release}) want.push_back({c, g});
  }
  want.push_back({C::Grad, 0});  // the embedding's backward needs no parameters
  want.push_back({C::GradReady, 0});
  ASSERT_EQ(p.calls().size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(p.calls()[i] == want[i])
        << "call " << i << ": got (" << int(p.calls()[i].call) << ", " << p.calls()[i].group
        << "), want (" << int(want[i].call) << ", " << want[i].group << ")";
  }
  EXPECT_FALSE(p.any_acquired());
  EXPECT_FALSE(model.has_activations());
}

TEST_P(TransformerTest, RunsAreBitIdentical) {
  const ModelConfig cfg = tiny_config();
  const Batch b = random_batch(cfg, 3, 8, 2);
  for (DType dt : {DType::F32, DType::BF16}) {
    Transformer m1(cfg), m2(cfg);
    SimpleParams p1(dev(), s(), m1.param_groups(), dt, 5);
    SimpleParams p2(dev(), s(), m2.param_groups(), dt, 5);
    const RunResult a = run(m1, p1, b, 0.05f);
    const RunResult again = run(m1, p1, b, 0.05f);  // same model and provider, second time
    const RunResult fresh = run(m2, p2, b, 0.05f);  // a new model and provider
    for (const RunResult* r : {&again, &fresh}) {
      EXPECT_EQ(std::memcmp(&a.loss, &r->loss, 4), 0) << dtype_name(dt);
      for (size_t g = 0; g < a.grads.size(); ++g) {
        ASSERT_EQ(a.grads[g].size(), r->grads[g].size());
        EXPECT_EQ(std::memcmp(a.grads[g].data(), r->grads[g].data(), a.grads[g].size() * 4), 0)
            << dtype_name(dt) << " group " << g;
      }
    }
  }
}

TEST_P(TransformerTest, IgnoredTargetsContributeNothing) {
  const ModelConfig cfg = tiny_config();
  Transformer model(cfg);
  SimpleParams p(dev(), s(), model.param_groups(), DType::F32, 9);
  // Every target ignored: loss and every gradient exactly zero.
  Batch b = random_batch(cfg, 2, 6, 0);
  for (int32_t& t : b.targets) t = -1;
  const RunResult none = run(model, p, b, 1.0f);
  EXPECT_EQ(none.loss, 0.0f);
  for (const auto& g : none.grads)
    for (float v : g) ASSERT_EQ(v, 0.0f);
  // Some ignored: the loss is the reference's sum over the other tokens only.
  b = random_batch(cfg, 2, 6, 0);
  Batch partial = b;
  for (size_t i = 0; i < partial.targets.size(); i += 3) partial.targets[i] = -1;
  const RunResult r = run(model, p, partial, 0.25f);
  const double ref = reference_loss(cfg, ref_weights(p), partial.tokens, partial.targets,
                                    partial.batch, partial.seq, 0.25);
  EXPECT_NEAR(r.loss, ref, 1e-5 * std::fabs(ref));
  // Gradients: only the valid tokens' losses count, so grads(partial) equals grads(all) minus
  // the grads of a batch that keeps only the ignored positions, to f32 rounding: a few ulps of
  // the values (gradients up to ~3 here, and a weight gradient sums over all rows), so
  // 1e-5 relative with a 1e-6 floor.
  Batch complement = b;
  for (size_t i = 0; i < b.targets.size(); ++i)
    complement.targets[i] = partial.targets[i] == -1 ? b.targets[i] : -1;
  const RunResult all = run(model, p, b, 0.25f);
  const RunResult comp = run(model, p, complement, 0.25f);
  EXPECT_NEAR(all.loss, r.loss + comp.loss, 1e-5 * std::fabs(all.loss));
  for (size_t g = 0; g < all.grads.size(); ++g)
    for (size_t j = 0; j < all.grads[g].size(); ++j)
      ASSERT_NEAR(all.grads[g][j], r.grads[g][j] + comp.grads[g][j],
                  5e-6 + 1e-5 * std::fabs(all.grads[g][j]))
          << "group " << g << " entry " << j;
}

TEST_P(TransformerTest, LossAccumulatesAndActivationsAreFreed) {
  const ModelConfig cfg = tiny_config();
  Transformer model(cfg);
  SimpleParams p(dev(), s(), model.param_groups(), DType::F32, 3);
  const Batch b = random_batch(cfg, 2, 8, 0);
  const size_t act = static_cast<size_t>(MemTag::Activation);
  const size_t base = dev().allocator().stats().current_bytes[act];
  TensorBuffer tokens = upload_i32(b.tokens, Shape{2, 8});
  TensorBuffer targets = upload_i32(b.targets, Shape{2, 8});
  TensorBuffer loss(dev(), DType::F32, Shape{1}, MemTag::Other, s(), "loss");
  dev().ops().fill(s(), loss, 1.5);
  model.forward(p, s(), tokens, targets, 0.5f, loss);
  EXPECT_GT(dev().allocator().stats().current_bytes[act], base);  // activations kept
  EXPECT_TRUE(model.has_activations());
  model.backward(p, s());
  EXPECT_EQ(dev().allocator().stats().current_bytes[act], base);  // and freed after backward
  const float first = download_scalar(loss);
  const RunResult r = run(model, p, b, 0.5f);
  EXPECT_FLOAT_EQ(first, 1.5f + r.loss);  // loss_out is `+=`

  // Evaluation: forward without backward, then drop the activations.
  model.forward(p, s(), tokens, targets, 0.5f, loss);
  model.discard_activations();
  EXPECT_EQ(dev().allocator().stats().current_bytes[act], base);
  EXPECT_THROW(model.backward(p, s()), Error);
  EXPECT_FALSE(p.any_acquired());
  s().synchronize();  // the provider's host copies must outlive the queued uploads (TSAN)
}

TEST_P(TransformerTest, RejectsBadInputs) {
  const ModelConfig cfg = tiny_config();
  Transformer model(cfg);
  SimpleParams p(dev(), s(), model.param_groups(), DType::F32, 3);
  TensorBuffer loss(dev(), DType::F32, Shape{1}, MemTag::Other, s(), "loss");
  const std::vector<int32_t> ids(2 * 9, 1);
  TensorBuffer long_ids = upload_i32(ids, Shape{2, 9});  // T = 9 > seq_len = 8
  EXPECT_THROW(model.forward(p, s(), long_ids, long_ids, 1.0f, loss), Error);
  TensorBuffer ok = upload_i32(std::vector<int32_t>(ids.begin(), ids.begin() + 16), Shape{2, 8});
  TensorBuffer other = upload_i32(std::vector<int32_t>(ids.begin(), ids.begin() + 16), Shape{4, 4});
  EXPECT_THROW(model.forward(p, s(), ok, other, 1.0f, loss), Error);  // targets shape differs
  ModelConfig bigger = cfg;
  bigger.n_layers = 3;
  SimpleParams wrong(dev(), s(), Transformer(bigger).param_groups(), DType::F32, 3);
  EXPECT_THROW(model.forward(wrong, s(), ok, ok, 1.0f, loss), Error);  // provider mismatch
}

INSTANTIATE_TEST_SUITE_P(Backends, TransformerTest, ::testing::ValuesIn(compiled_backends()),
                         [](const auto& info) {
                           return std::string(device_kind_name(info.param));
                         });

}  // namespace
}  // namespace moezero::test
