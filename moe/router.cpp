// moe/router.cpp — forward, finish and backward of the top-k router (router.h). Compositions
// for ops the table lacks (candidates for core/ops.h):
// - One-hot rows: onehot (N*k, E) f32 = embedding_forward(top-k ids, identity (E, E)); gathers at
//   the choices and scatters of (N, k) into (N, E) are batched GEMMs with batch N, (N, k, E) @
//   (N, E, 1) and (N, 1, k) @ (N, k, E): exact (products with 1 and 0). Counts: ones @ onehot.
// - Elementwise multiply (jitter): swiglu_backward's dup = dout · silu(g), g = silu^-1(noise)
//   from the host; the device factor is silu(f32(g)) ≈ noise.
// - Masking dropped assignments of dweights: (N, 1, k) @ diag(keep) (N, k, k), built on the host
//   in the (already synchronising) capacity path.
// - logsumexp (z-loss): cross_entropy_forward(logits, target 0) + logits @ e0 (beta = 1).
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
using router_host::silu_inverse;
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
void mm(const ModuleContext& ctx, const Tensor& a, const Tensor& b, const Tensor& c,
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
                      .seed = seed};
}

struct Router::State {
  Routing routing;
  int64_t n = 0, c = 0;
  TensorBuffer stats;    // f32 (3E)
  TensorBuffer probs;    // f32 (N, E)
  TensorBuffer ids;      // i32 (N, k)  top-k choices before dropping
  TensorBuffer vals;     // f32 (N, k)  their probabilities
  TensorBuffer onehot;   // f32 (N*k, E)
  TensorBuffer w_norm;   // f32 (N, k)  renormalised weights before dropping (normalize_top_k)
  TensorBuffer ones;     // f32 (N*k)
  TensorBuffer lse;      // f32 (N)     logsumexp of the logits (z_coef > 0)
  TensorBuffer noise_g;  // f32 (N, C)  silu^-1(noise) (jitter, training)
  TensorBuffer kept_ids, kept_w, keep_diag;  // capacity: i32 (N*k), f32 (N, k), f32 (N, k, k)
  int64_t global_tokens = 0;                 // set by finish
  float scale = 1.0f;
  bool finished = false;

  const Tensor& weights_before_drop() const { return w_norm ? w_norm.view() : vals.view(); }
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

// The gate input in f32: x itself (f32, no jitter), else a cast and/or the jittered product in
// `tmp`. `scratch` is swiglu_backward's unused dgate output.
Tensor gate_input(const ModuleContext& ctx, const Tensor& x, const Tensor& noise_g,
                  TensorBuffer& tmp, TensorBuffer& scratch) {
  Ops& ops = ctx.ops();
  Tensor x32 = x;
  if (x.dtype() != DType::F32) {
    tmp = ctx.alloc(DType::F32, x.shape(), "router.x32");
    ops.cast(ctx.s(), x, tmp);
    x32 = tmp;
  }
  if (!noise_g.defined()) return x32;
  scratch = ctx.alloc(DType::F32, x.shape(), "router.scratch");
  TensorBuffer xj = ctx.alloc(DType::F32, x.shape(), "router.xj");
  ops.swiglu_backward(ctx.s(), noise_g, x32, x32, scratch, xj);  // xj = x32 · silu(g)
  scratch.reset();
  tmp = std::move(xj);
  return tmp;
}

Tensor gate_f32(const ModuleContext& ctx, const Tensor& gate, TensorBuffer& tmp) {
  if (gate.dtype() == DType::F32) return gate;
  tmp = ctx.alloc(DType::F32, gate.shape(), "router.gate32");
  ctx.ops().cast(ctx.s(), gate, tmp);
  return tmp;
}

}  // namespace

