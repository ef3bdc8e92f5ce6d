// moe/router.cpp — forward, finish and backward of the top-k router (router.h), written with
// the op table: gather_cols / scatter_add_cols move values between all-expert rows (N, E) and
// the top-k choices (N, k); expert_histogram counts selections; mul applies the jitter noise and
// the keep mask of dropped assignments; logsumexp gives the z-loss. GEMMs remain where the math
// is a product: the gate, column sums (ones @ probs) and rank-1 broadcasts (aux, z backward).
#include "moe/router.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "moe/router_host.h"

namespace moezero::moe {

namespace {

using router_host::Drops;
using router_host::noise_of;
using router_host::token_key;

// dst = host data, asynchronously; the host copy lives until the stream has passed the copy.
template <typename T>
void upload(Stream& s, std::vector<T> host, const Tensor& dst) {
  MOEZERO_CHECK(static_cast<int64_t>(host.size()) == dst.numel(), "router upload: ", host.size(),
                " values for ", dst.str());
  auto keep = std::make_shared<std::vector<T>>(std::move(host));
  s.device().memcpy_async(dst.data(), keep->data(), keep->size() * sizeof(T), s);
  s.enqueue_host([keep] {});
}

// c = alpha · op(a) @ op(b) + beta · c (the op table's gemm, shorter to call).
void mm(const layers::ModuleContext& ctx, const Tensor& a, const Tensor& b, const Tensor& c,
        float alpha = 1.0f, float beta = 0.0f, Transpose ta = Transpose::No,
        Transpose tb = Transpose::No) {
  ctx.ops().gemm(ctx.s(), GemmArgs{a, b, c, ta, tb, alpha, beta});
}

template <typename T>
std::vector<T> download(Stream& s, const Tensor& src) {
  std::vector<T> v(static_cast<size_t>(src.numel()));
  s.device().memcpy_async(v.data(), src.data(), v.size() * sizeof(T), s);
  return v;
}

}  // namespace

RouterConfig router_config(const ModelConfig& model, const MoeConfig& moe, uint64_t seed) {
  return RouterConfig{.num_experts = static_cast<int>(model.num_experts),
                      .top_k = static_cast<int>(model.top_k),
                      .normalize_top_k = moe.normalize_top_k,
                      .jitter = static_cast<float>(moe.router_jitter),
                      .aux_coef = static_cast<float>(moe.aux_loss_coef),
                      .z_coef = static_cast<float>(moe.z_loss_coef),
                      .capacity_factor = static_cast<float>(moe.capacity_factor),
                      .seed = seed,
                      .score = moe.score_function};
}

struct Router::State {
  Routing routing;
  int64_t n = 0, c = 0;
  TensorBuffer stats;   // f32 (3E)
  TensorBuffer probs;   // f32 (N, E)  softmax, or (sigmoid) the scores normalised per token
  TensorBuffer scores;  // f32 (N, E)  sigmoid only: sigmoid(logits) (softmax: probs)
  TensorBuffer zprobs;  // f32 (N, E)  sigmoid with z_coef > 0: softmax(logits), the z gradient
  TensorBuffer ids;     // i32 (N, k)  top-k choices before dropping
  TensorBuffer vals;    // f32 (N, k)  their scores (without the bias)
  TensorBuffer w_norm;  // f32 (N, k)  renormalised weights before dropping (normalize_top_k)
  TensorBuffer ones;    // f32 (N)     column sums and row broadcasts
  TensorBuffer lse;     // f32 (N)     logsumexp of the logits (z_coef > 0)
  TensorBuffer noise;   // f32 (N, C)  multiplicative jitter noise (training)
  TensorBuffer kept_ids, kept_w, keep;  // capacity: i32 (N*k), f32 (N, k), f32 (N, k) 1/0 mask
  int64_t global_tokens = 0;            // set by finish
  float scale = 1.0f;
  bool finished = false;

