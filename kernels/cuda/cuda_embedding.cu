// kernels/cuda/cuda_embedding.cu — token embedding forward and backward.
//
// forward:  out[t, :] = table[ids[t], :]                ids i32 (T), table (V, C), out (T, C)
// backward: dtable[ids[t], :] += dout[t, :]             dtable f32 (V, C) `+=`
// Backward is deterministic without float atomics: (id, t) pairs are radix-sorted (stable, so
// t ascends within an id), then one block per run of equal ids sums its rows in that order
// and adds once into dtable.
// An id outside [0, V) reports kEmbedding{Forward,Backward}Id on the stream (the op fails there,
// see cuda_objects.h); forward writes a zero row for it, backward skips it.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moezero::cuda {

namespace {

template <typename T>
__global__ void embedding_forward_kernel(const int32_t* ids, const T* table, T* out, int64_t T_,
                                         int64_t V, int64_t C, KernelErrorSink err) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  T* dst = out + t * C;
  if (id < 0 || id >= V) {
    if (threadIdx.x == 0) report_kernel_error(err, kEmbeddingForwardId, t, id, V);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = from_f32<T>(0.0f);
    return;
  }
  const T* src = table + static_cast<int64_t>(id) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) dst[c] = src[c];
}

// keys[t] = ids[t], or V (sorted past every valid id) when out of range; vals[t] = t.
__global__ void embedding_keys_kernel(const int32_t* ids, int32_t* keys, int32_t* vals, int64_t T_,
                                      int64_t V, KernelErrorSink err) {
  for (int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; t < T_;
       t += int64_t{gridDim.x} * blockDim.x) {
    const int32_t id = ids[t];
    const bool ok = id >= 0 && id < V;
    if (!ok) report_kernel_error(err, kEmbeddingBackwardId, t, id, V);
    keys[t] = ok ? id : static_cast<int32_t>(V);
    vals[t] = static_cast<int32_t>(t);
  }
}

// Block p: if sorted position p starts a run of equal (valid) ids, sums that run's dout rows
// in position order and adds the sum to dtable[id].
template <typename T>
__global__ void embedding_backward_kernel(const int32_t* keys, const int32_t* tokens, const T* dout,
                                          float* dtable, int64_t T_, int64_t V, int64_t C) {
  const int64_t p = blockIdx.x;
  const int32_t id = keys[p];
  if (id >= V || (p > 0 && keys[p - 1] == id)) return;
  int64_t end = p + 1;
  while (end < T_ && keys[end] == id) ++end;
  float* dst = dtable + static_cast<int64_t>(id) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t q = p; q < end; ++q) acc += to_f32(dout[static_cast<int64_t>(tokens[q]) * C + c]);
    dst[c] += acc;
  }
}

}  // namespace

void CudaOps::do_embedding_forward(Stream& s, const Tensor& ids, const Tensor& table,
                                   const Tensor& out) {
  OpContext ctx(s);
  const int64_t T_ = ids.numel(), V = table.dim(0), C = table.dim(1);
  if (T_ == 0) return;
  dispatch_act(table.dtype(), "embedding_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_forward_kernel<T><<<grid_rows(T_), kThreads, 0, ctx.st>>>(
        ptr<int32_t>(ids), ptr<T>(table), ptr<T>(out), T_, V, C, ctx.err());
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_embedding_backward(Stream& s, const Tensor& ids, const Tensor& dout,
                                    const Tensor& dtable) {
  OpContext ctx(s);
  const int64_t T_ = ids.numel(), V = dtable.dim(0), C = dtable.dim(1);
  if (T_ == 0 || C == 0) return;
  const size_t bytes = static_cast<size_t>(T_) * sizeof(int32_t);
  Buffer keys_in = ctx.scratch(bytes, "embedding_backward keys");
  Buffer vals_in = ctx.scratch(bytes, "embedding_backward tokens");
  Buffer keys_out = ctx.scratch(bytes, "embedding_backward sorted keys");
  Buffer vals_out = ctx.scratch(bytes, "embedding_backward sorted tokens");
  auto* ki = static_cast<int32_t*>(keys_in.data());
  auto* vi = static_cast<int32_t*>(vals_in.data());
  auto* ko = static_cast<int32_t*>(keys_out.data());
  auto* vo = static_cast<int32_t*>(vals_out.data());
  embedding_keys_kernel<<<grid_for(T_), kThreads, 0, ctx.st>>>(ptr<int32_t>(ids), ki, vi, T_, V,
                                                               ctx.err());
  MOEZERO_CUDA_CHECK_LAUNCH();
  sort_pairs_i32(ctx, ki, ko, vi, vo, T_, key_bits(V));
  dispatch_act(dout.dtype(), "embedding_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_backward_kernel<T><<<grid_rows(T_), kThreads, 0, ctx.st>>>(
        ko, vo, ptr<T>(dout), ptr<float>(dtable), T_, V, C);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace moezero::cuda
