// kernels/cpu/cpu_common.h — private helpers of the CPU op implementations: fp32 <-> storage
// conversions, dtype dispatch, deterministic parallel loops, and the per-family entry points
// that CpuOps (cpu_ops.cpp) forwards to.
//
// Determinism rule of every CPU kernel: each output element is computed by one task in a fixed
// order; reductions across tasks use fixed block boundaries (a function of the shape only) and
// are combined in block order. So results are bit-identical run to run, whatever the thread
// count or TBB's scheduling.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/tensor.h"

namespace moezero::cpu {

// ---- storage <-> fp32 ----------------------------------------------------------------------
inline float to_f32(float x) { return x; }
inline float to_f32(bf16 x) { return bf16_to_float(x); }
inline float to_f32(fp16 x) { return fp16_to_float(x); }

template <typename T>
inline T from_f32(float x);
template <>
inline float from_f32<float>(float x) {
  return x;
}
// Same result as core's float_to_bf16 (RNE, NaN -> quiet NaN), written without a branch so that
// row loops vectorise.
template <>
inline bf16 from_f32<bf16>(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return bf16{static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}
template <>
inline fp16 from_f32<fp16>(float x) {
  return float_to_fp16(x);
}

template <typename T>
inline void load_f32(const T* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = to_f32(src[i]);
}
template <typename T>
inline void store_f32(const float* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = from_f32<T>(src[i]);
}
// bf16 rows: the same conversions (exact widening; from_f32<bf16>'s RNE), as functions of
// cpu_math.cpp compiled for AVX-512, AVX2 and the baseline (the widest runs).
void bf16_to_f32_row(const bf16* src, float* dst, int64_t n);
void f32_to_bf16_row(const float* src, bf16* dst, int64_t n);
template <>
inline void load_f32<bf16>(const bf16* src, float* dst, int64_t n) {
  bf16_to_f32_row(src, dst, n);
}
template <>
inline void store_f32<bf16>(const float* src, bf16* dst, int64_t n) {
  f32_to_bf16_row(src, dst, n);
}

// Calls f.template operator()<T>() with T the C++ type of float dtype `t` (f32, bf16, f16).
template <typename F>
decltype(auto) dispatch_float(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: return f.template operator()<float>();
    case DType::BF16: return f.template operator()<bf16>();
    case DType::F16: return f.template operator()<fp16>();
    default: MOEZERO_THROW(op, ": unsupported dtype ", dtype_name(t), " on the CPU backend");
  }
}

// Activation dtypes only (f32, bf16): keeps template instantiations small.
template <typename F>
decltype(auto) dispatch_act(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::F32: return f.template operator()<float>();
    case DType::BF16: return f.template operator()<bf16>();
    default:
      MOEZERO_THROW(op, ": dtype ", dtype_name(t), " is not an activation dtype (f32, bf16)");
  }
}

// Runs f(i) for i in [0, n) in parallel, `grain` indices per task at least.
template <typename F>
void parallel_for_each(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (n <= grain) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<int64_t>& r) {
                      for (int64_t i = r.begin(); i < r.end(); ++i) f(i);
                    });
}

// The 8 fixed lanes of the CPU kernels' fp32 reductions as one GCC vector: lane l accumulates
// elements l, l + 8, ... in order, exactly as a `float lane[8]` loop would, but compiled as one
// 256-bit register (two 128-bit ones on the baseline) instead of the lane-by-lane shuffles GCC
// makes of the array form. Passed by reference only (no vector ABI at function boundaries).
using F32x8 = float __attribute__((vector_size(32)));
inline void load8(const float* p, F32x8& v) { std::memcpy(&v, p, sizeof v); }
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), with the tail already added to lane 0.
inline float lane_sum(const F32x8& v) {
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// Dot product in fp32 over 8 fixed lanes (the same order on every run; inline: the rows are
// short, and inside cpu_math.cpp's clones it is compiled at their width).
inline float dot_f32(const float* a, const float* b, int64_t n) {
  F32x8 acc = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F32x8 va, vb;
    load8(a + i, va);
    load8(b + i, vb);
    acc += va * vb;
  }
  for (; i < n; ++i) acc[0] += a[i] * b[i];
  return lane_sum(acc);
}

// acc += x[i] over the same 8 fixed lanes (the tail past a multiple of 8 to lane 0).
inline void add_lanes(const float* x, int64_t n, F32x8& acc) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F32x8 v;
    load8(x + i, v);
    acc += v;
  }
  for (; i < n; ++i) acc[0] += x[i];
}

