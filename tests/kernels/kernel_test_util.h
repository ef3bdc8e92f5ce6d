// tests/kernels/kernel_test_util.h — shared fixture and helpers of the op-table tests.
//
// KernelTest is value-parameterised over compiled_backends(); a CUDA case skips with the reason
// when no GPU is usable. Each test gets a fresh random seed, printed on stdout (set
// MOEZERO_TEST_SEED to replay one). upload()/download() move fp32 host vectors to tensors of any
// float dtype (rounding to nearest even) and back, through Device::memcpy_async + synchronize.
// References are computed in double on the host; expect_close() compares with
// |got - ref| <= atol + rtol * |ref| and names the worst element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "tests/common/backend_fixture.h"

namespace moezero::test {

using Vec = std::vector<float>;
using DVec = std::vector<double>;
using IVec = std::vector<int32_t>;

// Rounds v to the nearest value of dtype `t` (identity for f32).
inline float round_to(DType t, float v) {
  if (t == DType::BF16) return bf16_to_float(float_to_bf16(v));
  if (t == DType::F16) return fp16_to_float(float_to_fp16(v));
  return v;
}
inline Vec round_to(DType t, Vec v) {
  for (float& x : v) x = round_to(t, x);
  return v;
}
inline DVec to_double(const Vec& v) { return DVec(v.begin(), v.end()); }

class KernelTest : public ::moezero::test::BackendFixture {
 protected:
  Ops& ops() { return device_->ops(); }
  void sync() { stream_->synchronize(); }

  TensorBuffer alloc(DType t, Shape shape) {
    return TensorBuffer(*device_, t, shape, MemTag::Activation, *stream_, "test");
  }

  // Uploads fp32 values as dtype `t` (RNE rounding for 16-bit types).
  TensorBuffer upload(const Vec& v, DType t, Shape shape) {
    EXPECT_EQ(static_cast<int64_t>(v.size()), shape.numel()) << "upload: size vs shape";
    TensorBuffer b = alloc(t, shape);
    std::vector<uint8_t> bytes(b.view().size_bytes());
    for (size_t i = 0; i < v.size(); ++i) {
      switch (t) {
        case DType::F32: std::memcpy(&bytes[i * 4], &v[i], 4); break;
        case DType::BF16: {
          bf16 h = float_to_bf16(v[i]);
          std::memcpy(&bytes[i * 2], &h, 2);
          break;
        }
        case DType::F16: {
          fp16 h = float_to_fp16(v[i]);
          std::memcpy(&bytes[i * 2], &h, 2);
          break;
        }
        default: ADD_FAILURE() << "upload: not a float dtype";
      }
    }
    copy_in(b, bytes.data(), bytes.size());
    return b;
  }
  TensorBuffer upload_i32(const IVec& v, Shape shape) {
    EXPECT_EQ(static_cast<int64_t>(v.size()), shape.numel()) << "upload_i32: size vs shape";
    TensorBuffer b = alloc(DType::I32, shape);
    copy_in(b, v.data(), v.size() * 4);
    return b;
  }
  // Synchronizes the stream, then reads a float tensor of any float dtype as fp32.
  Vec download(const Tensor& t) {
    std::vector<uint8_t> bytes(t.size_bytes());
    copy_out(t, bytes.data(), bytes.size());
    Vec v(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) {
      switch (t.dtype()) {
        case DType::F32: std::memcpy(&v[i], &bytes[i * 4], 4); break;
        case DType::BF16: {
          bf16 h;
          std::memcpy(&h, &bytes[i * 2], 2);
          v[i] = bf16_to_float(h);
          break;
        }
        case DType::F16: {
          fp16 h;
          std::memcpy(&h, &bytes[i * 2], 2);
          v[i] = fp16_to_float(h);
          break;
        }
        default: ADD_FAILURE() << "download: not a float dtype";
      }
    }
    return v;
  }
  IVec download_i32(const Tensor& t) {
    IVec v(static_cast<size_t>(t.numel()));
    copy_out(t, v.data(), v.size() * 4);
    return v;
  }
  // Raw bytes, for bit-exact determinism checks.
  std::vector<uint8_t> download_bytes(const Tensor& t) {
    std::vector<uint8_t> bytes(t.size_bytes());
    copy_out(t, bytes.data(), bytes.size());
    return bytes;
  }

  Vec rand_vec(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    Vec v(n);
    for (float& x : v) x = d(rng_);
    return v;
  }
  int32_t rand_int(int32_t lo, int32_t hi) {  // inclusive
    return std::uniform_int_distribution<int32_t>(lo, hi)(rng_);
  }
  std::mt19937_64& rng() { return rng_; }

 private:
  void copy_in(TensorBuffer& b, const void* src, size_t n) {
    if (n > 0) device_->memcpy_async(b.view().data(), src, n, *stream_);
    stream_->synchronize();  // the host vector dies with this call
  }
  void copy_out(const Tensor& t, void* dst, size_t n) {
    if (n > 0) device_->memcpy_async(dst, t.data(), n, *stream_);
    stream_->synchronize();
  }

};

// |got[i] - ref[i]| <= atol + rtol * |ref[i]| for all i; reports the count and worst element.
inline ::testing::AssertionResult all_close(const Vec& got, const DVec& ref, double rtol,
                                            double atol) {
  if (got.size() != ref.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << ref.size();
  }
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - ref[i]);
    const double lim = atol + rtol * std::fabs(ref[i]);
    const bool ok = err <= lim;  // false for NaN
    if (!ok) ++bad;
    const double excess = std::isnan(err) ? 1e300 : err - lim;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements differ; worst [" << worst << "]: got "
         << got[worst] << ", ref " << ref[worst] << " (rtol " << rtol << ", atol " << atol << ")";
}

// Tolerances per activation dtype. f32: the kernel's fp32 arithmetic against an f64 reference
// on the same inputs: ~sqrt(n) * 2^-24 relative for an n-term sum, bounded here by
// 1e-5 * sqrt(n) + 1e-6. bf16: inputs are rounded to bf16 before the f64 reference, so what
// remains is the output's rounding (2^-9 relative, RNE) plus fp32 accumulation: rtol 2^-8.
struct Tol {
  double rtol, atol;
};
inline Tol tol_for(DType t, int64_t n_terms, double out_scale = 1.0) {
  const double sq = std::sqrt(static_cast<double>(n_terms < 1 ? 1 : n_terms));
  if (t == DType::F32) return {1e-5 * sq, (1e-5 * sq + 1e-6) * out_scale};
  return {1.0 / 256.0, (1e-5 * sq + 1e-3) * out_scale};
}

inline std::string backend_name(const ::testing::TestParamInfo<DeviceKind>& info) {
  return device_kind_name(info.param);
}

// EXPECT that `stmt` throws moezero::Error whose message contains `substr` (e.g. the op name).
#define EXPECT_MOEZERO_ERROR(stmt, substr)                                                         \
  do {                                                                                             \
    try {                                                                                          \
      stmt;                                                                                        \
      ADD_FAILURE() << "expected moezero::Error containing '" << (substr) << "'";                  \
    } catch (const ::moezero::Error& e) {                                                          \
      EXPECT_NE(std::string(e.what()).find(substr), std::string::npos) << "message: " << e.what(); \
    }                                                                                              \
  } while (0)

}  // namespace moezero::test

#define MOEZERO_INSTANTIATE_BACKENDS(Fixture)                                                      \
  INSTANTIATE_TEST_SUITE_P(Backends, Fixture, ::testing::ValuesIn(::moezero::compiled_backends()), \
                           ::moezero::test::backend_name)
