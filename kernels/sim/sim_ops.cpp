// kernels/sim/sim_ops.cpp — the op table of the simulated backend: every op of core/ops.def
// advances its stream's virtual clock by a modelled duration. GEMMs and attention by their
// FLOPs (bf16 or fp32 peak by dtype) and bytes, whichever takes longer (roofline); every other
// op by the bytes it reads and writes. When every tensor of a call is backed (small), the CPU
// kernel also runs, so small buffers hold right values.
#include <algorithm>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/sim/measured_profile.h"
#include "kernels/sim/sim_objects.h"

namespace moezero::sim {
namespace {

struct OpCost {
  double flops = 0.0;  // tensor-core work (GEMM, attention); 0: a streaming op
  bool bf16 = false;   // flops on the bf16 peak (else fp32)
  double bytes = 0.0;  // bytes read + written
};

double nb(const Tensor& t) { return t.defined() ? static_cast<double>(t.size_bytes()) : 0.0; }

template <typename... T>
double sum_bytes(const T&... t) {
  return (nb(t) + ... + 0.0);
}

OpCost streaming(double bytes) { return OpCost{0.0, false, bytes}; }

// FLOPs of C = op(A) op(B): 2 m n k per batch entry.
double gemm_flops(const Tensor& a, const Tensor& c, Transpose ta) {
  const int64_t batch = c.rank() == 3 ? c.dim(0) : 1;
  const int64_t k = ta == Transpose::Yes ? a.dim(-2) : a.dim(-1);
  return 2.0 * static_cast<double>(batch) * static_cast<double>(c.dim(-2)) *
         static_cast<double>(c.dim(-1)) * static_cast<double>(k);
}

// Causal attention: QK^T and PV, 2 T^2 D each per head, half of them masked.
double attention_flops(const Tensor& q) {
  const double b = static_cast<double>(q.dim(0)), t = static_cast<double>(q.dim(1));
  const double h = static_cast<double>(q.dim(2)), d = static_cast<double>(q.dim(3));
  return 2.0 * b * h * t * t * d;
}

// ---- the cost of each op (same parameters as core/ops.def) ---------------------------------

OpCost cost_gemm(Stream&, const GemmArgs& g) {
  const double c_bytes = nb(g.c) * (g.beta != 0.0f ? 2.0 : 1.0);
  return OpCost{gemm_flops(g.a, g.c, g.trans_a), g.a.dtype() == DType::BF16,
                nb(g.a) + nb(g.b) + c_bytes};
}
OpCost cost_grouped_gemm(Stream&, std::span<const GemmProblem> problems, Transpose ta, Transpose,
                         float, float beta) {
  OpCost c;
  for (const GemmProblem& p : problems) {
    if (p.c.numel() == 0) continue;
    c.flops += gemm_flops(p.a, p.c, ta);
    c.bf16 = p.a.dtype() == DType::BF16;
    c.bytes += nb(p.a) + nb(p.b) + nb(p.c) * (beta != 0.0f ? 2.0 : 1.0);
  }
  return c;
}
OpCost cost_add(Stream&, const Tensor& a, const Tensor& b, const Tensor& out) {
  return streaming(sum_bytes(a, b, out));
}
OpCost cost_mul(Stream&, const Tensor& a, const Tensor& b, const Tensor& out) {
  return streaming(sum_bytes(a, b, out));
}
OpCost cost_scale(Stream&, const Tensor& x, float) { return streaming(2 * nb(x)); }
OpCost cost_axpy(Stream&, float, const Tensor& x, const Tensor& y) {
  return streaming(nb(x) + 2 * nb(y));
}
OpCost cost_fill(Stream&, const Tensor& x, double) { return streaming(nb(x)); }
OpCost cost_cast(Stream&, const Tensor& src, const Tensor& dst) {
  return streaming(sum_bytes(src, dst));
}
OpCost cost_sum_squares(Stream&, const Tensor& x, const Tensor& out) {
  return streaming(sum_bytes(x, out));
}
OpCost cost_quantize_int8_blocks(Stream&, const Tensor& x, const Tensor& q, const Tensor& scales,
                                 int64_t) {
  return streaming(sum_bytes(x, q, scales));  // a block is read again from cache, not memory
}
OpCost cost_dequantize_int8_blocks(Stream&, const Tensor& q, const Tensor& scales, const Tensor& x,
                                   int64_t, bool accumulate) {
  return streaming(nb(q) + nb(scales) + nb(x) * (accumulate ? 2.0 : 1.0));
}
OpCost cost_find_nonfinite(Stream&, const Tensor& x, const Tensor& result) {
  return streaming(sum_bytes(x, result));
}
// Only the looked-up rows of the table move.
OpCost cost_embedding_forward(Stream&, const Tensor& ids, const Tensor&, const Tensor& out) {
  return streaming(nb(ids) + 2 * nb(out));
}
OpCost cost_embedding_backward(Stream&, const Tensor& ids, const Tensor& dout, const Tensor&) {
  return streaming(nb(ids) + nb(dout) + 2.0 * 4.0 * static_cast<double>(dout.numel()));
}
OpCost cost_rmsnorm_forward(Stream&, const Tensor& x, const Tensor& w, float, const Tensor& out,
                            const Tensor& rstd) {
  return streaming(sum_bytes(x, w, out, rstd));
}
OpCost cost_rmsnorm_backward(Stream&, const Tensor& dout, const Tensor& x, const Tensor& w,
                             const Tensor& rstd, const Tensor& dx, const Tensor& dw) {
  return streaming(sum_bytes(dout, x, w, rstd, dx) + 2 * nb(dw));
}
OpCost cost_rope(Stream&, const Tensor& x, const Tensor& positions, float, RopeDirection,
                 const Tensor& out) {
  return streaming(sum_bytes(x, positions, out));
}
OpCost cost_attention_forward(Stream&, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& out, const Tensor& lse) {
  return OpCost{attention_flops(q), q.dtype() == DType::BF16, sum_bytes(q, k, v, out, lse)};
}
// Backward: five T x T matmuls to forward's two (FlashAttention-2's 2.5x).
OpCost cost_attention_backward(Stream&, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& out, const Tensor& lse, const Tensor& dout,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  return OpCost{2.5 * attention_flops(q), q.dtype() == DType::BF16,
                sum_bytes(q, k, v, out, lse, dout, dq, dk, dv)};
}
OpCost cost_swiglu_forward(Stream&, const Tensor& gate, const Tensor& up, const Tensor& out) {
  return streaming(sum_bytes(gate, up, out));
}
OpCost cost_swiglu_backward(Stream&, const Tensor& gate, const Tensor& up, const Tensor& dout,
                            const Tensor& dgate, const Tensor& dup) {
  return streaming(sum_bytes(gate, up, dout, dgate, dup));
}
OpCost cost_swiglu_backward_act(Stream&, const Tensor& gate, const Tensor& up, const Tensor& dout,
                                const Tensor& act, const Tensor& dgate, const Tensor& dup) {
  return streaming(sum_bytes(gate, up, dout, act, dgate, dup));
}
OpCost cost_softmax_forward(Stream&, const Tensor& x, const Tensor& out) {
  return streaming(sum_bytes(x, out));
}
OpCost cost_softmax_backward(Stream&, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  return streaming(sum_bytes(y, dy, dx));
}
OpCost cost_topk(Stream&, const Tensor& x, int, const Tensor& values, const Tensor& indices) {
  return streaming(sum_bytes(x, values, indices));
}
OpCost cost_cross_entropy_forward(Stream&, const Tensor& logits, const Tensor& targets,
                                  const Tensor& losses) {
  return streaming(sum_bytes(logits, targets, losses));
}
OpCost cost_cross_entropy_backward(Stream&, const Tensor& logits, const Tensor& targets,
                                   const Tensor& dlosses, const Tensor& dlogits) {
  return streaming(sum_bytes(logits, targets, dlosses, dlogits));
}
OpCost cost_logsumexp(Stream&, const Tensor& x, const Tensor& out) {
  return streaming(sum_bytes(x, out));
}
OpCost cost_sigmoid_forward(Stream&, const Tensor& x, const Tensor& out) {
  return streaming(sum_bytes(x, out));
}
OpCost cost_normalize_rows(Stream&, const Tensor& x, const Tensor& out) {
  return streaming(sum_bytes(x, out));
}
OpCost cost_gather_cols(Stream&, const Tensor& x, const Tensor& idx, const Tensor& out) {
  return streaming(sum_bytes(x, idx, out));
}
OpCost cost_scatter_add_cols(Stream&, const Tensor& src, const Tensor& idx, const Tensor& out) {
  return streaming(sum_bytes(src, idx, out));
}
OpCost cost_adamw(Stream&, const AdamWArgs& a) {
  return streaming(2 * sum_bytes(a.param, a.exp_avg, a.exp_avg_sq) + nb(a.grad) + nb(a.param_copy));
}
OpCost cost_adamw_multi(Stream& s, std::span<const AdamWArgs> tensors) {
  double bytes = 0.0;  // each entry as adamw
  for (const AdamWArgs& a : tensors) bytes += cost_adamw(s, a).bytes;
  return streaming(bytes);
}
OpCost cost_expert_histogram(Stream&, const Tensor& ids, int, const Tensor& counts) {
  return streaming(sum_bytes(ids, counts));
}
OpCost cost_sort_by_expert(Stream&, const Tensor& ids, int, const Tensor& perm,
                           const Tensor& inv_perm, const Tensor& offsets) {
  return streaming(sum_bytes(ids, perm, inv_perm, offsets));
}
// Only the gathered rows of x move (as many as out holds).
OpCost cost_gather_rows(Stream&, const Tensor&, const Tensor& perm, int, const Tensor& out) {
  return streaming(nb(perm) + 2 * nb(out));
}
OpCost cost_combine_rows(Stream&, const Tensor& y, const Tensor& inv_perm, const Tensor& weights,
                         int, const Tensor& out) {
  return streaming(sum_bytes(y, inv_perm, weights, out));
}
OpCost cost_combine_rows_backward(Stream&, const Tensor& dout, const Tensor& y, const Tensor& perm,
                                  const Tensor& inv_perm, const Tensor& weights, int,
                                  const Tensor& dy, const Tensor& dweights) {
  return streaming(sum_bytes(dout, y, perm, inv_perm, weights, dy, dweights));
}

// ---- which tensors a call touches ------------------------------------------------------------

struct Touched {
  bool all_backed = true;
  void add(const Tensor& t) {
    if (t.defined() && t.numel() > 0 && is_unbacked(t.data())) all_backed = false;
  }
};
void touch(Touched& t, const Tensor& x) { t.add(x); }
void touch(Touched& t, const GemmArgs& g) {
  t.add(g.a);
  t.add(g.b);
  t.add(g.c);
}
void touch(Touched& t, std::span<const GemmProblem> ps) {
  for (const GemmProblem& p : ps) touch(t, GemmArgs{p.a, p.b, p.c});
}
void touch(Touched& t, const AdamWArgs& a) {
  for (const Tensor* x : {&a.param, &a.grad, &a.exp_avg, &a.exp_avg_sq, &a.param_copy}) t.add(*x);
}
void touch(Touched& t, std::span<const AdamWArgs> as) {
  for (const AdamWArgs& a : as) touch(t, a);
}
template <typename T>
requires(!std::is_convertible_v<const T&, const Tensor&>) void touch(Touched&, const T&) {
}  // scalars, enums, the stream

template <typename... A>
bool all_backed(const A&... args) {
  Touched t;
  (touch(t, args), ...);
  return t.all_backed;
}

const Tensor* pick_last(const Tensor& t, const Tensor*) { return &t; }
template <typename T>
requires(!std::is_convertible_v<const T&, const Tensor&>) const Tensor* pick_last(
    const T&, const Tensor* prev) {
  return prev;
}

// What an op writes into backed outputs when it cannot compute (some tensor is unbacked):
// StandIn{op, real}(s, args...). Only find_nonfinite writes: {-1, 0, 0}, "all finite".
struct StandIn {
  const char* op;
  std::vector<std::function<void()>>& real;
  template <typename... A>
  void operator()(const A&... args) const {
    if (std::strcmp(op, "find_nonfinite") != 0) return;
    const Tensor* result = nullptr;  // find_nonfinite(s, x, result): the last tensor
    ((result = pick_last(args, result)), ...);
    if (result && !is_unbacked(result->data())) {
      auto* r = static_cast<int64_t*>(result->data());
      real.emplace_back([r] {
        r[0] = -1;
        r[1] = 0;
        r[2] = 0;
      });
    }
  }
};

// fill runs on backed buffers even when nothing else computes (compute_backed = false): an
// accumulator the trainer zero-fills before `+=` stand-ins (sum_squares adds 0) must not keep
// what a reused block held before (host-exchange words read as floats can be NaN).
bool fills(std::string_view op) { return op == "fill"; }

class SimOps final : public Ops {
 public:
  SimOps(SimDevice& device, bool compute_backed)
      : device_(device), cpu_(cpu::make_cpu_ops()), compute_(compute_backed) {}

