// core/ops.h — the op table: every kernel a Mixtral-style MoE transformer needs for training,
// forward and backward. Each op is declared once, in core/ops.def (with its shapes and rules);
// this header turns that list into the Ops interface that kernels/cpu and kernels/cuda
// implement.
//
// Conventions (every op):
// - Row-major contiguous tensors. Shapes are written (rows, cols); `T` = tokens, `C` = model
//   width, `V` = vocabulary, `H` = heads, `D` = head dim, `E` = experts, `k` = top-k.
// - Each op is enqueued on `s` and returns at once (see core/device.h). All tensors must live
//   on s.device(); they must stay alive until the stream has passed the op.
// - Float inputs are "activation dtype" `A` ∈ {f32, bf16} unless stated: all `A` operands of
//   one call share one dtype. Arithmetic and accumulation are in fp32 always; bf16 is storage.
// - Outputs are `=` (overwritten) or `+=` (accumulated), stated per output. Accumulating
//   outputs that are marked fp32 must be f32 tensors (gradients of weights are accumulated
//   in fp32 master precision).
// - The public methods validate shapes and dtypes (one place for both backends, errors name
//   the op, the argument and the values) and then call the backend's do_* method.
// - Optional tensors are "undefined" (Tensor{}) when absent; defaults are documented.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace moezero {

enum class Transpose : uint8_t { No, Yes };

// result[2] of Ops::find_nonfinite.
enum class NonFiniteKind : int64_t { None = 0, NaN = 1, PosInf = 2, NegInf = 3 };

// C = alpha * op(A) @ op(B) + beta * C.
//   a: (m, k), or (k, m) when trans_a; b: (k, n), or (n, k) when trans_b; c: (m, n).
//   Batched (strided): a, b, c carry one more leading dim `batch`, the same for all three
//   (b may also be 2-D: shared across the batch, e.g. a weight).
//   a, b: dtype A (f32 or bf16, same); c: f32 or A. beta == 0 ignores C's old contents
//   (even NaN). c is `=` when beta == 0, `+=`-style otherwise.
struct GemmArgs {
  Tensor a, b, c;
  Transpose trans_a = Transpose::No;
  Transpose trans_b = Transpose::No;
  float alpha = 1.0f;
  float beta = 0.0f;
};

// One problem of a grouped GEMM (independent shapes; same transposes, alpha, beta, dtypes; the
// shape rules of GemmArgs, unbatched). Problems with m == 0 or n == 0 are skipped; k == 0
// gives c = beta * c (so an expert with no tokens adds nothing to its weight gradient).
struct GemmProblem {
  Tensor a, b, c;
};

struct AdamWArgs {
  Tensor param;       // f32 (n)  master shard, updated in place
  Tensor grad;        // f32 or bf16 (n)  gradient shard, read only (bf16: widened exactly)
  Tensor exp_avg;     // f32 (n)  first moment, updated in place
  Tensor exp_avg_sq;  // f32 (n)  second moment, updated in place
  Tensor param_copy;  // optional (n) bf16 or f32: `=` compute copy of the updated param
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled: p -= lr * wd * p, before the Adam step
  int64_t step = 1;           // 1-based, for bias correction
  float grad_scale = 1.0f;    // grad is multiplied by this first (global-norm clipping)
};

// The direction of Ops::rope: Backward applies the inverse rotation (the gradient).
enum class RopeDirection : uint8_t { Forward, Backward };

// The op table of one device. Each op of core/ops.def is a public non-virtual method that
// validates its arguments (core/ops.cpp: shapes, dtypes, devices; errors name the op, the
// argument and the values) and calls the backend's pure virtual do_<op>.
class Ops {
 public:
  using RopeDirection = moezero::RopeDirection;

  virtual ~Ops() = default;

#define MOEZERO_OP(name, params, args) void name params;
#include "core/ops.def"

  // Calls of gemm and grouped_gemm through this table so far, from every stream: which GEMM
  // path a run took (tests/trace: tracing must not change it). Relaxed counters.
  struct GemmCalls {
    uint64_t gemm = 0, grouped_gemm = 0;
    bool operator==(const GemmCalls&) const = default;
  };
  GemmCalls gemm_calls() const {
    return {gemm_calls_.load(std::memory_order_relaxed),
            grouped_gemm_calls_.load(std::memory_order_relaxed)};
  }

 protected:
#define MOEZERO_OP(name, params, args) virtual void do_##name params = 0;
#include "core/ops.def"

 private:
  std::atomic<uint64_t> gemm_calls_{0}, grouped_gemm_calls_{0};
};

}  // namespace moezero
