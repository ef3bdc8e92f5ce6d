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
#include <cmath>

#include "kernels/cpu/cpu_common.h"

namespace moezero::cpu {

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
    const float decay = 1.0f - a.lr * a.weight_decay;
    const float w1 = 1.0f - a.beta1, w2 = 1.0f - a.beta2;
    parallel_for_each(n, 16384, [&](int64_t i) {
      const float gi = g[i] * a.grad_scale;
      const float pi = p[i] * decay;
      const float mi = m[i] + w1 * (gi - m[i]);
      const float vi = a.beta2 * v[i] + w2 * gi * gi;
      const float denom = std::sqrt(vi) / bc2_sqrt + a.eps;
      m[i] = mi;
      v[i] = vi;
      p[i] = pi - step_size * (mi / denom);
    });
    if (a.param_copy.defined() && a.param_copy.data() != a.param.data()) {
      dispatch_act(a.param_copy.dtype(), "adamw", [&]<typename T>() {
        T* pc = static_cast<T*>(a.param_copy.data());
        parallel_for_each(n, 16384, [&](int64_t i) { pc[i] = from_f32<T>(p[i]); });
      });
    }
  });
}

}  // namespace moezero::cpu
