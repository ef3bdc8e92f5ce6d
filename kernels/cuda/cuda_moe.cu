// kernels/cuda/cuda_moe.cu — expert_histogram, sort_by_expert, and sort_pairs_i32: the one
// CUB radix-sort instantiation of the backend (also used by embedding backward).
//
// N = T * k assignments; expert_ids i32 (N) in [0, E) or -1 (dropped).
// expert_histogram: counts[e] = #{a : ids[a] == e}; shared-memory histogram per block, then
//   integer atomics into counts (exact, so deterministic).
// sort_by_expert: key[a] = ids[a], or E for a dropped assignment (so dropped ones sort last,
//   E + 1 buckets); value = a. Radix sort is stable, so assignments ascend within an expert.
//   perm[p] = sorted value (-1 for p >= kept), inv_perm[perm[p]] = p (-1 when dropped),
//   offsets[e] = first sorted position whose key >= e (binary search), offsets[E] = kept.
// An id outside [-1, E) reports kExpertHistogramId / kSortByExpertId on the stream and is treated
// as dropped.
#include <cub/cub.cuh>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moezero::cuda {

namespace {

constexpr int kMaxSharedBins = 8192;  // 32 KiB of shared counters

__device__ __forceinline__ bool expert_ok(int32_t id, int E, int64_t a, KernelErrorSink err,
                                          int code) {
  if (id >= 0 && id < E) return true;
  if (id != -1) report_kernel_error(err, code, a, id, E);
  return false;
}

// counts must be zeroed before. Dynamic shared memory: E ints when use_shared.
__global__ void histogram_kernel(const int32_t* ids, int64_t n, int E, int32_t* counts,
                                 bool use_shared, KernelErrorSink err) {
  extern __shared__ int32_t bins[];
  if (use_shared) {
    for (int e = threadIdx.x; e < E; e += blockDim.x) bins[e] = 0;
    __syncthreads();
  }
  for (int64_t a = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; a < n;
       a += int64_t{gridDim.x} * blockDim.x) {
    const int32_t id = ids[a];
    if (!expert_ok(id, E, a, err, kExpertHistogramId)) continue;
    atomicAdd(use_shared ? &bins[id] : &counts[id], 1);
  }
  if (use_shared) {
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      if (bins[e] != 0) atomicAdd(&counts[e], bins[e]);
    }
  }
}

__global__ void expert_keys_kernel(const int32_t* ids, int64_t n, int E, uint32_t* keys,
                                   int32_t* vals, KernelErrorSink err) {
  for (int64_t a = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; a < n;
       a += int64_t{gridDim.x} * blockDim.x) {
    const int32_t id = ids[a];
    keys[a] = expert_ok(id, E, a, err, kSortByExpertId) ? static_cast<uint32_t>(id)
                                                        : static_cast<uint32_t>(E);
    vals[a] = static_cast<int32_t>(a);
  }
}

// perm holds the sorted assignment ids; inv_perm was set to -1 (all bytes 0xff) before.
__global__ void finalize_perm_kernel(const uint32_t* sorted_keys, int64_t n, int E, int32_t* perm,
                                     int32_t* inv_perm) {
  for (int64_t p = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; p < n;
       p += int64_t{gridDim.x} * blockDim.x) {
    if (sorted_keys[p] >= static_cast<uint32_t>(E)) {
      perm[p] = -1;
    } else {
      inv_perm[perm[p]] = static_cast<int32_t>(p);
    }
  }
}

// offsets[e] = lower_bound(sorted_keys, e) for e in [0, E].
__global__ void offsets_kernel(const uint32_t* sorted_keys, int64_t n, int E, int32_t* offsets) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e > E) return;
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (sorted_keys[mid] < static_cast<uint32_t>(e))
      lo = mid + 1;
    else
      hi = mid;
  }
  offsets[e] = static_cast<int32_t>(lo);
}

}  // namespace