  const Tensor& weights_before_drop() const { return w_norm ? w_norm.view() : vals.view(); }
  const Tensor& score_view() const { return scores ? scores.view() : probs.view(); }
  const Tensor& z_probs() const { return zprobs ? zprobs.view() : probs.view(); }
};

Router::Router(const RouterConfig& cfg, int layer) : cfg_(cfg), layer_(layer) {
  const int e = cfg.num_experts, k = cfg.top_k;
  MOEZERO_CHECK(e >= 1, "router: num_experts is ", e, " but must be >= 1");
  MOEZERO_CHECK(k >= 1 && k <= e, "router: top_k is ", k, " but must be in [1, ", e, "]");
  MOEZERO_CHECK(std::isfinite(cfg.jitter) && cfg.jitter >= 0.0f && cfg.jitter < 1.0f,
                "router: jitter is ", cfg.jitter, " but must be in [0, 1)");
  MOEZERO_CHECK(std::isfinite(cfg.aux_coef) && cfg.aux_coef >= 0.0f, "router: aux_coef is ",
                cfg.aux_coef, " but must be finite and >= 0");
  MOEZERO_CHECK(std::isfinite(cfg.z_coef) && cfg.z_coef >= 0.0f, "router: z_coef is ", cfg.z_coef,
                " but must be finite and >= 0");
  MOEZERO_CHECK(std::isfinite(cfg.capacity_factor) && cfg.capacity_factor >= 0.0f,
                "router: capacity_factor is ", cfg.capacity_factor, " but must be finite and >= 0");
}

Router::~Router() = default;

void Router::set_bias(std::vector<float> bias) {
  MOEZERO_CHECK(bias.empty() || static_cast<int64_t>(bias.size()) == cfg_.num_experts,
                "router of layer ", layer_, ": bias has ", bias.size(), " values for ",
                cfg_.num_experts, " experts");
  for (float b : bias)
    MOEZERO_CHECK(std::isfinite(b), "router of layer ", layer_, ": bias value ", b,
                  " is not finite");
  bias_ = std::move(bias);
}

int64_t Router::capacity(int64_t tokens) const {
  if (cfg_.capacity_factor <= 0.0f || tokens <= 0) return 0;
  const double exact = static_cast<double>(cfg_.top_k) * static_cast<double>(tokens) *
                       static_cast<double>(cfg_.capacity_factor) / cfg_.num_experts;
  // A relative 1e-6 below: k·N·f/E that is an integer for the decimal f stays that integer
  // although f is stored in f32 (0.1f = 0.1000000015).
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(exact * (1.0 - 1e-6))));
}

double Router::jitter_noise(uint64_t seed, int layer, int64_t micro_batch, int64_t token,
                            int64_t channel, double eps) {
  return noise_of(token_key(seed, layer, micro_batch, token), channel, eps);
}

Router::Routing& Router::routing() {
  MOEZERO_CHECK(st_ != nullptr, "router of layer ", layer_,
                ": no routing (forward_local was not called, or backward already ran)");
  return st_->routing;
}

namespace {

// The gate input in f32: x itself (f32, no jitter), else a cast and/or the jittered product
// x · noise in `tmp`.
Tensor gate_input(const layers::ModuleContext& ctx, const Tensor& x, const Tensor& noise,
                  TensorBuffer& tmp) {
  Ops& ops = ctx.ops();
  Tensor x32 = x;
  if (x.dtype() != DType::F32) {
    tmp = ctx.alloc(DType::F32, x.shape(), "router.x32");
    ops.cast(ctx.s(), x, tmp);
    x32 = tmp;
  }
  if (!noise.defined()) return x32;
  TensorBuffer xj = ctx.alloc(DType::F32, x.shape(), "router.xj");
  ops.mul(ctx.s(), x32, noise, xj);
  tmp = std::move(xj);
  return tmp;
}

Tensor gate_f32(const layers::ModuleContext& ctx, const Tensor& gate, TensorBuffer& tmp) {
  if (gate.dtype() == DType::F32) return gate;
  tmp = ctx.alloc(DType::F32, gate.shape(), "router.gate32");
  ctx.ops().cast(ctx.s(), gate, tmp);
  return tmp;
}

}  // namespace

