// kernels/cpu/cpu_optim.cpp — the AdamW step on fp32 master shards, on the CPU.
//
// The formula is PyTorch's torch.optim.AdamW (single-tensor, non-amsgrad) exactly:
//   p  *= 1 - lr * wd                               (decoupled weight decay, first)
//   g   = grad * grad_scale
//   m   = m + (1 - b1) * (g - m)                    (torch: exp_avg.lerp_(g, 1 - b1))
//   v   = b2 * v + (1 - b2) * g * g
//   bc1 = 1 - b1^t, bc2 = 1 - b2^t                  (in double, as Python computes them)
//   denom = sqrt(v) / sqrt(bc2) + eps               (PyTorch's form, not sqrt(v / bc2) + eps)
//   p  -= (lr / bc1) * m / denom
//   param_copy = cast(p)                            (when defined)
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_math.h"

namespace moezero::cpu {
namespace {

// f(lo, hi) over [0, n) in chunks of 16K elements, in parallel (elementwise: any split gives
// the same bits).
template <typename F>
void for_chunks(int64_t n, F&& f) {
  constexpr int64_t kChunk = 16384;
  parallel_for_each((n + kChunk - 1) / kChunk, 1,
                    [&](int64_t b) { f(b * kChunk, std::min(n, (b + 1) * kChunk)); });
}

}  // namespace

void adamw(Stream& s, const AdamWArgs& args) {
  s.enqueue_host([a = args] {
    const int64_t n = a.param.numel();
    float* p = a.param.data_as<float>();
    const float* g = a.grad.data_as<float>();
    float* m = a.exp_avg.data_as<float>();
    float* v = a.exp_avg_sq.data_as<float>();
    const double t = static_cast<double>(a.step);
    const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), t);
    const float step_size = static_cast<float>(static_cast<double>(a.lr) / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    const AdamWConsts c{.grad_scale = a.grad_scale,
                        .decay = 1.0f - a.lr * a.weight_decay,
                        .w1 = 1.0f - a.beta1,
                        .beta2 = a.beta2,
                        .w2 = 1.0f - a.beta2,
                        .bc2_sqrt = bc2_sqrt,
                        .eps = a.eps,
                        .step_size = step_size};
    // The compute-dtype copy is written in the same pass, chunk by chunk, while the chunk is
    // in cache (one pass over the shard instead of two).
    const bool copy = a.param_copy.defined() && a.param_copy.data() != a.param.data();
    const DType copy_dtype = copy ? a.param_copy.dtype() : DType::F32;
    dispatch_act(copy_dtype, "adamw", [&]<typename T>() {
      T* pc = copy ? static_cast<T*>(a.param_copy.data()) : nullptr;
      for_chunks(n, [&](int64_t lo, int64_t hi) {
        adamw_f32(p + lo, g + lo, m + lo, v + lo, hi - lo, c);
        if (pc)
          for (int64_t i = lo; i < hi; ++i) pc[i] = from_f32<T>(p[i]);
      });
    });
  });
}

}  // namespace moezero::cpu