void sort_pairs_i32(OpContext& ctx, const int32_t* keys_in, int32_t* keys_out,
                    const int32_t* vals_in, int32_t* vals_out, int64_t n, int end_bit) {
  if (n == 0) return;
  MOEZERO_CHECK(n <= INT_MAX, "sort: ", n, " items exceed the int range");
  // Keys are non-negative: sort their bits as unsigned (no sign twiddling involved).
  const auto* ki = reinterpret_cast<const uint32_t*>(keys_in);
  auto* ko = reinterpret_cast<uint32_t*>(keys_out);
  const int items = static_cast<int>(n);
  size_t temp_bytes = 0;
  MOEZERO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ki, ko, vals_in, vals_out,
                                                     items, 0, end_bit, ctx.st));
  Buffer temp = ctx.scratch(temp_bytes == 0 ? 1 : temp_bytes, "radix sort temp");
  MOEZERO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, ki, ko, vals_in,
                                                     vals_out, items, 0, end_bit, ctx.st));
}

void CudaOps::do_expert_histogram(Stream& s, const Tensor& expert_ids, int num_experts,
                                  const Tensor& counts) {
  OpContext ctx(s);
  const int64_t n = expert_ids.numel();
  MOEZERO_CUDA_CHECK(cudaMemsetAsync(counts.data(), 0, counts.size_bytes(), ctx.st));
  if (n == 0) return;
  const bool use_shared = num_experts <= kMaxSharedBins;
  const size_t smem = use_shared ? num_experts * sizeof(int32_t) : 0;
  histogram_kernel<<<grid_for(n), kThreads, smem, ctx.st>>>(
      ptr<int32_t>(expert_ids), n, num_experts, ptr<int32_t>(counts), use_shared, ctx.err());
  MOEZERO_CUDA_CHECK_LAUNCH();
}

void CudaOps::do_sort_by_expert(Stream& s, const Tensor& expert_ids, int num_experts,
                                const Tensor& perm, const Tensor& inv_perm, const Tensor& offsets) {
  OpContext ctx(s);
  const int64_t n = expert_ids.numel();
  const int E = num_experts;
  if (n == 0) {
    MOEZERO_CUDA_CHECK(cudaMemsetAsync(offsets.data(), 0, offsets.size_bytes(), ctx.st));
    return;
  }
  const size_t bytes = static_cast<size_t>(n) * sizeof(int32_t);
  Buffer keys_in = ctx.scratch(bytes, "sort_by_expert keys");
  Buffer vals_in = ctx.scratch(bytes, "sort_by_expert values");
  Buffer keys_out = ctx.scratch(bytes, "sort_by_expert sorted keys");
  auto* ki = static_cast<uint32_t*>(keys_in.data());
  auto* ko = static_cast<uint32_t*>(keys_out.data());
  auto* vi = static_cast<int32_t*>(vals_in.data());
  int32_t* p = ptr<int32_t>(perm);

  expert_keys_kernel<<<grid_for(n), kThreads, 0, ctx.st>>>(ptr<int32_t>(expert_ids), n, E, ki, vi,
                                                           ctx.err());
  MOEZERO_CUDA_CHECK_LAUNCH();
  sort_pairs_i32(ctx, reinterpret_cast<const int32_t*>(ki), reinterpret_cast<int32_t*>(ko), vi, p,
                 n, key_bits(E));
  MOEZERO_CUDA_CHECK(cudaMemsetAsync(inv_perm.data(), 0xff, inv_perm.size_bytes(), ctx.st));
  finalize_perm_kernel<<<grid_for(n), kThreads, 0, ctx.st>>>(ko, n, E, p, ptr<int32_t>(inv_perm));
  MOEZERO_CUDA_CHECK_LAUNCH();
  offsets_kernel<<<(E + 1 + kThreads - 1) / kThreads, kThreads, 0, ctx.st>>>(ko, n, E,
                                                                             ptr<int32_t>(offsets));
  MOEZERO_CUDA_CHECK_LAUNCH();
}

}  // namespace moezero::cuda