Router::Routing& Router::forward_local(const layers::ModuleContext& ctx, const Tensor& x,
                                       const Tensor& gate, int64_t token_offset,
                                       int64_t micro_batch, RouterMode mode,
                                       std::span<const int64_t> forced) {
  const int64_t E = cfg_.num_experts;
  MOEZERO_CHECK(x.rank() == 2 && x.dtype() == ctx.dtype, "router forward of layer ", layer_,
                ": x is ", x.str(), " but must be (N, C) ", dtype_name(ctx.dtype));
  const int64_t N = x.dim(0), C = x.dim(1);
  MOEZERO_CHECK(gate.shape() == (Shape{E, C}) && gate.dtype() == ctx.dtype, "router forward of ",
                "layer ", layer_, ": gate is ", gate.str(), " but must be ", dtype_name(ctx.dtype),
                "(", E, ", ", C, ")");
  MOEZERO_CHECK(token_offset >= 0, "router forward: token_offset is ", token_offset);
  MOEZERO_CHECK(forced.empty() || cfg_.capacity_factor == 0.0f, "router forward of layer ", layer_,
                ": forced counts need capacity_factor 0");

  st_.reset();
  std::unique_ptr<State> st = new_state(ctx, N, C);
  State& state = *st;
  if (N == 0) {
    ctx.ops().fill(ctx.s(), state.stats, 0.0);
  } else {
    if (mode == RouterMode::Train && cfg_.jitter > 0.0f)
      make_noise(ctx, state, token_offset, micro_batch);
    const TensorBuffer logits = select(ctx, state, x, gate, forced);
    local_statistics(ctx, state);
    if (cfg_.z_coef > 0.0f) logsumexp(ctx, state, logits);
    const RouterStats layout = stats_layout();
    if (state.routing.capacity == 0)
      ctx.ops().cast(ctx.s(), layout.selected(state.stats), layout.kept(state.stats));
    else
      drop_over_capacity(ctx, state);
  }
  st_ = std::move(st);
  return st_->routing;
}

std::unique_ptr<Router::State> Router::new_state(const layers::ModuleContext& ctx, int64_t N,
                                                 int64_t C) const {
  const int64_t E = cfg_.num_experts, k = cfg_.top_k;
  auto st = std::make_unique<State>();
  st->n = N;
  st->c = C;
  st->stats = ctx.alloc(DType::F32, Shape{stats_layout().numel()}, "router.stats");
  st->probs = ctx.alloc(DType::F32, Shape{N, E}, "router.probs");
  st->ids = ctx.alloc(DType::I32, Shape{N, k}, "router.ids");
  st->vals = ctx.alloc(DType::F32, Shape{N, k}, "router.vals");
  st->routing = Routing{.tokens = N,
                        .capacity = capacity(N),
                        .expert_ids = st->ids.view().reshape({N * k}),
                        .weights = st->vals,
                        .probs = st->probs,
                        .stats = st->stats};
  return st;
}

void Router::make_noise(const layers::ModuleContext& ctx, State& st, int64_t token_offset,
                        int64_t micro_batch) const {
  // Noise on the host, keyed by the global token index (world-size independent).
  const int64_t N = st.n, C = st.c;
  std::vector<float> g(static_cast<size_t>(N * C));
  for (int64_t t = 0; t < N; ++t) {
    const uint64_t key = token_key(cfg_.seed, layer_, micro_batch, token_offset + t);
    for (int64_t ch = 0; ch < C; ++ch)
      g[t * C + ch] = static_cast<float>(noise_of(key, ch, cfg_.jitter));
  }
  st.noise = ctx.alloc(DType::F32, Shape{N, C}, "router.noise");
  upload(ctx.s(), std::move(g), st.noise);
}

std::vector<int32_t> Router::forced_choices(std::span<const int64_t> counts, int64_t tokens,
                                            int top_k) {
  const int64_t k = top_k;
  int64_t sum = 0;
  for (int64_t c : counts) {
    MOEZERO_CHECK(c >= 0 && c <= tokens, "forced routing: count ", c, " outside [0, ", tokens, "]");
    sum += c;
  }
  MOEZERO_CHECK(sum == tokens * k, "forced routing: counts sum to ", sum, " but ", tokens,
                " tokens x top_k ", k, " = ", tokens * k);
  std::vector<int32_t> ids(static_cast<size_t>(tokens * k));
  int64_t p = 0;
  for (size_t e = 0; e < counts.size(); ++e)
    for (int64_t i = 0; i < counts[e]; ++i, ++p)
      ids[static_cast<size_t>((p % tokens) * k + p / tokens)] = static_cast<int32_t>(e);
  return ids;
}

