// kernels/cuda/cuda_elementwise.cu — add, mul, scale, axpy, fill, cast, swiglu forward/backward
// (and backward with the recomputed activation).
//
// Grid-stride loops over flat elements (int64 indices); fp32 arithmetic, one rounding on store.
// In-place and aliased calls are safe: each element is read before it is written, by the same
// thread. add, mul and swiglu_forward (map2) move 16-byte packs per load and store (4 f32 or 8
// bf16 elements) when every pointer of the call is 16-byte aligned, then the n % pack tail
// element by element; unaligned calls go element by element (same results either way).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace moezero::cuda {

namespace {

#define MOEZERO_GRID_STRIDE(i, n)                                           \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

// ---- map2: out[i] = f(a[i], b[i]), vectorised --------------------------------------------
template <typename T>
constexpr int kPack = 16 / static_cast<int>(sizeof(T));
template <typename T>
struct alignas(16) Pack {
  T v[kPack<T>];
};

// [in] vec: a, b and out are 16-byte aligned (checked by launch_map2). Each pack (and each tail
// element) is read before it is written by the same thread, so out may alias a or b.
template <typename T, typename F>
__global__ void map2_kernel(const T* a, const T* b, T* out, int64_t n, bool vec, F f) {
  int64_t first = 0;
  if (vec) {
    const int64_t packs = n / kPack<T>;
    MOEZERO_GRID_STRIDE(p, packs) {
      const Pack<T> pa = reinterpret_cast<const Pack<T>*>(a)[p];
      const Pack<T> pb = reinterpret_cast<const Pack<T>*>(b)[p];
      Pack<T> po;
#pragma unroll
      for (int j = 0; j < kPack<T>; ++j) po.v[j] = from_f32<T>(f(to_f32(pa.v[j]), to_f32(pb.v[j])));
      reinterpret_cast<Pack<T>*>(out)[p] = po;
    }
    first = packs * kPack<T>;
  }
  for (int64_t i = first + blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = from_f32<T>(f(to_f32(a[i]), to_f32(b[i])));
}

struct AddF {
  __device__ float operator()(float x, float y) const { return x + y; }
};
struct MulF {
  __device__ float operator()(float x, float y) const { return x * y; }
};

__global__ void cast_i32_f32_kernel(const int32_t* src, float* dst, int64_t n) {
  MOEZERO_GRID_STRIDE(i, n) { dst[i] = static_cast<float>(src[i]); }
}

template <typename T>
__global__ void scale_kernel(T* x, float alpha, int64_t n) {
  MOEZERO_GRID_STRIDE(i, n) { x[i] = from_f32<T>(alpha * to_f32(x[i])); }
}

// y += alpha * x
template <typename X, typename Y>
__global__ void axpy_kernel(float alpha, const X* x, Y* y, int64_t n) {
  MOEZERO_GRID_STRIDE(i, n) { y[i] = from_f32<Y>(to_f32(y[i]) + alpha * to_f32(x[i])); }
}

template <typename T>
__global__ void fill_float_kernel(T* x, float value, int64_t n) {
  const T v = from_f32<T>(value);
  MOEZERO_GRID_STRIDE(i, n) { x[i] = v; }
}

template <typename T>
__global__ void fill_int_kernel(T* x, T value, int64_t n) {
  MOEZERO_GRID_STRIDE(i, n) { x[i] = value; }
}

template <typename S, typename D>
__global__ void cast_kernel(const S* src, D* dst, int64_t n) {
  MOEZERO_GRID_STRIDE(i, n) { dst[i] = from_f32<D>(to_f32(src[i])); }
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// out = silu(g) * u = g * sigmoid(g) * u (map2 over gate, up)
struct SiluMulF {
  __device__ float operator()(float g, float u) const { return g * sigmoid(g) * u; }
};

// dup = dout * silu(g); dgate = dout * u * sig(g) * (1 + g * (1 - sig(g)))
template <typename T>
__global__ void swiglu_backward_kernel(const T* gate, const T* up, const T* dout, T* dgate, T* dup,
                                       int64_t n) {
  MOEZERO_GRID_STRIDE(i, n) {
    const float g = to_f32(gate[i]), u = to_f32(up[i]), d = to_f32(dout[i]);
    const float sg = sigmoid(g);
    const float dg = d * u * sg * (1.0f + g * (1.0f - sg));
    const float du = d * g * sg;
    dgate[i] = from_f32<T>(dg);
    dup[i] = from_f32<T>(du);
  }
}

// swiglu_backward_kernel plus act = silu(g) * u from the same sigmoid.
template <typename T>
__global__ void swiglu_backward_act_kernel(const T* gate, const T* up, const T* dout, T* act,
                                           T* dgate, T* dup, int64_t n) {
  MOEZERO_GRID_STRIDE(i, n) {
    const float g = to_f32(gate[i]), u = to_f32(up[i]), d = to_f32(dout[i]);
    const float sg = sigmoid(g);
    act[i] = from_f32<T>(g * sg * u);
    dgate[i] = from_f32<T>(d * u * sg * (1.0f + g * (1.0f - sg)));
    dup[i] = from_f32<T>(d * g * sg);
  }
}

#undef MOEZERO_GRID_STRIDE

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, typename F>
void launch_map2(OpContext& ctx, const T* a, const T* b, T* out, int64_t n, F f) {
  const bool vec = aligned16(a) && aligned16(b) && aligned16(out);
  // Vectorised: one thread per pack (the tail, < one pack, is covered by any grid).
  const int64_t work = vec ? std::max<int64_t>(n / kPack<T>, 1) : n;
  map2_kernel<T, F><<<grid_for(work), kThreads, 0, ctx.st>>>(a, b, out, n, vec, f);
  MOEZERO_CUDA_CHECK_LAUNCH();
}

}  // namespace

void CudaOps::do_add(Stream& s, const Tensor& a, const Tensor& b, const Tensor& out) {
  OpContext ctx(s);
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float(out.dtype(), "add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map2(ctx, ptr<T>(a), ptr<T>(b), ptr<T>(out), n, AddF{});
  });
}

void CudaOps::do_mul(Stream& s, const Tensor& a, const Tensor& b, const Tensor& out) {
  OpContext ctx(s);
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_float(out.dtype(), "mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map2(ctx, ptr<T>(a), ptr<T>(b), ptr<T>(out), n, MulF{});
  });
}

