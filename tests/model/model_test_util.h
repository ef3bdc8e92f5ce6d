// tests/model/model_test_util.h — the fixture of the model tests: a device per compiled backend
// (CUDA cases skip with the reason when no GPU is usable), a printed random seed
// (MOEZERO_TEST_SEED replays one), the tiny model of the gradient check, and run(): one
// forward + backward through a SimpleParams provider, returning the loss and every gradient.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/config.h"
#include "kernels/backend.h"
#include "model/transformer.h"
#include "tests/common/backend_fixture.h"
#include "tests/common/simple_params.h"
#include "tests/model/reference_model.h"

namespace moezero::test {

struct Batch {
  int64_t batch = 0, seq = 0;
  std::vector<int32_t> tokens, targets;  // (B*T)
};

struct RunResult {
  float loss = 0.0f;
  std::vector<std::vector<float>> grads;  // per group, layout numel
};

// The tiny model of the gradient check: V=32, C=16, Hq=4, Hkv=2 (D=4), F=24, L=2. init_std 0.3
// (not 0.02) so that attention scores, SwiGLU and logits are far from linear and every
// gradient is well above the f32 noise.
inline ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab_size = 32;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.n_layers = 2;
  c.seq_len = 8;
  c.init_std = 0.3;
  c.num_experts = 0;
  return c;
}

class ModelTest : public ::moezero::test::BackendFixture {
 protected:
  // Random tokens; targets random too, with `ignored` of them set to -1.
  Batch random_batch(const ModelConfig& c, int64_t batch, int64_t seq, int ignored) {
    Batch b{batch, seq, {}, {}};
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(c.vocab_size - 1));
    for (int64_t i = 0; i < batch * seq; ++i) {
      b.tokens.push_back(tok(rng_));
      b.targets.push_back(tok(rng_));
    }
    for (int i = 0; i < ignored; ++i)
      b.targets[std::uniform_int_distribution<size_t>(0, b.targets.size() - 1)(rng_)] = -1;
    return b;
  }
  static int64_t count_valid(const Batch& b) {
    int64_t n = 0;
    for (int32_t t : b.targets) n += t != -1;
    return n;
  }

  // Norm weights drawn around 1 (Ones would leave their use in the forward untested).
  void perturb_norms(SimpleParams& p) {
    std::normal_distribution<float> n(0.0f, 0.2f);
    for (int g = 0; g < p.group_count(); ++g) {
      const GroupLayout& lay = p.layout(g);
      std::vector<float> v = p.params_host(g);
      for (size_t i = 0; i < lay.param_count(); ++i) {
        if (lay.spec().params[i].init != ParamInit::Ones) continue;
        for (int64_t j = 0; j < lay.spec().params[i].shape.numel(); ++j)
          v[static_cast<size_t>(lay.offset(i) + j)] += n(rng_);
      }
      p.set_params_host(g, v);
    }
  }

  // Weights of `p` by Hugging Face name, in float64.
  static RefWeights ref_weights(const SimpleParams& p) {
    RefWeights ws;
    for (int g = 0; g < p.group_count(); ++g) {
      const GroupLayout& lay = p.layout(g);
      const std::vector<float>& v = p.params_host(g);
      for (size_t i = 0; i < lay.param_count(); ++i) {
        const auto begin = v.begin() + lay.offset(i);
        ws[lay.spec().params[i].name] =
            std::vector<double>(begin, begin + lay.spec().params[i].shape.numel());
      }
    }
    return ws;
  }

  TensorBuffer upload_i32(const std::vector<int32_t>& v, Shape shape) {
    TensorBuffer b(dev(), DType::I32, shape, MemTag::Other, s(), "test.ids");
    dev().memcpy_async(b.view().data(), v.data(), v.size() * 4, s());
    s().synchronize();  // v may die after this call
    return b;
  }
  float download_scalar(const Tensor& t) {
    float v = 0.0f;
    dev().memcpy_async(&v, t.data(), 4, s());
    s().synchronize();
    return v;
  }

  // Zeroes p's gradients, runs one forward + backward, returns the loss and the gradients.
  RunResult run(model::Transformer& model, SimpleParams& p, const Batch& b, float loss_scale) {
    p.zero_grads();
    TensorBuffer tokens = upload_i32(b.tokens, Shape{b.batch, b.seq});
    TensorBuffer targets = upload_i32(b.targets, Shape{b.batch, b.seq});
    TensorBuffer loss(dev(), DType::F32, Shape{1}, MemTag::Other, s(), "test.loss");
    dev().ops().fill(s(), loss, 0.0);
    model.forward(p, s(), tokens, targets, loss_scale, loss);
    model.backward(p, s());
    RunResult r;
    r.loss = download_scalar(loss);
    for (int g = 0; g < p.group_count(); ++g) r.grads.push_back(p.grads_host(g));
    return r;
  }

 private:
};

}  // namespace moezero::test
