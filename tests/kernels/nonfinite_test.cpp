// tests/kernels/nonfinite_test.cpp — find_nonfinite (the gradient-health check of
// docs/health.md) against a host reference: first index, count and kind, exactly, for f32,
// bf16 and f16, at sizes that span several CPU blocks and CUDA grid strides, with NaN, +Inf and
// -Inf at random positions (first and last element included); plus validation errors.
#include <limits>

#include "tests/kernels/kernel_test_util.h"

namespace moezero::test {
namespace {

using NonFiniteTest = KernelTest;

struct Expect {
  int64_t first = -1, count = 0, kind = 0;
};

Expect reference(const Vec& v) {
  Expect e;
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isfinite(v[i])) continue;
    ++e.count;
    if (e.first < 0) {
      e.first = static_cast<int64_t>(i);
      e.kind = std::isnan(v[i]) ? 1 : v[i] > 0 ? 2 : 3;
    }
  }
  return e;
}

TEST_P(NonFiniteTest, FirstIndexCountAndKindMatchTheReference) {
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  TensorBuffer result = alloc(DType::I64, Shape{3});
  auto run = [&](const Vec& v, DType t) {
    TensorBuffer x = upload(v, t, Shape{static_cast<int64_t>(v.size())});
    ops().find_nonfinite(s(), x, result);
    std::vector<uint8_t> bytes = download_bytes(result);
    Expect got;
    std::memcpy(&got.first, &bytes[0], 8);
    std::memcpy(&got.count, &bytes[8], 8);
    std::memcpy(&got.kind, &bytes[16], 8);
    return got;
  };
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{40000}, int64_t{100003}}) {
      for (int pattern = 0; pattern < 6; ++pattern) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n " << n << " pattern " << pattern);
        Vec v = round_to(t, rand_vec(static_cast<size_t>(n), -1000.0f, 1000.0f));
        const float bad[3] = {kNaN, kInf, -kInf};
        switch (pattern) {
          case 0: break;  // all finite
          case 1: v.back() = bad[rand_int(0, 2)]; break;
          case 2: v.front() = bad[rand_int(0, 2)]; break;
          default:  // a few at random places, of random kinds
            for (int k = 0; k < pattern; ++k)
              v[static_cast<size_t>(rand_int(0, static_cast<int32_t>(n - 1)))] =
                  bad[rand_int(0, 2)];
        }
        const Expect ref = reference(v);
        const Expect got = run(v, t);
        EXPECT_EQ(got.first, ref.first);
        EXPECT_EQ(got.count, ref.count);
        EXPECT_EQ(got.kind, ref.kind);
        if (pattern > 0) {
          EXPECT_GE(got.first, 0) << "a non-finite value was planted";
        }
      }
    }
  }
  // The largest finite values are finite; an empty tensor has nothing to find.
  const Expect big = run({3.0e38f, -3.0e38f, 0.0f}, DType::F32);
  EXPECT_EQ(big.first, -1);
  EXPECT_EQ(big.count, 0);
  TensorBuffer empty = alloc(DType::F32, Shape{0});
  ops().fill(s(), result, 7.0);
  ops().find_nonfinite(s(), empty, result);
  std::vector<uint8_t> bytes = download_bytes(result);
  int64_t r[3];
  std::memcpy(r, bytes.data(), 24);
  EXPECT_EQ(r[0], -1);
  EXPECT_EQ(r[1], 0);
  EXPECT_EQ(r[2], 0);
}

TEST_P(NonFiniteTest, ValidationNamesTheOp) {
  TensorBuffer x = alloc(DType::F32, Shape{4}), i = alloc(DType::I32, Shape{4});
  TensorBuffer r2 = alloc(DType::I64, Shape{2}), r32 = alloc(DType::I32, Shape{3});
  EXPECT_MOEZERO_ERROR(ops().find_nonfinite(s(), x, r2), "find_nonfinite: result is i64(2)");
  EXPECT_MOEZERO_ERROR(ops().find_nonfinite(s(), x, r32), "find_nonfinite: result is i32(3)");
  EXPECT_MOEZERO_ERROR(ops().find_nonfinite(s(), i, r2), "find_nonfinite: x is i32(4)");
  sync();
}

MOEZERO_INSTANTIATE_BACKENDS(NonFiniteTest);

}  // namespace
}  // namespace moezero::test