Router::Routing& Router::forward_local(const ModuleContext& ctx, const Tensor& x,
                                       const Tensor& gate, int64_t token_offset,
                                       int64_t micro_batch, RouterMode mode) {
  const int64_t E = cfg_.num_experts;
  MOEZERO_CHECK(x.rank() == 2 && x.dtype() == ctx.dtype, "router forward of layer ", layer_,
                ": x is ", x.str(), " but must be (N, C) ", dtype_name(ctx.dtype));
  const int64_t N = x.dim(0), C = x.dim(1);
  MOEZERO_CHECK(gate.shape() == (Shape{E, C}) && gate.dtype() == ctx.dtype, "router forward of ",
                "layer ", layer_, ": gate is ", gate.str(), " but must be ", dtype_name(ctx.dtype),
                "(", E, ", ", C, ")");
  MOEZERO_CHECK(token_offset >= 0, "router forward: token_offset is ", token_offset);

  st_.reset();
  build_identity(ctx);
  std::unique_ptr<State> st = new_state(ctx, N, C);
  State& state = *st;
  if (N == 0) {
    ctx.ops().fill(ctx.s(), state.stats, 0.0);
  } else {
    if (mode == RouterMode::Train && cfg_.jitter > 0.0f)
      make_noise(ctx, state, token_offset, micro_batch);
    const TensorBuffer logits = select(ctx, state, x, gate);
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

void Router::build_identity(const ModuleContext& ctx) {
  Stream& s = ctx.s();
  if (identity_ && identity_stream_ == &s) return;
  const int64_t E = cfg_.num_experts;
  identity_stream_ = &s;  // built on (and ordered by) the compute stream
  identity_ = TensorBuffer(s.device(), DType::F32, Shape{E, E}, MemTag::Other, s, "router.eye");
  ctx.ops().fill(s, identity_, 0.0);
  for (int64_t e = 0; e < E; ++e)
    ctx.ops().fill(s, identity_.view().view_elems(e * (E + 1), {1}), 1.0);
}

std::unique_ptr<Router::State> Router::new_state(const ModuleContext& ctx, int64_t N,
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

void Router::make_noise(const ModuleContext& ctx, State& st, int64_t token_offset,
                        int64_t micro_batch) const {
  // Noise on the host, keyed by the global token index (world-size independent).
  const int64_t N = st.n, C = st.c;
  std::vector<float> g(static_cast<size_t>(N * C));
  for (int64_t t = 0; t < N; ++t) {
    const uint64_t key = token_key(cfg_.seed, layer_, micro_batch, token_offset + t);
    for (int64_t ch = 0; ch < C; ++ch)
      g[t * C + ch] = static_cast<float>(silu_inverse(noise_of(key, ch, cfg_.jitter)));
  }
  st.noise_g = ctx.alloc(DType::F32, Shape{N, C}, "router.noise");
  upload(ctx.s(), std::move(g), st.noise_g);
}

TensorBuffer Router::select(const ModuleContext& ctx, State& st, const Tensor& x,
                            const Tensor& gate) const {
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t E = cfg_.num_experts, k = cfg_.top_k, N = st.n;
  // logits (N, E) = xj @ Wg^T in f32; probs; top-k; one-hot rows of the choices.
  TensorBuffer x_tmp, scratch, gate_tmp;
  const Tensor xj = gate_input(ctx, x, st.noise_g ? st.noise_g.view() : Tensor(), x_tmp, scratch);
  const Tensor wg = gate_f32(ctx, gate, gate_tmp);
  TensorBuffer logits = ctx.alloc(DType::F32, Shape{N, E}, "router.logits");
  mm(ctx, xj, wg, logits, 1.0f, 0.0f, Transpose::No, Transpose::Yes);
  x_tmp.reset();
  gate_tmp.reset();
  ops.softmax_forward(s, logits, st.probs);
  ops.topk(s, st.probs, static_cast<int>(k), st.vals, st.ids);
  st.onehot = ctx.alloc(DType::F32, Shape{N * k, E}, "router.onehot");
  ops.embedding_forward(s, st.routing.expert_ids, identity_, st.onehot);

  // Renormalised weights = softmax over the chosen logits (= p_j / Σ_j p_j).
  if (cfg_.normalize_top_k) {
    st.w_norm = ctx.alloc(DType::F32, Shape{N, k}, "router.w_norm");
    mm(ctx, st.onehot.view().reshape({N, k, E}), logits.view().reshape({N, E, 1}),
       st.w_norm.view().reshape({N, k, 1}));
    ops.softmax_forward(s, st.w_norm, st.w_norm);
    st.routing.weights = st.w_norm;
  }
  return logits;
}

void Router::local_statistics(const ModuleContext& ctx, State& st) const {
  // Selections per expert, Σ_t probs (the kept counts follow: dropless or capacity).
  const int64_t k = cfg_.top_k, N = st.n;
  const RouterStats layout = stats_layout();
  st.ones = ctx.alloc(DType::F32, Shape{N * k}, "router.ones");
  ctx.ops().fill(ctx.s(), st.ones, 1.0);
  mm(ctx, st.ones.view().reshape({1, N * k}), st.onehot, layout.selected(st.stats));
  mm(ctx, st.ones.view().view_elems(0, {1, N}), st.probs, layout.prob_sum(st.stats));
}

void Router::logsumexp(const ModuleContext& ctx, State& st, const Tensor& logits) const {
  // lse = CE(logits, target 0) + logits @ e0.
  const int64_t E = cfg_.num_experts, N = st.n;
  st.lse = ctx.alloc(DType::F32, Shape{N}, "router.lse");
  TensorBuffer zero_targets = ctx.alloc(DType::I32, Shape{N}, "router.target0");
  ctx.ops().fill(ctx.s(), zero_targets, 0.0);
  ctx.ops().cross_entropy_forward(ctx.s(), logits, zero_targets, st.lse);
  mm(ctx, logits, identity_.view().view_elems(0, {E, 1}), st.lse.view().reshape({N, 1}), 1.0f,
     1.0f);
}

void Router::drop_over_capacity(const ModuleContext& ctx, State& st) const {
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
  st.keep_diag = ctx.alloc(DType::F32, Shape{N, k, k}, "router.keep_diag");
  upload(s, std::move(d.kept_ids), st.kept_ids);
  upload(s, std::move(d.w), st.kept_w);
  upload(s, std::move(d.diag), st.keep_diag);
  upload(s, std::move(d.kept), stats_layout().kept(st.stats).reshape({E}));
  st.routing.expert_ids = st.kept_ids;
  st.routing.weights = st.kept_w;
}

void Router::finish(const ModuleContext& ctx, int64_t global_tokens, float scale,
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

void Router::backward(const ModuleContext& ctx, const Tensor& dweights, const Tensor& x,
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

Tensor Router::kept_dweights(const ModuleContext& ctx, const State& st, const Tensor& dweights,
                             TensorBuffer& tmp) const {
  // Dropped assignments contribute nothing: dw · diag(keep).
  if (!st.keep_diag) return dweights;
  const int64_t k = cfg_.top_k, N = st.n;
  tmp = ctx.alloc(DType::F32, Shape{N, k}, "router.dw_kept");
  mm(ctx, dweights.reshape({N, 1, k}), st.keep_diag, tmp.view().reshape({N, 1, k}));
  return tmp;
}

TensorBuffer Router::logits_backward(const ModuleContext& ctx, const State& st,
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
  const Tensor onehot = st.onehot.view().reshape({N, k, E});
  if (cfg_.normalize_top_k) {  // d(chosen logits) = softmax_backward(w, dw), scattered
    if (aux) {
      ops.softmax_backward(s, st.probs, dprobs, dlogits);
    } else {
      ops.fill(s, dlogits, 0.0);
    }
    TensorBuffer dchosen = ctx.alloc(DType::F32, Shape{N, k}, "router.dchosen");
    ops.softmax_backward(s, st.w_norm, dw, dchosen);
    mm(ctx, dchosen.view().reshape({N, 1, k}), onehot, dlogits.view().reshape({N, 1, E}), 1.0f,
       1.0f);
  } else {  // dprobs += dw scattered
    if (!aux) ops.fill(s, dprobs, 0.0);
    mm(ctx, dw.reshape({N, 1, k}), onehot, dprobs.view().reshape({N, 1, E}), 1.0f, 1.0f);
    ops.softmax_backward(s, st.probs, dprobs, dlogits);
  }
  dprobs.reset();
  if (cfg_.z_coef > 0.0f) {  // dlogits_t += scale·z_coef·2·lse_t/N_g · probs_t
    mm(ctx, st.lse.view().reshape({N, 1, 1}), st.probs.view().reshape({N, 1, E}),
       dlogits.view().reshape({N, 1, E}), static_cast<float>(2.0 * st.scale * cfg_.z_coef / ng),
       1.0f);
  }
  return dlogits;
}

void Router::input_backward(const ModuleContext& ctx, const State& st, const Tensor& dlogits,
                            const Tensor& x, const Tensor& gate, const Tensor& dx,
                            const Tensor& dgate) const {
  // dWg += dlogits^T @ xj (xj recomputed); dx += (dlogits @ Wg) · noise.
  Ops& ops = ctx.ops();
  Stream& s = ctx.s();
  const int64_t N = st.n, C = st.c;
  const Tensor noise = st.noise_g ? st.noise_g.view() : Tensor();
  {
    TensorBuffer x_tmp, scratch;
    const Tensor xj = gate_input(ctx, x, noise, x_tmp, scratch);
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
      TensorBuffer scratch = ctx.alloc(DType::F32, Shape{N, C}, "router.scratch");
      TensorBuffer dxj = ctx.alloc(DType::F32, Shape{N, C}, "router.dxj");
      ops.swiglu_backward(s, noise, dx32, dx32, scratch, dxj);  // dxj = dx32 · silu(g)
      dx32 = std::move(dxj);
    }
    ops.axpy(s, 1.0f, dx32, dx);
  }
}

}  // namespace moezero::moe