TensorBuffer Router::select(const layers::ModuleContext& ctx, State& st, const Tensor& x,
                            const Tensor& gate, std::span<const int64_t> forced) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t E = cfg_.num_experts, k = cfg_.top_k, N = st.n;
  // logits (N, E) = xj @ Wg^T in f32; scores and probs; top-k.
  TensorBuffer x_tmp, gate_tmp;
  const Tensor xj = gate_input(ctx, x, st.noise ? st.noise.view() : Tensor(), x_tmp);
  const Tensor wg = gate_f32(ctx, gate, gate_tmp);
  TensorBuffer logits = ctx.alloc(DType::F32, Shape{N, E}, "router.logits");
  mm(ctx, xj, wg, logits, 1.0f, 0.0f, Transpose::No, Transpose::Yes);
  x_tmp.reset();
  gate_tmp.reset();
  const bool sigmoid = cfg_.score == ScoreFunction::Sigmoid;
  if (sigmoid) {
    st.scores = ctx.alloc(DType::F32, Shape{N, E}, "router.scores");
    ops.sigmoid_forward(s, logits, st.scores);
    ops.normalize_rows(s, st.scores, st.probs);
  } else {
    ops.softmax_forward(s, logits, st.probs);
  }
  const Tensor scores = st.score_view();
  if (!forced.empty()) {  // moe.routing_replay: the recorded counts, their scores
    MOEZERO_CHECK(static_cast<int64_t>(forced.size()) == E, "router forward of layer ", layer_,
                  ": ", forced.size(), " forced counts for ", E, " experts");
    upload(s, forced_choices(forced, N, static_cast<int>(k)), st.ids.view());
    ops.gather_cols(s, scores, st.ids, st.vals);
  } else if (bias_.empty()) {
    ops.topk(s, scores, static_cast<int>(k), st.vals, st.ids);
  } else {  // choose on scores + bias; keep the unbiased scores of the chosen experts
    TensorBuffer b = ctx.alloc(DType::F32, Shape{1, E}, "router.bias");
    upload(s, bias_, b);
    TensorBuffer biased = ctx.alloc(DType::F32, Shape{N, E}, "router.biased");
    ops.cast(s, scores, biased);
    mm(ctx, ones(ctx, st).reshape({N, 1}), b, biased, 1.0f, 1.0f);
    ops.topk(s, biased, static_cast<int>(k), st.vals, st.ids);
    ops.gather_cols(s, scores, st.ids, st.vals);
  }

  if (cfg_.normalize_top_k) {
    st.w_norm = ctx.alloc(DType::F32, Shape{N, k}, "router.w_norm");
    if (sigmoid) {  // s_j / Σ_j s_j
      ops.normalize_rows(s, st.vals, st.w_norm);
    } else {  // softmax over the chosen logits (= p_j / Σ_j p_j)
      ops.gather_cols(s, logits, st.ids, st.w_norm);
      ops.softmax_forward(s, st.w_norm, st.w_norm);
    }
    st.routing.weights = st.w_norm;
  }
  return logits;
}

Tensor Router::ones(const layers::ModuleContext& ctx, State& st) const {
  if (!st.ones) {
    st.ones = ctx.alloc(DType::F32, Shape{st.n}, "router.ones");
    ctx.ops().fill(ctx.s(), st.ones, 1.0);
  }
  return st.ones;
}

