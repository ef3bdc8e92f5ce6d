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
// grad may be bf16 (the compute dtype's reduced gradient): it is widened exactly first.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_math.h"

namespace moezero::cpu {

namespace {

constexpr int64_t kChunk = 16384;

// One entry's per-call constants (bias corrections in double, as Python computes them).
AdamWConsts consts_of(const AdamWArgs& a) {
  const double t = static_cast<double>(a.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), t);
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), t);
  return AdamWConsts{.grad_scale = a.grad_scale,
                     .decay = 1.0f - a.lr * a.weight_decay,
                     .w1 = 1.0f - a.beta1,
                     .beta2 = a.beta2,
                     .w2 = 1.0f - a.beta2,
                     .bc2_sqrt = static_cast<float>(std::sqrt(bc2)),
                     .eps = a.eps,
                     .step_size = static_cast<float>(static_cast<double>(a.lr) / bc1)};
}

// Elements [lo, hi) of one entry. The compute-dtype copy is written in the same pass, while the
// chunk is in cache (one pass over the shard instead of two).
void update_chunk(const AdamWArgs& a, const AdamWConsts& c, int64_t lo, int64_t hi) {
  float* p = a.param.data_as<float>();
  float* m = a.exp_avg.data_as<float>();
  float* v = a.exp_avg_sq.data_as<float>();
  if (a.grad.dtype() == DType::F32) {
    adamw_f32(p + lo, a.grad.data_as<float>() + lo, m + lo, v + lo, hi - lo, c);
  } else {  // bf16 gradient: widened (exactly) through a small fp32 buffer
    constexpr int64_t kStage = 1024;
    float g[kStage];
    const bf16* g16 = a.grad.data_as<bf16>();
    for (int64_t i = lo; i < hi; i += kStage) {
      const int64_t n = std::min(kStage, hi - i);
      load_f32(g16 + i, g, n);
      adamw_f32(p + i, g, m + i, v + i, n, c);
    }
  }
  if (!a.param_copy.defined() || a.param_copy.data() == a.param.data()) return;
  dispatch_act(a.param_copy.dtype(), "adamw", [&]<typename T>() {
    store_f32(p + lo, static_cast<T*>(a.param_copy.data()) + lo, hi - lo);
  });
}

// Every entry's chunks of kChunk elements in one parallel loop (elementwise: any split gives
// the same bits as one adamw per entry).
void run_adamw(const std::vector<AdamWArgs>& entries) {
  std::vector<AdamWConsts> consts;
  std::vector<int64_t> first;  // first chunk of each entry; one past the last at the end
  int64_t chunks = 0;
  for (const AdamWArgs& a : entries) {
    consts.push_back(consts_of(a));
    first.push_back(chunks);
    chunks += (a.param.numel() + kChunk - 1) / kChunk;
  }
  first.push_back(chunks);
  parallel_for_each(chunks, 1, [&](int64_t ci) {
    const auto e =
        static_cast<size_t>(std::upper_bound(first.begin(), first.end(), ci) - first.begin() - 1);
    const int64_t lo = (ci - first[e]) * kChunk;
    update_chunk(entries[e], consts[e], lo, std::min(entries[e].param.numel(), lo + kChunk));
  });
}

}  // namespace

void adamw(Stream& s, const AdamWArgs& args) {
  s.enqueue_host([entries = std::vector<AdamWArgs>{args}] { run_adamw(entries); });
}

void adamw_multi(Stream& s, std::span<const AdamWArgs> tensors) {
  s.enqueue_host(
      [entries = std::vector<AdamWArgs>(tensors.begin(), tensors.end())] { run_adamw(entries); });
}

}  // namespace moezero::cpu
