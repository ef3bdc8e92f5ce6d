// model/transformer.cpp — the decoder-only transformer: module wiring, the per-micro-batch
// state between forward and backward, and the parameter-group protocol (transformer.h).
#include "model/transformer.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/trace.h"
#include "layers/ffn_dense.h"
#include "model/recompute_params.h"
#include "moe/moe_layer.h"

namespace moezero::model {

bool is_moe_layer(const ModelConfig& cfg, int layer) {
  return cfg.num_experts > 0 && cfg.moe_every >= 1 && layer % cfg.moe_every == cfg.moe_every - 1;
}

std::unique_ptr<layers::FeedForward> make_feed_forward(const ModelConfig& cfg, int layer,
                                                       int first_group, const moe::MoeRuntime* rt,
                                                       int moe_index) {
  if (is_moe_layer(cfg, layer)) {
    moe::MoeRuntime single;  // one rank, no communication: tests and single-process use
    return std::make_unique<moe::MoeFeedForward>(cfg, rt ? *rt : single, layer, moe_index,
                                                 first_group);
  }
  return std::make_unique<layers::DenseSwiGLU>(cfg, layer, first_group);
}

void validate_model_config(const ModelConfig& c) {
  auto require = [](bool ok, const char* key, auto value, const char* why) {
    if (!ok) MOEZERO_THROW("model.", key, " = ", value, ": ", why);
  };
  require(c.vocab_size >= 1, "vocab_size", c.vocab_size, "must be >= 1");
  require(c.vocab_size <= (int64_t{1} << 31) - 1, "vocab_size", c.vocab_size,
          "must fit token ids in int32");
  require(c.d_model >= 1, "d_model", c.d_model, "must be >= 1");
  require(c.d_ff >= 1, "d_ff", c.d_ff, "must be >= 1");
  require(c.expert_d_ff >= 0, "expert_d_ff", c.expert_d_ff, "must be >= 0 (0: d_ff)");
  require(c.n_layers >= 1, "n_layers", c.n_layers, "must be >= 1");
  require(c.n_heads >= 1, "n_heads", c.n_heads, "must be >= 1");
  require(c.n_kv_heads >= 1, "n_kv_heads", c.n_kv_heads, "must be >= 1");
  require(c.d_model % c.n_heads == 0, "n_heads", c.n_heads,
          ("must divide model.d_model = " + std::to_string(c.d_model)).c_str());
  require((c.d_model / c.n_heads) % 2 == 0, "n_heads", c.n_heads,
          ("gives an odd head dim d_model / n_heads = " + std::to_string(c.d_model / c.n_heads) +
           ", but RoPE needs it even")
              .c_str());
  require(c.n_heads % c.n_kv_heads == 0, "n_kv_heads", c.n_kv_heads,
          ("must divide model.n_heads = " + std::to_string(c.n_heads)).c_str());
  require(c.seq_len >= 1, "seq_len", c.seq_len, "must be >= 1");
  require(c.rope_theta > 0.0, "rope_theta", c.rope_theta, "must be > 0");
  require(c.norm_eps >= 0.0, "norm_eps", c.norm_eps, "must be >= 0");
  require(c.init_std >= 0.0, "init_std", c.init_std, "must be >= 0");
  require(c.num_experts >= 0, "num_experts", c.num_experts, "must be >= 0 (0: dense)");
  require(c.num_shared_experts == 0 || c.num_experts > 0, "num_shared_experts",
          c.num_shared_experts, "needs MoE layers (model.num_experts > 0)");
  require(c.shared_expert_d_ff >= 0, "shared_expert_d_ff", c.shared_expert_d_ff,
          "must be >= 0 (0: the experts' width)");
}

// The activations of one micro-batch, from forward to backward.
struct Transformer::State {
  layers::ModuleContext ctx;
  float loss_scale = 1.0f;
  TensorBuffer tokens;     // i32 (B*T)
  TensorBuffer targets;    // i32 (B*T)
  TensorBuffer positions;  // i32 (B*T)
  // The residual stream, (B*T, C) each: resid[0] = x_0 (embeddings), resid[2l+1] = h_l,
  // resid[2l+2] = x_{l+1}; resid[2L] is the head's input.
  std::vector<TensorBuffer> resid;
  std::vector<layers::AttentionBlock::Saved> attn;
  std::vector<std::unique_ptr<layers::FeedForward::Saved>> ffn;
  layers::Head::Saved head;
};

Transformer::Transformer(const ModelConfig& cfg, const moe::MoeRuntime* rt)
    : cfg_((validate_model_config(cfg), cfg)), embed_(cfg, 0), head_(cfg, -1) {
  lookahead_ = !rt                    ? 1
               : rt->planning.planner ? rt->planning.planner->config().lookahead_layers
                                      : PrefetchConfig{}.lookahead_layers;
  trace_ = rt ? rt->report.trace : nullptr;
  int g = 1;  // 0 is the embedding
  int moe_index = 0;
  for (int l = 0; l < static_cast<int>(cfg_.n_layers); ++l) {
    attn_.emplace_back(cfg_, l, g);
    g += 1;
    ffn_.push_back(make_feed_forward(cfg_, l, g, rt, moe_index));
    moe_index += is_moe_layer(cfg_, l) ? 1 : 0;
    g += static_cast<int>(ffn_.back()->param_groups().size());
  }
  head_ = layers::Head(cfg_, g);
  group_count_ = g + 1;
}

Transformer::~Transformer() = default;

std::vector<GroupSpec> Transformer::param_groups() const {
  std::vector<GroupSpec> groups;
  groups.push_back(embed_.param_group());
  for (size_t l = 0; l < attn_.size(); ++l) {
    groups.push_back(attn_[l].param_group());
    for (GroupSpec& g : ffn_[l]->param_groups()) groups.push_back(std::move(g));
  }
  groups.push_back(head_.param_group());
  return groups;
}

void Transformer::check_provider(const ParamProvider& params) const {
  MOEZERO_CHECK(params.group_count() == group_count_, "the parameter provider has ",
                params.group_count(), " groups but the model has ", group_count_);
  const DType dt = params.compute_dtype();
  MOEZERO_CHECK(dt == DType::F32 || dt == DType::BF16, "the parameter provider's compute dtype is ",
                dtype_name(dt), " but the model runs in f32 or bf16");
  const std::vector<GroupSpec> groups = param_groups();
  for (int g = 0; g < group_count_; ++g) {
    const GroupSpec& have = params.layout(g).spec();
    MOEZERO_CHECK(have.name == groups[static_cast<size_t>(g)].name &&
                      have.params.size() == groups[static_cast<size_t>(g)].params.size(),
                  "provider group ", g, " is '", have.name, "' with ", have.params.size(),
                  " parameters; the model expects '", groups[static_cast<size_t>(g)].name,
                  "' with ", groups[static_cast<size_t>(g)].params.size());
  }
}

std::shared_ptr<const std::vector<int32_t>> Transformer::host_positions(int64_t batch,
                                                                        int64_t seq) {
  auto [it, inserted] = positions_host_.try_emplace({batch, seq});
  if (inserted) {
    auto v = std::make_shared<std::vector<int32_t>>(static_cast<size_t>(batch * seq));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < seq; ++t)
        (*v)[static_cast<size_t>(b * seq + t)] = static_cast<int32_t>(t);
    it->second = std::move(v);
  }
  return it->second;
}

