// hf/hf_score.cpp — forward-only evaluation of a model on a byte file (see hf_score.h).
#include "hf/hf_score.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>

#include "comm/world.h"
#include "core/error.h"
#include "core/ops.h"
#include "hf/bpe_tokenizer.h"
#include "model/transformer.h"
#include "moe/moe_runtime.h"
#include "zero/zero_engine.h"

namespace moezero::hf {

namespace {

// The number of whole (T + 1)-token windows in `text`, checking that there is at least one
// and that every token they use is below the model's vocab_size. `unit`: "byte" or "token".
int64_t count_windows(const std::vector<int32_t>& text, int64_t T, int64_t vocab_size,
                      const std::string& text_name, const char* unit) {
  const auto windows = static_cast<int64_t>(text.size()) / (T + 1);
  if (windows == 0)
    MOEZERO_USER_ERROR("score: ", text_name, " has ", text.size(), " ", unit,
                       "s, fewer than one window of T + 1 = ", T + 1, " ", unit,
                       "s (T = --seq-len)");
  const int64_t used = windows * (T + 1);
  for (int64_t i = 0; i < used; ++i)
    if (text[static_cast<size_t>(i)] >= vocab_size)
      MOEZERO_USER_ERROR("score: ", text_name, " has ", unit, " ", text[static_cast<size_t>(i)],
                         " at offset ", i, ", outside the model's vocab_size (", vocab_size, ")",
                         std::string(unit) == "byte" ? ": tokens are bytes" : "");
  return windows;
}

// Inference: no jitter, no capacity drops, no aux or z loss in the number.
MoeConfig inference_moe(const MoeConfig& moe_in) {
  MoeConfig moe;
  moe.normalize_top_k = moe_in.normalize_top_k;
  moe.aux_loss_coef = 0.0;
  moe.z_loss_coef = 0.0;
  moe.router_jitter = 0.0;
  moe.capacity_factor = 0.0;
  return moe;
}

// Sets every engine group's full parameters from the group of the same name.
void load_group_values(ZeroEngine& engine, const std::vector<GroupValues>& groups) {
  std::map<std::string, const GroupValues*> by_name;
  for (const GroupValues& g : groups) by_name[g.name] = &g;
  for (int g = 0; g < engine.group_count(); ++g) {
    const std::string& name = engine.layout(g).spec().name;
    auto it = by_name.find(name);
    MOEZERO_REQUIRE(it != by_name.end(), "score: parameter group '", name, "' is missing");
    engine.set_full_params_host(g, it->second->data);
  }
}

// Inputs and next-byte targets of windows [w0, w0 + B), each T tokens, row-major [B, T].
void fill_window_batch(const std::vector<int32_t>& text, int64_t w0, int64_t B, int64_t T,
                       std::vector<int32_t>& tok, std::vector<int32_t>& tgt) {
  tok.resize(static_cast<size_t>(B * T));
  tgt.resize(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* win = text.data() + (w0 + b) * (T + 1);
    for (int64_t t = 0; t < T; ++t) {
      tok[static_cast<size_t>(b * T + t)] = win[t];
      tgt[static_cast<size_t>(b * T + t)] = win[t + 1];
    }
  }
}

// Runs the forward pass over every window, batch_windows at a time, and returns the summed
// loss over all targets; keeps the first window's logits in `result` when asked.
double sum_window_losses(Device& dev, Stream& cs, model::Transformer& net, ZeroEngine& engine,
                         const std::vector<int32_t>& text, int64_t windows, int64_t T,
                         int64_t vocab_size, const ScoreOptions& options, ScoreResult& result) {
  double loss_sum = 0.0;
  std::vector<int32_t> tok, tgt;
  for (int64_t w0 = 0; w0 < windows; w0 += options.batch_windows) {
    const int64_t B = std::min(options.batch_windows, windows - w0);
    fill_window_batch(text, w0, B, T, tok, tgt);
    TensorBuffer tokens(dev, DType::I32, Shape{B, T}, MemTag::Activation, cs, "tokens");
    TensorBuffer targets(dev, DType::I32, Shape{B, T}, MemTag::Activation, cs, "targets");
    TensorBuffer loss(dev, DType::F32, Shape{1}, MemTag::Other, cs, "loss");
    dev.memcpy_async(tokens.view().data(), tok.data(), tok.size() * 4, cs);
    dev.memcpy_async(targets.view().data(), tgt.data(), tgt.size() * 4, cs);
    dev.ops().fill(cs, loss, 0.0);
    net.forward(engine, cs, tokens, targets, 1.0f, loss);
    float batch_loss = 0.0f;  // the sum over this batch's B*T targets
    dev.memcpy_async(&batch_loss, loss.view().data(), sizeof(float), cs);
    if (w0 == 0 && options.keep_first_logits) {
      result.first_logits.resize(static_cast<size_t>(T * vocab_size));
      dev.memcpy_async(result.first_logits.data(), net.last_logits().data(),
                       result.first_logits.size() * sizeof(float), cs);
    }
    cs.synchronize();
    net.discard_activations();
    loss_sum += batch_loss;
  }
  return loss_sum;
}

}  // namespace

ScoreResult score_bytes(const ModelConfig& model, const MoeConfig& moe,
                        const std::vector<GroupValues>& groups, const std::vector<uint8_t>& text,
                        const ScoreOptions& options, const std::string& text_name) {
  const std::vector<int32_t> tokens(text.begin(), text.end());
  return score_tokens(model, moe, groups, tokens, options, text_name, "byte");
}

ScoreResult score_tokens(const ModelConfig& model_in, const MoeConfig& moe_in,
                         const std::vector<GroupValues>& groups, const std::vector<int32_t>& text,
                         const ScoreOptions& options, const std::string& text_name,
                         const char* unit) {
  ModelConfig model = model_in;
  const int64_t T = options.seq_len > 0 ? options.seq_len : model.seq_len;
  MOEZERO_REQUIRE(T >= 1, "score: the sequence length must be >= 1, got ", T);
  MOEZERO_REQUIRE(options.batch_windows >= 1, "score: batch_windows must be >= 1");
  model.seq_len = std::max(model.seq_len, T);  // RoPE has no table: any length is well defined
  const int64_t windows = count_windows(text, T, model.vocab_size, text_name, unit);
  const MoeConfig moe = inference_moe(moe_in);

  ScoreResult result;
  result.windows = windows;
  result.tokens = windows * T;
  result.seq_len = T;
  double loss_sum = 0.0;
  comm::World::run(1, [&](comm::RankContext& ctx) {
    Device& dev = *ctx.device;
    EngineStreams streams{&dev.create_stream("compute"), &dev.create_stream("gather"),
                          &dev.create_stream("reduce")};
    Stream& cs = *streams.compute;
    const ProcessGroup wg = ctx.world_group();
    auto gather = ctx.communicator(wg, "gather");
    auto reduce = ctx.communicator(wg, "reduce");
    auto misc = ctx.communicator(wg, "misc");
    moe::MoeRuntime rt;
    rt.options.moe = moe;
    model::Transformer net(model, &rt);
    ZeroOptions zo;
    zo.zero.stage = 0;  // one rank: everything resident
    zo.compute_dtype = DType::F32;
    ZeroEngine engine(
        dev, streams, net.param_groups(),
        [&](const GroupSpec&) {
          return GroupComms{gather.get(), reduce.get()};
        },
        *misc, zo);
    load_group_values(engine, groups);
    loss_sum = sum_window_losses(dev, cs, net, engine, text, windows, T, model.vocab_size, options,
                                 result);
    dev.synchronize();
  });
  result.loss = loss_sum / static_cast<double>(result.tokens);
  if (!std::isfinite(result.loss))
    MOEZERO_USER_ERROR("score: the loss on ", text_name, " is not finite (", result.loss,
                       "): the model's outputs overflow");
  return result;
}

ScoreResult score_hf_dir(const std::string& model_dir, const std::string& text_path,
                         const ScoreOptions& options) {
  const HfModel hf = read_hf_dir(model_dir);
  const std::vector<GroupValues> groups = hf_group_values(hf);
  require_finite_params(groups, "score", model_dir);
  std::ifstream in(text_path, std::ios::binary);
  if (!in) MOEZERO_USER_ERROR("score: cannot read the text file '", text_path, "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (options.tokenizer.empty()) {
    std::vector<int32_t> as_ints;
    as_ints.reserve(text.size());
    for (char c : text) as_ints.push_back(static_cast<uint8_t>(c));
    return score_tokens(hf.model, hf.moe, groups, as_ints, options, text_path, "byte");
  }
  const BpeTokenizer tok(options.tokenizer);
  MOEZERO_REQUIRE(tok.vocab_size() <= hf.model.vocab_size, "score: the tokenizer '",
                  options.tokenizer, "' has ", tok.vocab_size(),
                  " token ids, more than the model's vocab_size (", hf.model.vocab_size, ")");
  return score_tokens(hf.model, hf.moe, groups, tok.encode(text), options, text_path, "token");
}

std::string score_json(const ScoreResult& r) {
  char buf[96];
  // JSON has no NaN or infinity: a non-finite loss is null.
  if (std::isfinite(r.loss))
    std::snprintf(buf, sizeof buf, "{\"tokens\": %lld, \"loss\": %.17g}",
                  static_cast<long long>(r.tokens), r.loss);
  else
    std::snprintf(buf, sizeof buf, "{\"tokens\": %lld, \"loss\": null}",
                  static_cast<long long>(r.tokens));
  return buf;
}

}  // namespace moezero::hf