 protected:
#define MOEZERO_OP(name, params, args)                   \
  void do_##name params override {                       \
    const OpCost cost = cost_##name args;                \
    std::vector<std::function<void()>> real;             \
    if ((compute_ || fills(#name)) && all_backed args) { \
      host_task_capture() = &real;                       \
      try {                                              \
        cpu_->name args;                                 \
      } catch (...) {                                    \
        host_task_capture() = nullptr;                   \
        throw;                                           \
      }                                                  \
      host_task_capture() = nullptr;                     \
    } else {                                             \
      StandIn{#name, real} args;                         \
    }                                                    \
    submit(s, #name, cost, std::move(real));             \
  }
#include "core/ops.def"

 private:
  void submit(Stream& s, const char* op, const OpCost& c, std::vector<std::function<void()>> real) {
    auto* stream = dynamic_cast<SimStream*>(&s);
    MOEZERO_CHECK(stream != nullptr, "simulated op on stream '", s.name(), "' of ",
                  s.device().name());
    const GpuProfile& p = device_.profile();
    double seconds = p.memory_seconds(c.bytes);
    if (c.flops > 0) seconds = std::max(seconds, p.gemm_seconds(c.flops, c.bf16));
    if (p.measured)
      seconds = p.measured->seconds(p, op, c.flops, c.bf16, c.bytes).value_or(seconds);
    stream->enqueue_op(device_.scaled(seconds), std::move(real));
  }

  SimDevice& device_;
  std::unique_ptr<Ops> cpu_;
  const bool compute_;  // SimDeviceOptions::compute_backed
};

}  // namespace

std::unique_ptr<Ops> make_sim_ops(SimDevice& device, bool compute_backed) {
  return std::make_unique<SimOps>(device, compute_backed);
}

}  // namespace moezero::sim