void CudaOps::do_scale(Stream& s, const Tensor& x, float alpha) {
  OpContext ctx(s);
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "scale", [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_kernel<T><<<grid_for(n), kThreads, 0, ctx.st>>>(ptr<T>(x), alpha, n);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_axpy(Stream& s, float alpha, const Tensor& x, const Tensor& y) {
  OpContext ctx(s);
  const int64_t n = y.numel();
  if (n == 0) return;
  dispatch_float(x.dtype(), "axpy", [&](auto xtag) {
    using X = typename decltype(xtag)::type;
    dispatch_float(y.dtype(), "axpy", [&](auto ytag) {
      using Y = typename decltype(ytag)::type;
      axpy_kernel<X, Y><<<grid_for(n), kThreads, 0, ctx.st>>>(alpha, ptr<X>(x), ptr<Y>(y), n);
      MOEZERO_CUDA_CHECK_LAUNCH();
    });
  });
}

void CudaOps::do_fill(Stream& s, const Tensor& x, double value) {
  OpContext ctx(s);
  const int64_t n = x.numel();
  if (n == 0) return;
  if (value == 0.0 && !std::signbit(value)) {  // all-zero bits in every dtype
    MOEZERO_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, x.size_bytes(), ctx.st));
    return;
  }
  switch (x.dtype()) {
    case DType::I32:
      fill_int_kernel<int32_t>
          <<<grid_for(n), kThreads, 0, ctx.st>>>(ptr<int32_t>(x), static_cast<int32_t>(value), n);
      break;
    case DType::I64:
      fill_int_kernel<int64_t>
          <<<grid_for(n), kThreads, 0, ctx.st>>>(ptr<int64_t>(x), static_cast<int64_t>(value), n);
      break;
    case DType::I8:
      fill_int_kernel<int8_t>
          <<<grid_for(n), kThreads, 0, ctx.st>>>(ptr<int8_t>(x), static_cast<int8_t>(value), n);
      break;
    default:
      dispatch_float(x.dtype(), "fill", [&](auto tag) {
        using T = typename decltype(tag)::type;
        fill_float_kernel<T>
            <<<grid_for(n), kThreads, 0, ctx.st>>>(ptr<T>(x), static_cast<float>(value), n);
      });
  }
  MOEZERO_CUDA_CHECK_LAUNCH();
}