// acc += x[i]^2 over the same 8 fixed lanes (the tail of a row shorter than a group of 8 goes to
// lane 0). Rows fed one after another keep each element's lane when all but the last have a
// length that is a multiple of 8.
inline void add_squares(const float* x, int64_t n, F32x8& acc) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    F32x8 v;
    load8(x + i, v);
    acc += v * v;
  }
  for (; i < n; ++i) acc[0] += x[i] * x[i];
}

// Per-thread fp32 scratch of at least n floats, kept across calls (a kernel's task-local buffers:
// no allocation, page faults or zeroing per call). Contents are unspecified; one user per thread
// at a time (not for nested use).
inline float* thread_scratch(size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// Grain for row loops so that one task touches at least ~16K elements.
inline int64_t row_grain(int64_t cols) { return cols >= 16384 ? 1 : 16384 / (cols < 1 ? 1 : cols); }

// Copies a float tensor of any float dtype into fp32 (parallel).
std::vector<float> to_f32_vector(const Tensor& t);
// Writes fp32 values into a float tensor of any float dtype (parallel, RNE rounding).
void from_f32_vector(const std::vector<float>& v, const Tensor& t);

// ---- fp32 GEMM engine (cpu_gemm.cpp) -------------------------------------------------------
// One row-major fp32 GEMM: c (m, n) = alpha * op(a) @ op(b) + beta * c; a (m, k) or (k, m)
// when ta; b (k, n) or (n, k) when tb. beta == 0 ignores c's old contents.
struct F32Gemm {
  const float* a;
  const float* b;
  float* c;
  int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
  // When set (both), a and b are read from these bf16 arrays (same layout) by a bf16 x bf16 ->
  // fp32 matmul instead (products exact, fp32 accumulation); a and b may then be null.
  const bf16* a16 = nullptr;
  const bf16* b16 = nullptr;
  // When set, the real C is this bf16 array (same layout) and c is its fp32 working copy: each
  // tile of c is loaded from c16 first (beta != 0) and rounded into c16 (RNE) right after its
  // GEMM, in the same task, while it is in cache.
  bf16* c16 = nullptr;
  // Row strides (elements) of a, b and c as stored; 0 means dense (a: k, or m when ta; b: n, or
  // k when tb; c: n). Strided fp32 operands let kernels run GEMMs on views such as one head of
  // a (B, T, H, D) tensor without copying it. A GEMM with a bf16 C (c16) has all three dense.
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t row_a() const { return lda ? lda : ta ? m : k; }
  int64_t row_b() const { return ldb ? ldb : tb ? k : n; }
  int64_t row_c() const { return ldc ? ldc : n; }
};
// True when this build and CPU run bf16 x bf16 -> fp32 GEMM natively (oneDNN bf16 matmul).
bool bf16_gemm_available();
// Runs the GEMMs in parallel, split into fixed tiles of C (each tile is one single-threaded
// dnnl_sgemm / cblas_sgemm call). Deterministic.
void run_f32_gemms(std::span<const F32Gemm> gemms);
// The tile of C (rows, columns) that run_f32_gemms uses for an m x n x k GEMM: 512 x 256 at
// most, split (rows first, down to 64 x 64) while a tile holds more than 256 x 256 x 128
// multiply-adds, so that deep GEMMs (weight gradients: the depth is the tokens) spread over the
// cores in even pieces. A function of the shape only, never of the thread count or of the other
// GEMMs of the call.
std::pair<int64_t, int64_t> gemm_tile_shape(int64_t m, int64_t n, int64_t k);
// Runs one GEMM on the calling thread (no TBB), for use inside other parallel kernels.
void run_f32_gemm_serial(const F32Gemm& g);

// The GEMM library this build calls and the kernel family it picked on this machine
// (oneDNN: its effective ISA, "avx512_core_amx"; OpenBLAS: its core name, "SkylakeX").
struct GemmLibraryInfo {
  std::string library;        // "oneDNN 2.6.3", "OpenBLAS"
  std::string kernels;        // kernel family
  bool avx512_class = false;  // the family uses AVX-512 GEMM kernels
  bool avx2_class = false;    // ... AVX2 (or wider) kernels
};
GemmLibraryInfo gemm_library_info();

// ---- per-family entry points -------------------------------------------------------------
// cpu::<op> for every op of core/ops.def, with the op's signature: each validates nothing
// (core/ops.cpp did) and enqueues its work on the stream as a host task. Defined in the op's
// family file (cpu_gemm.cpp, cpu_elementwise.cpp, cpu_norm.cpp, cpu_attention.cpp,
// cpu_softmax.cpp, cpu_optim.cpp, cpu_moe.cpp, cpu_quant.cpp).
#define MOEZERO_OP(name, params, args) void name params;
#include "core/ops.def"

}  // namespace moezero::cpu
