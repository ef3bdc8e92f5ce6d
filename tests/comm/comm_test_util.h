// tests/comm/comm_test_util.h — inputs crafted so reductions are exact, typed conversions,
// and World options with a short timeout for tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/communicator.h"
#include "core/dtype.h"
#include "core/error.h"

namespace moezero::comm::testing {

// Timeout for tests: long enough for a loaded 2-core machine, short enough that a failure
// path ends in well under a second.
inline WorldOptions test_options(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  WorldOptions o;
  o.comm.timeout = timeout;
  return o;
}

// Small integers in [-8, 8]: any sum of up to 5 of them (and their bf16/f16 forms) is exact.
inline int small_value(int rank, size_t i, int salt = 0) {
  return static_cast<int>((static_cast<size_t>(rank) * 7 + i * 3 + static_cast<size_t>(salt) * 5) % 17) - 8;
}

template <typename T>
T from_double(double v) {
  if constexpr (std::is_same_v<T, bf16>) return float_to_bf16(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, fp16>) return float_to_fp16(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <typename T>
double to_double(T v) {
  if constexpr (std::is_same_v<T, bf16>) return bf16_to_float(v);
  else if constexpr (std::is_same_v<T, fp16>) return fp16_to_float(v);
  else return static_cast<double>(v);
}

template <typename T>
std::vector<T> small_values(int rank, size_t count, int salt = 0) {
  std::vector<T> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = from_double<T>(small_value(rank, i, salt));
  return v;
}

// The reference reduction: in rank order, fp32 accumulation for floating types, Avg = sum / n.
template <typename T>
T reference_reduce(const std::vector<int>& values, ReduceOp op) {
  const int n = static_cast<int>(values.size());
  if constexpr (std::is_integral_v<T>) {
    T acc = static_cast<T>(values[0]);
    for (int r = 1; r < n; ++r) acc = op == ReduceOp::Max ? std::max<T>(acc, values[r]) : acc + values[r];
    if (op == ReduceOp::Avg) acc /= n;
    return acc;
  } else {
    float acc = static_cast<float>(to_double(from_double<T>(values[0])));
    for (int r = 1; r < n; ++r) {
      float v = static_cast<float>(to_double(from_double<T>(values[r])));
      acc = op == ReduceOp::Max ? (acc < v ? v : acc) : acc + v;
    }
    if (op == ReduceOp::Avg) acc /= static_cast<float>(n);
    return from_double<T>(acc);
  }
}

template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

}  // namespace moezero::comm::testing