void Transformer::discard_activations() { state_.reset(); }

namespace {
// The MoE FFNs in layer order.
template <typename F>
void for_each_moe(const std::vector<std::unique_ptr<layers::FeedForward>>& ffn, F&& f) {
  for (const auto& layer : ffn)
    if (auto* m = dynamic_cast<moe::MoeFeedForward*>(layer.get())) f(*m);
}
}  // namespace

void Transformer::update_expert_bias() {
  for_each_moe(ffn_, [](moe::MoeFeedForward& m) { m.update_expert_bias(); });
}

std::vector<std::vector<float>> Transformer::expert_biases() const {
  std::vector<std::vector<float>> out;
  for_each_moe(ffn_, [&](moe::MoeFeedForward& m) { out.push_back(m.expert_bias()); });
  return out;
}

void Transformer::set_expert_biases(const std::vector<std::vector<float>>& biases) {
  size_t i = 0;
  for_each_moe(ffn_, [&](moe::MoeFeedForward& m) {
    MOEZERO_REQUIRE(i < biases.size(), "expert biases: ", biases.size(),
                    " lists for more MoE layers");
    m.set_expert_bias(biases[i++]);
  });
  MOEZERO_REQUIRE(i == biases.size(), "expert biases: ", biases.size(), " lists for ", i,
                  " MoE layers");
}

Tensor Transformer::last_logits() const { return state_ ? state_->head.logits.view() : Tensor(); }

int Transformer::begin_module(Stream& s, const char* module, int layer, const char* pass) const {
  if (!trace_ || !trace_->tracing()) return -1;
  std::string name = layer >= 0 ? "layers." + std::to_string(layer) + "." + module : module;
  return trace_->begin_span(s, SpanKind::Compute, name + " " + pass);
}

void Transformer::end_module(int span) const {
  if (trace_) trace_->end_span(span);
}

