// layers/module.h — what every module of the transformer shares: the per-micro-batch context
// its forward and backward run in, and the three GEMMs of a linear layer.
//
// Modules (Embedding, AttentionBlock, FeedForward implementations, Head) follow one pattern,
// llm.c style with no autograd:
//   - forward(ctx, params, inputs..., out) acquires its parameter group(s) from the
//     ParamProvider, enqueues its ops on ctx.stream, releases the group(s), and returns the
//     activations its backward needs (a Saved struct of TensorBuffers tagged
//     MemTag::Activation; the stream-safe allocator lets them be freed on the host right after
//     the backward has enqueued their last use).
//   - backward(ctx, params, saved, inputs..., dresid) acquires again, accumulates weight
//     gradients (+=, f32) into params.grad(g), calls grad_ready(g) as soon as the last write
//     into that gradient is enqueued, releases, and updates the residual-stream gradient.
// Weights are stored (out, in) as PyTorch's nn.Linear, so a linear layer is y = x W^T.
#pragma once

#include <cstdint>

#include "core/allocator.h"
#include "core/device.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace moezero::layers {

// One micro-batch's view of the world, shared by every module call of its forward and backward.
struct ModuleContext {
  Stream* stream = nullptr;  // the compute stream every op is enqueued on
  DType dtype = DType::F32;  // compute dtype: activations and acquired parameters (f32 or bf16)
  int64_t batch = 0;         // B sequences
  int64_t seq = 0;           // T tokens per sequence
  Tensor positions;          // i32 (B*T): the position of each token within its sequence
  // Where the micro-batch sits in the global batch (MoE router noise and aux normalisation).
  int64_t micro_batch = 0;    // global micro-batch index
  int64_t token_offset = 0;   // global index of this rank's first token row
  int64_t global_tokens = 0;  // token rows of the micro-batch over all ranks
  Tensor loss_out;            // f32 (1): the loss accumulator (MoE layers add aux/z losses)
  Tensor aux_out;             // f32 (1) or undefined: unscaled aux losses, for metrics

  int64_t rows() const { return batch * seq; }  // B*T token rows
  Stream& s() const { return *stream; }
  Ops& ops() const { return stream->device().ops(); }

  // An activation buffer (MemTag::Activation) whose home stream is the compute stream.
  TensorBuffer alloc(DType t, Shape shape, const char* what) const {
    return TensorBuffer(stream->device(), t, shape, MemTag::Activation, *stream, what);
  }
  // An activation buffer in the compute dtype.
  TensorBuffer alloc_act(Shape shape, const char* what) const { return alloc(dtype, shape, what); }
};

// y (R, out) `=` x (R, in) @ w^T, w (out, in). All compute dtype.
inline void linear_forward(const ModuleContext& ctx, const Tensor& x, const Tensor& w,
                           const Tensor& y) {
  ctx.ops().gemm(ctx.s(), GemmArgs{.a = x, .b = w, .c = y, .trans_b = Transpose::Yes});
}

// dx (R, in) = dy (R, out) @ w (out, in); `=` with Accumulate::No, `+=` with Accumulate::Yes.
enum class Accumulate : uint8_t { No, Yes };
inline void linear_backward_data(const ModuleContext& ctx, const Tensor& dy, const Tensor& w,
                                 const Tensor& dx, Accumulate acc) {
  ctx.ops().gemm(ctx.s(),
                 GemmArgs{.a = dy, .b = w, .c = dx, .beta = acc == Accumulate::Yes ? 1.0f : 0.0f});
}

// dw (out, in) f32 `+=` dy^T (out, R) @ x (R, in).
inline void linear_backward_weight(const ModuleContext& ctx, const Tensor& dy, const Tensor& x,
                                   const Tensor& dw) {
  ctx.ops().gemm(ctx.s(),
                 GemmArgs{.a = dy, .b = x, .c = dw, .trans_a = Transpose::Yes, .beta = 1.0f});
}

}  // namespace moezero::layers
