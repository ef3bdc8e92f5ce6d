// tests/common/backend_fixture.h — the base of every test that runs on each compiled backend:
// a device of the parameter's kind (CUDA cases skip with the reason when no GPU is usable), its
// default stream, and a random engine seeded freshly per test, with the seed printed so a
// failure replays with MOEZERO_TEST_SEED=<seed>.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <random>
#include <string>

#include "core/device.h"
#include "kernels/backend.h"

namespace moezero::test {

class BackendFixture : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    if (GetParam() == DeviceKind::Cuda) {
      std::string why;
      if (!cuda_available(&why)) GTEST_SKIP() << why;
    }
    device_ = make_device(GetParam());
    stream_ = &device_->default_stream();
    const char* env = std::getenv("MOEZERO_TEST_SEED");
    seed_ = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::cout << "[ seed     ] " << info->test_suite_name() << "." << info->name()
              << ": MOEZERO_TEST_SEED=" << seed_ << std::endl;
    rng_.seed(seed_);
  }

  Device& dev() { return *device_; }
  Stream& s() { return *stream_; }

  std::unique_ptr<Device> device_;
  Stream* stream_ = nullptr;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace moezero::test