void Transformer::forward(ParamProvider& params, Stream& s, const Tensor& tokens,
                          const Tensor& targets, float loss_scale, const Tensor& loss_out,
                          const moe::MicroBatchInfo& mb, const Tensor& aux_out) {
  state_.reset();
  check_provider(params);
  MOEZERO_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::I32,
                "Transformer::forward: tokens is ", tokens.str(), " but must be i32 (B, T)");
  MOEZERO_CHECK(targets.dtype() == DType::I32 && targets.shape() == tokens.shape(),
                "Transformer::forward: targets is ", targets.str(), " but must be i32 like tokens ",
                tokens.str());
  const int64_t B = tokens.dim(0), T = tokens.dim(1);
  MOEZERO_CHECK(B >= 1 && T >= 1, "Transformer::forward: empty batch ", tokens.str());
  MOEZERO_CHECK(T <= cfg_.seq_len, "Transformer::forward: T = ", T,
                " is longer than model.seq_len = ", cfg_.seq_len);
  MOEZERO_CHECK(loss_out.defined() && loss_out.dtype() == DType::F32 && loss_out.numel() == 1,
                "Transformer::forward: loss_out is ", loss_out.str(), " but must be f32 (1)");
  Device& dev = s.device();
  MOEZERO_CHECK(tokens.device() == &dev && targets.device() == &dev && loss_out.device() == &dev,
                "Transformer::forward: tokens, targets and loss_out must live on ", dev.name());

  auto st = std::make_unique<State>();
  layers::ModuleContext& ctx = st->ctx;
  ctx.stream = &s;
  ctx.dtype = params.compute_dtype();
  ctx.batch = B;
  ctx.seq = T;
  const int64_t R = B * T, C = cfg_.d_model, L = cfg_.n_layers;
  ctx.micro_batch = mb.index;
  ctx.token_offset = mb.token_offset;
  ctx.global_tokens = mb.global_tokens > 0 ? mb.global_tokens : R;
  ctx.loss_out = loss_out;
  ctx.aux_out = aux_out;
  st->loss_scale = loss_scale;

  st->tokens = ctx.alloc(DType::I32, Shape{R}, "tokens");
  st->targets = ctx.alloc(DType::I32, Shape{R}, "targets");
  st->positions = ctx.alloc(DType::I32, Shape{R}, "positions");
  const size_t ids_bytes = static_cast<size_t>(R) * sizeof(int32_t);
  dev.memcpy_async(st->tokens.view().data(), tokens.data(), ids_bytes, s);
  dev.memcpy_async(st->targets.view().data(), targets.data(), ids_bytes, s);
  auto pos_host = host_positions(B, T);
  dev.memcpy_async(st->positions.view().data(), pos_host->data(), ids_bytes, s);
  s.enqueue_host([keep = std::move(pos_host)] {});  // the host source lives until the copy ran
  ctx.positions = st->positions;

  st->resid.reserve(static_cast<size_t>(2 * L + 1));
  auto next_resid = [&](const char* what) -> const Tensor& {
    st->resid.push_back(ctx.alloc_act(Shape{R, C}, what));
    return st->resid.back().view();
  };

  int span = begin_module(s, "embed", -1, "fwd");
  embed_.forward(ctx, params, st->tokens, next_resid("x"));
  end_module(span);
  std::vector<char> prepared(attn_.size(), 0);
  for (size_t l = 0; l < attn_.size(); ++l) {
    const Tensor x = st->resid.back();
    // Expert prefetch: this layer's FFN just in time (overlapping its attention block), and with
    // moe.lookahead_layers = n the FFNs of the next n - 1 layers ahead (marginal statistics).
    const size_t ahead = static_cast<size_t>(std::max<int64_t>(1, lookahead_));
    for (size_t m = l; m < std::min(attn_.size(), l + ahead); ++m) {
      if (prepared[m]) continue;
      prepared[m] = 1;
      ffn_[m]->prepare(
          ctx, params,
          m == l ? layers::FeedForward::Prepare::JustInTime : layers::FeedForward::Prepare::Ahead);
    }
    const int layer = static_cast<int>(l);
    span = begin_module(s, "attn", layer, "fwd");
    st->attn.push_back(attn_[l].forward(ctx, params, x, next_resid("h")));
    end_module(span);
    if (checkpointing_ == ActivationCheckpointing::Selective)
      layers::AttentionBlock::drop_core_attention(st->attn.back());
    const Tensor h = st->resid.back();
    span = begin_module(s, is_moe_layer(cfg_, layer) ? "moe" : "ffn", layer, "fwd");
    st->ffn.push_back(ffn_[l]->forward(ctx, params, h, next_resid("x")));
    end_module(span);
    if (checkpointing_ == ActivationCheckpointing::Full) {  // keep x_l (and the routing) only
      st->attn.back() = layers::AttentionBlock::Saved();
      ffn_[l]->drop_for_recompute(*st->ffn.back());
      st->resid[st->resid.size() - 2].reset();  // h_l (stream-safe: freed after its last use)
    }
  }
  span = begin_module(s, "head", -1, "fwd");
  st->head = head_.forward(ctx, params, st->resid.back(), st->targets, loss_scale, loss_out);
  end_module(span);
  state_ = std::move(st);
}