void CudaOps::do_cast(Stream& s, const Tensor& src, const Tensor& dst) {
  OpContext ctx(s);
  const int64_t n = dst.numel();
  if (n == 0) return;
  if (src.dtype() == dst.dtype()) {  // plain copy, any dtype
    if (src.data() != dst.data()) {
      MOEZERO_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), dst.size_bytes(),
                                         cudaMemcpyDeviceToDevice, ctx.st));
    }
    return;
  }
  if (src.dtype() == DType::I32) {  // i32 -> f32 (validated)
    cast_i32_f32_kernel<<<grid_for(n), kThreads, 0, ctx.st>>>(ptr<int32_t>(src), ptr<float>(dst),
                                                              n);
    MOEZERO_CUDA_CHECK_LAUNCH();
    return;
  }
  dispatch_float(src.dtype(), "cast", [&](auto stag) {
    using S = typename decltype(stag)::type;
    dispatch_float(dst.dtype(), "cast", [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      cast_kernel<S, D><<<grid_for(n), kThreads, 0, ctx.st>>>(ptr<S>(src), ptr<D>(dst), n);
      MOEZERO_CUDA_CHECK_LAUNCH();
    });
  });
}

void CudaOps::do_swiglu_forward(Stream& s, const Tensor& gate, const Tensor& up,
                                const Tensor& out) {
  OpContext ctx(s);
  const int64_t n = out.numel();
  if (n == 0) return;
  dispatch_act(out.dtype(), "swiglu_forward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    launch_map2(ctx, ptr<T>(gate), ptr<T>(up), ptr<T>(out), n, SiluMulF{});
  });
}

void CudaOps::do_swiglu_backward(Stream& s, const Tensor& gate, const Tensor& up,
                                 const Tensor& dout, const Tensor& dgate, const Tensor& dup) {
  OpContext ctx(s);
  const int64_t n = dout.numel();
  if (n == 0) return;
  dispatch_act(dout.dtype(), "swiglu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    swiglu_backward_kernel<T><<<grid_for(n), kThreads, 0, ctx.st>>>(
        ptr<T>(gate), ptr<T>(up), ptr<T>(dout), ptr<T>(dgate), ptr<T>(dup), n);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

void CudaOps::do_swiglu_backward_act(Stream& s, const Tensor& gate, const Tensor& up,
                                     const Tensor& dout, const Tensor& act, const Tensor& dgate,
                                     const Tensor& dup) {
  OpContext ctx(s);
  const int64_t n = dout.numel();
  if (n == 0) return;
  dispatch_act(dout.dtype(), "swiglu_backward_act", [&](auto tag) {
    using T = typename decltype(tag)::type;
    swiglu_backward_act_kernel<T><<<grid_for(n), kThreads, 0, ctx.st>>>(
        ptr<T>(gate), ptr<T>(up), ptr<T>(dout), ptr<T>(act), ptr<T>(dgate), ptr<T>(dup), n);
    MOEZERO_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace moezero::cuda