void Router::local_statistics(const layers::ModuleContext& ctx, State& st) const {
  // Selections per expert, Σ_t probs (the kept counts follow: dropless or capacity).
  const int64_t E = cfg_.num_experts, N = st.n;
  const RouterStats layout = stats_layout();
  TensorBuffer counts = ctx.alloc(DType::I32, Shape{E}, "router.counts");
  ctx.ops().expert_histogram(ctx.s(), st.routing.expert_ids, static_cast<int>(E), counts);
  ctx.ops().cast(ctx.s(), counts, layout.selected(st.stats).reshape({E}));
  mm(ctx, ones(ctx, st).reshape({1, N}), st.probs, layout.prob_sum(st.stats));
}

void Router::logsumexp(const layers::ModuleContext& ctx, State& st, const Tensor& logits) const {
  st.lse = ctx.alloc(DType::F32, Shape{st.n}, "router.lse");
  ctx.ops().logsumexp(ctx.s(), logits, st.lse);
  if (cfg_.score == ScoreFunction::Sigmoid) {  // the z gradient needs softmax(logits)
    st.zprobs = ctx.alloc(DType::F32, Shape{st.n, cfg_.num_experts}, "router.zprobs");
    ctx.ops().softmax_forward(ctx.s(), logits, st.zprobs);
  }
}

void Router::drop_over_capacity(const layers::ModuleContext& ctx, State& st) const {
  // Decided on the host (one host synchronisation).
  Stream& s = ctx.s();
  const int64_t E = cfg_.num_experts, k = cfg_.top_k, N = st.n;
  const std::vector<int32_t> ids = download<int32_t>(s, st.ids);
  const std::vector<float> probs = download<float>(s, st.vals);
  std::vector<float> w = download<float>(s, st.weights_before_drop());
  s.synchronize();
  Drops d = router_host::drop_over_capacity(ids, probs, std::move(w), k, E, st.routing.capacity);
  st.kept_ids = ctx.alloc(DType::I32, Shape{N * k}, "router.kept_ids");
  st.kept_w = ctx.alloc(DType::F32, Shape{N, k}, "router.kept_w");
  st.keep = ctx.alloc(DType::F32, Shape{N, k}, "router.keep");
  upload(s, std::move(d.kept_ids), st.kept_ids);
  upload(s, std::move(d.w), st.kept_w);
  upload(s, std::move(d.keep), st.keep);
  upload(s, std::move(d.kept), stats_layout().kept(st.stats).reshape({E}));
  st.routing.expert_ids = st.kept_ids;
  st.routing.weights = st.kept_w;
}

void Router::finish(const layers::ModuleContext& ctx, int64_t global_tokens, float scale,
                    const Tensor& loss_out, const Tensor& aux_out, const Tensor& z_out) {
  routing();  // throws when there is no state
  State& st = *st_;
  const int64_t E = cfg_.num_experts, N = st.n;
  MOEZERO_CHECK(global_tokens >= N, "router finish of layer ", layer_, ": global_tokens ",
                global_tokens, " < local tokens ", N);
  MOEZERO_CHECK(std::isfinite(scale), "router finish: scale is ", scale);
  MOEZERO_CHECK(loss_out.defined(), "router finish: loss_out is undefined");
  for (const Tensor* t : {&loss_out, &aux_out, &z_out}) {
    MOEZERO_CHECK(!t->defined() || (t->dtype() == DType::F32 && t->numel() == 1),
                  "router finish: loss outputs must be f32 (1), got ", t->str());
  }
  st.global_tokens = global_tokens;
  st.scale = scale;
  st.finished = true;
  if (global_tokens == 0) return;
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const double ng = static_cast<double>(global_tokens);
  // aux = E/N_g² · Σ_e selected_e · probsum_e, as (1, E) @ (E, 1).
  const RouterStats layout = stats_layout();
  auto add_aux = [&](const Tensor& out, double alpha) {
    mm(ctx, layout.selected(st.stats), layout.prob_sum(st.stats).reshape({E, 1}),
       out.reshape({1, 1}), static_cast<float>(alpha), 1.0f);
  };
  if (cfg_.aux_coef > 0.0f && N > 0)
    add_aux(loss_out, scale * cfg_.aux_coef * E * (static_cast<double>(N) / ng) / (ng * ng));
  if (aux_out.defined()) add_aux(aux_out, E / (ng * ng));
  if (cfg_.z_coef > 0.0f && N > 0) {
    TensorBuffer zsum = ctx.alloc(DType::F32, Shape{1}, "router.zsum");
    ops.fill(s, zsum, 0.0);
    ops.sum_squares(s, st.lse, zsum);
    ops.axpy(s, static_cast<float>(scale * cfg_.z_coef / ng), zsum, loss_out);
    if (z_out.defined()) ops.axpy(s, static_cast<float>(1.0 / ng), zsum, z_out);
  }
}

