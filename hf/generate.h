// hf/generate.h — text generation: the model's forward one token at a time with a KV cache
// (fp32, world 1), and the sampling rules of `moezero generate`.
//
// Every step runs through the Device / Ops interface (core/ops.h), so the same code runs on
// the CPU backend and on a GPU (kernels/cuda): the weights are uploaded once, the cache lives on
// the device, and per token only the token id and position go up and the logits (V floats,
// plus E router probabilities per MoE layer, to pick the experts on the host) come back.
//
// The math is model/transformer.h's, evaluated per position: embedding, per layer
// x += attn(rmsnorm(x)) with RoPE at the token's absolute position against the cached keys and
// values of every earlier position (grouped-query heads; q/k/v biases with model.qkv_bias),
// x += ffn(rmsnorm(x)) (dense SwiGLU or the MoE layer's top-k experts of width expert_d_ff:
// softmax over the gate, top-k descending with ties to the lower expert, renormalised when
// normalize_top_k; no jitter, no capacity; plus the shared experts, gated when
// shared_expert_gate), then the final norm and lm_head. Softmax routing only: a model trained
// with sigmoid scores or a selection bias routes otherwise. tests/hf/generate_test.cpp checks its
// logits against the Transformer's forward.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/device.h"
#include "hf/hf_export.h"

namespace moezero::hf {

class KvGenerator {
 public:
  // [in] groups: every group of full_param_groups(model) by name (checked).
  // [in] device: where the forward runs (must outlive the generator); without one, a CPU
  // device of the generator's own.
  KvGenerator(const ModelConfig& model, bool normalize_top_k,
              const std::vector<GroupValues>& groups, Device* device = nullptr);
  ~KvGenerator();
  KvGenerator(const KvGenerator&) = delete;
  KvGenerator& operator=(const KvGenerator&) = delete;

  // Feeds `token` at position position() and returns the logits (vocab_size) of the next one;
  // the cache grows by one position. Throws when position() == model.seq_len (the context is
  // full) or the token is outside the vocabulary.
  const std::vector<float>& feed(int32_t token);
  void reset();  // empties the cache
  int64_t position() const { return pos_; }
  const ModelConfig& model() const { return model_; }
  Device& device() const { return *device_; }

 private:
  struct State;
  void attention(int64_t layer);                         // x += attn(rmsnorm(x)) at position pos_
  void feed_forward(int64_t layer);                      // x += ffn(rmsnorm(x))
  void expert(const std::string& prefix, float weight);  // x += weight * swiglu expert(xn)
  void swiglu(const std::string& prefix);                // y = the SwiGLU at prefix of xn
  void shared_experts(int64_t layer);                    // x += [sigmoid(xn . wg)] * shared(xn)

  ModelConfig model_;
  bool normalize_top_k_ = true;
  std::unique_ptr<Device> own_device_;  // when none was given
  Device* device_ = nullptr;
  std::unique_ptr<State> st_;  // device weights, cache and scratch
  std::vector<float> logits_;
  int64_t pos_ = 0;
};

struct Sampling {
  double temperature = 0.8;  // <= 0: greedy (argmax, ties to the lower id)
  int64_t top_k = 0;         // keep the k most likely tokens (0: all)
  double top_p = 1.0;        // keep the smallest most-likely set whose probability >= top_p
  uint64_t seed = 0;
};

// One token drawn from `logits` by the rules above, with `rng` (a pure function of the logits
// and the generator's state).
int32_t sample_token(const std::vector<float>& logits, const Sampling& s, std::mt19937_64& rng);

// Feeds the prompt (at least one token; at most model.seq_len) from an empty cache, then draws
// up to max_new_tokens tokens, stopping early when the context (model.seq_len) is full or at
// `eos` (>= 0). Returns the new tokens. Throws naming the lengths when the prompt is empty or
// longer than the context.
std::vector<int32_t> generate(KvGenerator& gen, const std::vector<int32_t>& prompt,
                              int64_t max_new_tokens, const Sampling& s, int32_t eos = -1);

}  // namespace moezero::hf