void Transformer::set_activation_checkpointing(ActivationCheckpointing mode) {
  MOEZERO_CHECK(state_ == nullptr,
                "Transformer::set_activation_checkpointing between a forward and its backward");
  checkpointing_ = mode;
}

void Transformer::recompute_layer(size_t l, RecomputeParams& params, State& st) {
  const layers::ModuleContext& ctx = st.ctx;
  Stream& s = ctx.s();
  const int layer = static_cast<int>(l);
  const Shape rc{ctx.rows(), cfg_.d_model};
  // resid ends [..., x_l, h_l (dropped)]: rebuild h_l = x_l + attn(x_l), then the FFN's state.
  TensorBuffer& h = st.resid.back();
  const Tensor x = st.resid[st.resid.size() - 2].view();
  h = ctx.alloc_act(rc, "h");
  params.hold_releases();
  int span = begin_module(s, "attn", layer, "recompute");
  st.attn[l] = attn_[l].forward(ctx, params, x, h);
  end_module(span);
  span = begin_module(s, is_moe_layer(cfg_, layer) ? "moe" : "ffn", layer, "recompute");
  TensorBuffer out = ctx.alloc_act(rc, "recompute.x");  // x_{l+1} again: not used
  ffn_[l]->recompute(ctx, params, *st.ffn[l], h, out);
  end_module(span);
  params.stop_holding();
}

void Transformer::backward(ParamProvider& params, Stream& s) {
  MOEZERO_CHECK(state_ != nullptr, "Transformer::backward without a forward (or called twice)");
  std::unique_ptr<State> st = std::move(state_);
  const layers::ModuleContext& ctx = st->ctx;
  MOEZERO_CHECK(&s == ctx.stream, "Transformer::backward on stream '", s.name(),
                "' but the forward ran on '", ctx.stream->name(), "'");
  check_provider(params);
  MOEZERO_CHECK(params.compute_dtype() == ctx.dtype,
                "Transformer::backward: the provider's "
                "compute dtype changed since the forward");
  const int64_t R = ctx.rows(), C = cfg_.d_model;

  // Full checkpointing: every acquire goes through rp, which keeps a block's groups from its
  // recompute to its backward; otherwise the provider itself.
  RecomputeParams rp(params);
  const bool full = checkpointing_ == ActivationCheckpointing::Full;
  ParamProvider& pp = full ? static_cast<ParamProvider&>(rp) : params;

  // dL/d(residual stream), updated in place from the head down to the embedding.
  TensorBuffer dresid = ctx.alloc_act(Shape{R, C}, "dresid");
  int span = begin_module(s, "head", -1, "bwd");
  head_.backward(ctx, pp, st->head, st->resid.back(), st->targets, dresid);
  end_module(span);
  st->resid.pop_back();  // x_L
  for (size_t l = attn_.size(); l-- > 0;) {
    const int layer = static_cast<int>(l);
    if (full) recompute_layer(l, rp, *st);
    span = begin_module(s, is_moe_layer(cfg_, layer) ? "moe" : "ffn", layer, "bwd");
    ffn_[l]->backward(ctx, pp, std::move(st->ffn[l]), st->resid.back(), dresid);
    end_module(span);
    st->resid.pop_back();  // h_l
    // The next FFN in backward starts its (exact) expert gathers now, overlapping this layer's
    // attention backward.
    if (l > 0) ffn_[l - 1]->prepare_backward(ctx, pp, *st->ffn[l - 1]);
    span = begin_module(s, "attn", layer, "bwd");
    attn_[l].backward(ctx, pp, st->attn[l], st->resid.back(), dresid);
    end_module(span);
    st->resid.pop_back();  // x_l
    if (full) rp.finish_block(s);
  }
  span = begin_module(s, "embed", -1, "bwd");
  embed_.backward(ctx, pp, st->tokens, dresid);
  end_module(span);
  // st (and dresid) free here: stream-safe, after everything above has been enqueued.
}

}  // namespace moezero::model