void Router::backward(const layers::ModuleContext& ctx, const Tensor& dweights, const Tensor& x,
                      const Tensor& gate, const Tensor& dx, const Tensor& dgate) {
  routing();  // throws when there is no state
  State& st = *st_;
  const int64_t E = cfg_.num_experts, k = cfg_.top_k, N = st.n, C = st.c;
  const bool aux = cfg_.aux_coef > 0.0f, z = cfg_.z_coef > 0.0f;
  MOEZERO_CHECK(st.finished || !(aux || z), "router backward of layer ", layer_,
                ": finish() was not called (aux_coef or z_coef > 0 needs N_global)");
  MOEZERO_CHECK(dweights.shape() == (Shape{N, k}) && dweights.dtype() == DType::F32,
                "router backward: dweights is ", dweights.str(), " but must be f32(", N, ", ", k,
                ")");
  MOEZERO_CHECK(x.shape() == (Shape{N, C}) && x.dtype() == ctx.dtype && dx.shape() == x.shape() &&
                    dx.dtype() == x.dtype(),
                "router backward: x is ", x.str(), " and dx ", dx.str(), " but forward had (", N,
                ", ", C, ") ", dtype_name(ctx.dtype));
  MOEZERO_CHECK(
      gate.shape() == (Shape{E, C}) && dgate.shape() == gate.shape() && dgate.dtype() == DType::F32,
      "router backward: gate is ", gate.str(), " and dgate ", dgate.str(), " but must be (", E,
      ", ", C, ") and f32(", E, ", ", C, ")");
  if (N == 0 || st.global_tokens == 0) {
    st_.reset();
    return;
  }
  TensorBuffer dw_kept;
  const Tensor dw = kept_dweights(ctx, st, dweights, dw_kept);
  TensorBuffer dlogits = logits_backward(ctx, st, dw);
  input_backward(ctx, st, dlogits, x, gate, dx, dgate);
  st_.reset();
}

Tensor Router::kept_dweights(const layers::ModuleContext& ctx, const State& st,
                             const Tensor& dweights, TensorBuffer& tmp) const {
  // Dropped assignments contribute nothing: dw · keep.
  if (!st.keep) return dweights;
  tmp = ctx.alloc(DType::F32, Shape{st.n, cfg_.top_k}, "router.dw_kept");
  ctx.ops().mul(ctx.s(), dweights, st.keep, tmp);
  return tmp;
}

TensorBuffer Router::logits_backward(const layers::ModuleContext& ctx, const State& st,
                                     const Tensor& dw) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t E = cfg_.num_experts, k = cfg_.top_k, N = st.n;
  const bool aux = cfg_.aux_coef > 0.0f;
  const double ng = static_cast<double>(st.global_tokens);
  // dprobs (aux part) = scale·aux_coef·E/N_g² · selected_e, broadcast over rows.
  TensorBuffer dlogits = ctx.alloc(DType::F32, Shape{N, E}, "router.dlogits");
  TensorBuffer dprobs = ctx.alloc(DType::F32, Shape{N, E}, "router.dprobs");
  if (aux) {
    mm(ctx, st.ones.view().view_elems(0, {N, 1}), stats_layout().selected(st.stats), dprobs,
       static_cast<float>(st.scale * cfg_.aux_coef * E / (ng * ng)));
  }
  if (cfg_.score == ScoreFunction::Sigmoid) {
    sigmoid_scores_backward(ctx, st, dw, aux ? dprobs.view() : Tensor(), dlogits);
  } else if (cfg_.normalize_top_k) {  // d(chosen logits) = softmax_backward(w, dw), scattered
    if (aux) {
      ops.softmax_backward(s, st.probs, dprobs, dlogits);
    } else {
      ops.fill(s, dlogits, 0.0);
    }
    TensorBuffer dchosen = ctx.alloc(DType::F32, Shape{N, k}, "router.dchosen");
    ops.softmax_backward(s, st.w_norm, dw, dchosen);
    ops.scatter_add_cols(s, dchosen, st.ids, dlogits);
  } else {  // dprobs += dw scattered
    if (!aux) ops.fill(s, dprobs, 0.0);
    ops.scatter_add_cols(s, dw, st.ids, dprobs);
    ops.softmax_backward(s, st.probs, dprobs, dlogits);
  }
  dprobs.reset();
  if (cfg_.z_coef > 0.0f) {  // dlogits_t += scale·z_coef·2·lse_t/N_g · probs_t
    mm(ctx, st.lse.view().reshape({N, 1, 1}), st.z_probs().reshape({N, 1, E}),
       dlogits.view().reshape({N, 1, E}), static_cast<float>(2.0 * st.scale * cfg_.z_coef / ng),
       1.0f);
  }
  return dlogits;
}

