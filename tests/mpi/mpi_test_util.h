// tests/mpi/mpi_test_util.h — the fixture of the tests that run under mpirun: this process's
// rank and CPU device, MpiCommunicators with a test timeout, random inputs per (rank, seed),
// and the LocalCommunicator reference: the same calls run on ranks-as-threads inside this
// process, whose result for this rank the MPI result must equal bit for bit.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/mpi/mpi_world.h"
#include "comm/world.h"
#include "core/communicator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/backend.h"

namespace moezero::comm::testing {

using Bytes = std::vector<std::byte>;
// Creates this rank's communicator on (group, channel): MPI's or the local reference's.
using MakeComm =
    std::function<std::unique_ptr<Communicator>(const ProcessGroup&, const std::string&)>;
// One scenario: issues collectives on `stream` for global rank `rank`, synchronises, and
// returns what this rank received (concatenated). Must be a pure function of its arguments.
using Scenario = std::function<Bytes(const MakeComm&, Stream& stream, int rank, int world)>;

// Timeout of the tests' collectives: long enough for 4 processes on a loaded 2-core machine,
// short enough that a broken test fails instead of stalling CTest.
inline CommOptions mpi_test_options(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  CommOptions o;
  o.timeout = timeout;
  return o;
}

// Random elements of `dtype` for (rank, salt): floats in [-4, 4) (rounded to the dtype), so
// sums are inexact and the reduction order shows in the bits; integers in [-1000, 1000].
inline Bytes random_elems(DType dtype, size_t count, int rank, uint64_t salt) {
  std::mt19937_64 rng(0x6d6f657aULL * (salt + 1) + static_cast<uint64_t>(rank) * 7919);
  std::uniform_real_distribution<float> real(-4.0f, 4.0f);
  std::uniform_int_distribution<int> integer(-1000, 1000);
  Bytes out(count * dtype_size_bytes(dtype));
  for (size_t i = 0; i < count; ++i) {
    std::byte* p = out.data() + i * dtype_size_bytes(dtype);
    switch (dtype) {
      case DType::F32: {
        float v = real(rng);
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::BF16: {
        bf16 v = float_to_bf16(real(rng));
        std::memcpy(p, &v, 2);
        break;
      }
      case DType::F16: {
        fp16 v = float_to_fp16(real(rng));
        std::memcpy(p, &v, 2);
        break;
      }
      case DType::I32: {
        int32_t v = integer(rng);
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::I64: {
        int64_t v = integer(rng) * 1000003LL;
        std::memcpy(p, &v, 8);
        break;
      }
      case DType::I8: {
        auto v = static_cast<int8_t>(integer(rng) % 100);
        std::memcpy(p, &v, 1);
        break;
      }
    }
  }
  return out;
}

inline constexpr DType kAllDtypes[] = {DType::F32, DType::BF16, DType::F16,
                                       DType::I32, DType::I64,  DType::I8};

class MpiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MpiWorld& w = MpiWorld::instance();
    rank_ = w.rank();
    world_ = w.size();
    device_ = make_cpu_device(rank_);
    stream_ = &device_->create_stream("test");
  }
  void TearDown() override { device_.reset(); }

  MakeComm mpi_maker(CommOptions options = mpi_test_options()) const {
    return [options](const ProcessGroup& g, const std::string& channel) {
      return MpiWorld::instance().make_communicator(g, channel, options);
    };
  }

  // Runs `scenario` over MPI (this process's rank) and over LocalCommunicators (all ranks as
  // threads here) and expects this rank's bytes to be identical.
  void expect_same_as_local(const std::string& name, const Scenario& scenario) {
    const Bytes got = scenario(mpi_maker(), *stream_, rank_, world_);
    Bytes want;
    World::run(world_, [&](RankContext& ctx) {
      Stream& ls = ctx.device->create_stream(name);
      MakeComm local = [&ctx](const ProcessGroup& g, const std::string& ch) {
        return ctx.communicator(g, ch);
      };
      Bytes mine = scenario(local, ls, ctx.rank, ctx.world_size);
      if (ctx.rank == rank_) want = std::move(mine);
    });
    ASSERT_EQ(got.size(), want.size()) << name << ": rank " << rank_;
    size_t first_diff = got.size();
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want[i]) {
        first_diff = i;
        break;
      }
    EXPECT_EQ(first_diff, got.size())
        << name << ": rank " << rank_ << " of " << world_
        << " differs from LocalCommunicator at byte " << first_diff << " of " << got.size();
  }

  int rank_ = 0;
  int world_ = 1;
  std::unique_ptr<Device> device_;
  Stream* stream_ = nullptr;  // on device_
};

}  // namespace moezero::comm::testing