void Router::sigmoid_scores_backward(const layers::ModuleContext& ctx, const State& st,
                                     const Tensor& dw, const Tensor& dprobs,
                                     const Tensor& dlogits) const {
  // With s = sigmoid(l), ds/dl = s (1 - s), and for y = v / Σ v (probs from scores, normalised
  // weights from chosen scores) dL/dv_j · v_j = softmax_backward(y, dy)_j (both equal
  // y_j (dy_j - Σ_i dy_i y_i)), so no division by s is needed:
  //   G = softmax_backward(probs, dprobs) + scatter(softmax_backward(w, dw))   (normalised)
  //   G = softmax_backward(probs, dprobs) + scatter(dw ⊙ s_chosen)              (raw)
  //   dlogits = G ⊙ (1 - s).
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t E = cfg_.num_experts, k = cfg_.top_k, N = st.n;
  if (dprobs.defined()) {
    ops.softmax_backward(s, st.probs, dprobs, dlogits);
  } else {
    ops.fill(s, dlogits, 0.0);
  }
  TensorBuffer dchosen = ctx.alloc(DType::F32, Shape{N, k}, "router.dchosen");
  if (cfg_.normalize_top_k) {
    ops.softmax_backward(s, st.w_norm, dw, dchosen);
  } else {
    ops.mul(s, dw, st.vals, dchosen);
  }
  ops.scatter_add_cols(s, dchosen, st.ids, dlogits);
  TensorBuffer one_minus = ctx.alloc(DType::F32, Shape{N, E}, "router.one_minus_s");
  ops.fill(s, one_minus, 1.0);
  ops.axpy(s, -1.0f, st.scores, one_minus);
  ops.mul(s, dlogits, one_minus, dlogits);
}

void Router::input_backward(const layers::ModuleContext& ctx, const State& st,
                            const Tensor& dlogits, const Tensor& x, const Tensor& gate,
                            const Tensor& dx, const Tensor& dgate) const {
  // dWg += dlogits^T @ xj (xj recomputed); dx += (dlogits @ Wg) · noise.
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t N = st.n, C = st.c;
  const Tensor noise = st.noise ? st.noise.view() : Tensor();
  {
    TensorBuffer x_tmp;
    const Tensor xj = gate_input(ctx, x, noise, x_tmp);
    mm(ctx, dlogits, xj, dgate, 1.0f, 1.0f, Transpose::Yes);
  }
  TensorBuffer gate_tmp;
  const Tensor wg = gate_f32(ctx, gate, gate_tmp);
  if (!noise.defined() && dx.dtype() == DType::F32) {
    mm(ctx, dlogits, wg, dx, 1.0f, 1.0f);
  } else {
    TensorBuffer dx32 = ctx.alloc(DType::F32, Shape{N, C}, "router.dx32");
    mm(ctx, dlogits, wg, dx32);
    if (noise.defined()) {
      ops.mul(s, dx32, noise, dx32);
    }
    ops.axpy(s, 1.0f, dx32, dx);
  }
}

}  // namespace moezero::moe
