// The simulated backend's device (kernels/sim/sim_device.h): virtual times of known sequences
// (against the cost formulas of a profile with round numbers), host clock and synchronisation,
// unbacked big buffers, backed small buffers that hold real values, OOM, profiles.
#include "kernels/sim/sim_device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "core/virtual_time.h"
#include "kernels/backend.h"

namespace moezero::sim {
namespace {

// 1 TFLOP/s bf16, 0.5 TFLOP/s fp32, 1 TB/s, no curves, no launch cost unless asked.
GpuProfile round_profile(double launch_s = 0.0) {
  GpuProfile p;
  p.name = "round";
  p.description = "test profile";
  p.bf16_flops = 1e12;
  p.fp32_flops = 0.5e12;
  p.hbm_bytes_per_s = 1e12;
  p.host_link_bytes_per_s = 1e10;
  p.launch_s = launch_s;
  p.memory_bytes = uint64_t{80} << 30;
  return p;
}

constexpr double kTol = 1e-12;

struct Gemm {
  TensorBuffer a, b, c;
  Gemm(Device& d, Stream& s, int64_t n, DType t)
      : a(d, t, {n, n}, MemTag::Activation, s),
        b(d, t, {n, n}, MemTag::Activation, s),
        c(d, t, {n, n}, MemTag::Activation, s) {}
  void run(Device& d, Stream& s) const { d.ops().gemm(s, GemmArgs{a, b, c}); }
};

// 1024^3 bf16: 2 * 2^30 FLOPs over 1 TFLOP/s; its 6 MiB of operands take 6.3 us at 1 TB/s
// (the roofline takes the larger: compute).
constexpr double kGemmSeconds = 2.0 * 1024 * 1024 * 1024 / 1e12;

TEST(SimDevice, TwoGemmsOnOneStreamAdd) {
  auto dev = make_sim_device(0, round_profile());
  Stream& s = dev->create_stream("compute");
  Gemm g(*dev, s, 1024, DType::BF16);
  ASSERT_TRUE(is_unbacked(g.a.view().data()));
  g.run(*dev, s);
  g.run(*dev, s);
  EXPECT_NEAR(*dev->virtual_time_s(), 0.0, kTol);  // the host ran ahead
  s.synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), 2 * kGemmSeconds, 1e-9);
}

TEST(SimDevice, GroupedGemmAndAttentionCostTheirFlops) {
  auto dev = make_sim_device(0, round_profile());
  Stream& s = dev->create_stream("compute");
  Gemm g1(*dev, s, 1024, DType::BF16), g2(*dev, s, 1024, DType::BF16);
  const GemmProblem problems[2] = {{g1.a, g1.b, g1.c}, {g2.a, g2.b, g2.c}};
  dev->ops().grouped_gemm(s, problems, Transpose::No, Transpose::No, 1.0f, 0.0f);
  s.synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), 2 * kGemmSeconds, 1e-9);
  // Causal attention, B 2, T 2048, H 16, D 128: 2 B H T^2 D forward, 2.5x backward.
  const Shape qs{2, 2048, 16, 128};
  TensorBuffer q(*dev, DType::BF16, qs, MemTag::Activation, s),
      k(*dev, DType::BF16, qs, MemTag::Activation, s),
      v(*dev, DType::BF16, qs, MemTag::Activation, s),
      o(*dev, DType::BF16, qs, MemTag::Activation, s),
      lse(*dev, DType::F32, {2, 16, 2048}, MemTag::Activation, s);
  const double fwd = 2.0 * 2 * 16 * 2048.0 * 2048 * 128 / 1e12;
  dev->ops().attention_forward(s, q, k, v, o, lse);
  s.synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), 2 * kGemmSeconds + fwd, 1e-9);
  dev->ops().attention_backward(s, q, k, v, o, lse, o, q, k, v);
  s.synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), 2 * kGemmSeconds + 3.5 * fwd, 1e-9);
}

TEST(SimDevice, CapacityOptionLimitsMemory) {
  SimDeviceOptions opt;
  opt.capacity_bytes = uint64_t{1} << 30;
  auto dev = make_sim_device(0, round_profile(), opt);
  Stream& s = dev->default_stream();
  Buffer a = dev->allocator().allocate(size_t{800} << 20, MemTag::Activation, s);
  EXPECT_THROW(dev->allocator().allocate(size_t{300} << 20, MemTag::Activation, s),
               OutOfMemoryError);
  a.reset();
  Buffer b = dev->allocator().allocate(size_t{300} << 20, MemTag::Activation, s);  // fits again
  EXPECT_TRUE(b);
}

TEST(SimDevice, Fp32GemmUsesTheFp32Peak) {
  auto dev = make_sim_device(0, round_profile());
  Stream& s = dev->create_stream("compute");
  Gemm g(*dev, s, 1024, DType::F32);
  g.run(*dev, s);
  s.synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), 2 * kGemmSeconds, 1e-9);  // half the peak: twice as long
}

TEST(SimDevice, TwoStreamsOverlap) {
  auto dev = make_sim_device(0, round_profile());
  Stream& s1 = dev->create_stream("compute");
  Stream& s2 = dev->create_stream("gather");
  Gemm g1(*dev, s1, 1024, DType::BF16), g2(*dev, s2, 1024, DType::BF16);
  g1.run(*dev, s1);
  g2.run(*dev, s2);
  dev->synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), kGemmSeconds, 1e-9);
}

// A CPU rank (one_executor) runs one op at a time whatever its stream: the two GEMMs of
// TwoStreamsOverlap take turns, and a collective's local copying takes the executor's time too.
TEST(SimDevice, OneExecutorSerialisesStreams) {
  GpuProfile p = round_profile();
  p.one_executor = true;
  auto dev = make_sim_device(0, p);
  Stream& s1 = dev->create_stream("compute");
  Stream& s2 = dev->create_stream("gather");
  Gemm g1(*dev, s1, 1024, DType::BF16), g2(*dev, s2, 1024, DType::BF16);
  g1.run(*dev, s1);
  g2.run(*dev, s2);
  dev->synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), 2 * kGemmSeconds, 1e-9);
  // 1 GB of a collective's own copying at 1 TB/s: 1 ms of the executor, after the GEMMs.
  auto* vs = dynamic_cast<VirtualStream*>(&s2);
  ASSERT_NE(vs, nullptr);
  const double t0 = *dev->virtual_time_s();
  EXPECT_NEAR(vs->reserve_local_work(0.0, 1e9), t0 + 1e-3, 1e-9);  // fills no earlier gap
  g1.run(*dev, s1);  // queued behind the copy's reservation
  dev->synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), t0 + 1e-3 + kGemmSeconds, 1e-9);
  // Without one_executor (a GPU) the copy is free and the streams overlap.
  auto gpu = make_sim_device(1, round_profile());
  Stream& g = gpu->create_stream("gather");
  EXPECT_EQ(dynamic_cast<VirtualStream*>(&g)->reserve_local_work(0.5, 1e9), 0.5);
}

TEST(SimDevice, EventWaitOrdersStreams) {
  auto dev = make_sim_device(0, round_profile());
  Stream& s1 = dev->create_stream("gather");
  Stream& s2 = dev->create_stream("compute");
  Gemm g1(*dev, s1, 1024, DType::BF16), g2(*dev, s2, 1024, DType::BF16);
  auto start = dev->create_event(), mid = dev->create_event(), end = dev->create_event();
  start->record(s1);
  g1.run(*dev, s1);
  mid->record(s1);
  s2.wait(*mid);
  g2.run(*dev, s2);
  end->record(s2);
  end->synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), 2 * kGemmSeconds, 1e-9);
  EXPECT_NEAR(end->elapsed_ms_since(*start), 2e3 * kGemmSeconds, 1e-5);
  EXPECT_NEAR(mid->elapsed_ms_since(*start), 1e3 * kGemmSeconds, 1e-5);
}

TEST(SimDevice, LaunchOverheadBoundsAChainOfTinyOps) {
  const double launch = 10e-6;
  auto dev = make_sim_device(0, round_profile(launch));
  Stream& s = dev->create_stream("compute");
  TensorBuffer x(*dev, DType::F32, {1 << 20}, MemTag::Activation, s);  // 4 MiB: 4.2 us at 1 TB/s
  const int n = 100;
  for (int i = 0; i < n; ++i) dev->ops().scale(s, x, 2.0f);  // 8 MiB each: 8.4 us < launch
  EXPECT_NEAR(*dev->virtual_time_s(), n * launch, 1e-12);    // the host paid every launch
  s.synchronize();
  const double op = 2.0 * 4 * (1 << 20) / 1e12;
  // Each op starts when the host has launched it: the last at n * launch.
  EXPECT_NEAR(*dev->virtual_time_s(), n * launch + op, 1e-9);
}

TEST(SimDevice, SynchronizeMovesTheHostClockToWhatItAwaited) {
  auto dev = make_sim_device(0, round_profile());
  Stream& s = dev->create_stream("compute");
  Gemm g(*dev, s, 1024, DType::BF16);
  auto e = dev->create_event();
  g.run(*dev, s);
  e->record(s);
  g.run(*dev, s);
  g.run(*dev, s);
  e->synchronize();  // only the first GEMM
  EXPECT_NEAR(*dev->virtual_time_s(), kGemmSeconds, 1e-9);
  dev->synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), 3 * kGemmSeconds, 1e-9);
  // An op launched now starts at the host's time: the stream was idle.
  g.run(*dev, s);
  s.synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), 4 * kGemmSeconds, 1e-9);
}

TEST(SimDevice, HostTasksRunInStreamOrder) {
  auto dev = make_sim_device(0, round_profile(1e-6));
  Stream& s = dev->create_stream("compute");
  std::vector<int> seen;
  for (int i = 0; i < 100; ++i) s.enqueue_host([&seen, i] { seen.push_back(i); });
  s.synchronize();
  ASSERT_EQ(seen.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(seen[i], i);
  EXPECT_NEAR(*dev->virtual_time_s(), 100e-6, 1e-12);
}

TEST(SimDevice, StickyErrorsSurfaceAtSynchronize) {
  auto dev = make_sim_device(0, round_profile());
  Stream& s = dev->create_stream("compute");
  s.enqueue_host([] { MOEZERO_THROW("boom"); });
  bool ran = false;
  s.enqueue_host([&] { ran = true; });
  EXPECT_THROW(s.synchronize(), Error);
  EXPECT_FALSE(ran);
}

// The simulated objects are the CPU backend's with a virtual clock: a CPU event still cannot
// order a simulated stream, nor a simulated event a CPU stream (their clocks do not meet).
TEST(SimDevice, EventsDoNotCrossToTheCpuBackend) {
  auto sim = make_sim_device(0, round_profile());
  auto cpu = make_cpu_device(0);
  Stream& ss = sim->create_stream("compute");
  Stream& cs = cpu->create_stream("compute");
  auto sim_event = sim->create_event();
  auto cpu_event = cpu->create_event();
  sim_event->record(ss);
  cpu_event->record(cs);
  EXPECT_THROW(ss.wait(*cpu_event), Error);
  EXPECT_THROW(cs.wait(*sim_event), Error);
  EXPECT_THROW(sim_event->record(cs), Error);
  EXPECT_THROW(cpu_event->record(ss), Error);
  sim->synchronize();
  cpu->synchronize();
  EXPECT_THROW((void)sim_event->elapsed_ms_since(*cpu_event), Error);
}

TEST(SimDevice, BigAllocationsAreUnbackedButCountedByTag) {
  auto dev = make_sim_device(0, gpu_profile("h100"));
  Stream& s = dev->default_stream();
  const size_t forty_gb = size_t{40} * 1000 * 1000 * 1000;
  Buffer shard = dev->allocator().allocate(forty_gb, MemTag::ParamShard, s, "expert shard");
  EXPECT_TRUE(is_unbacked(shard.data()));
  MemStats st = dev->allocator().stats();
  EXPECT_EQ(st.current_bytes[static_cast<size_t>(MemTag::ParamShard)], forty_gb);
  // Ops on it cost time and compute nothing (no memory behind it to touch).
  Tensor t(shard.data(), DType::BF16, {static_cast<int64_t>(forty_gb / 2)}, dev.get());
  dev->ops().scale(s, t, 0.5f);
  s.synchronize();
  EXPECT_GT(*dev->virtual_time_s(), 2 * 40e9 / 3.35e12);
  // Past the profile's 80 GiB: a clear out-of-memory error naming the buffer.
  try {
    Buffer more = dev->allocator().allocate(size_t{50} << 30, MemTag::FullParam, s, "gather");
    FAIL() << "expected out of memory";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory on sim:0 (h100)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("gather"), std::string::npos) << e.what();
  }
}

TEST(SimDevice, SmallBuffersAreBackedAndHoldValues) {
  auto dev = make_sim_device(0, round_profile());
  Stream& s = dev->default_stream();
  ASSERT_EQ(guaranteed_backed_bytes(SimDeviceOptions{}), (64u * 1024 - 4096) * 4 / 5);
  TensorBuffer a(*dev, DType::F32, {4}, MemTag::Other, s),
      b(*dev, DType::F32, {4}, MemTag::Other, s);
  ASSERT_FALSE(is_unbacked(a.view().data()));
  const float av[4] = {1, 2, 3, 4}, bv[4] = {10, 20, 30, 40};
  dev->memcpy_async(a.view().data(), av, sizeof av, s);
  dev->memcpy_async(b.view().data(), bv, sizeof bv, s);
  dev->ops().add(s, a, b, a);  // all backed: the CPU kernel runs
  float out[4] = {};
  dev->memcpy_async(out, a.view().data(), sizeof out, s);
  s.synchronize();
  EXPECT_EQ(out[0], 11);
  EXPECT_EQ(out[3], 44);
  // Host <-> device copies cost bytes / host link bandwidth.
  EXPECT_NEAR(*dev->virtual_time_s(), 3 * 16 / 1e10 + 48 / 1e12, 1e-15);
}

// Only what the host reads back is real past backed_bytes (the trainer's step statistics at
// 1,024 ranks): a gradient of the same size stays unbacked, and the allocator never hands
// the host a cached unbacked block, nor a gradient a cached host-read one.
TEST(SimDevice, HostReadBuffersAreBackedPastBackedBytes) {
  SimDeviceOptions o;
  o.host_read_backed_bytes = 1 << 20;
  auto dev = make_sim_device(0, round_profile(), o);
  Stream& s = dev->default_stream();
  const int64_t n = 100'000;  // 800 KB: above backed_bytes, below 4/5 of host_read_backed_bytes
  ASSERT_GT(guaranteed_host_read_backed_bytes(o), static_cast<uint64_t>(n) * 8);
  ASSERT_LT(guaranteed_backed_bytes(o), static_cast<uint64_t>(n) * 8);
  {
    TensorBuffer grad(*dev, DType::I64, {n}, MemTag::Grad, s);
    EXPECT_TRUE(is_unbacked(grad.view().data()));
  }
  s.synchronize();  // the gradient's block is cached now
  TensorBuffer words(*dev, DType::I64, {n}, MemTag::CommBuffer, s, "host exchange", HostRead::Yes);
  ASSERT_FALSE(is_unbacked(words.view().data()));
  std::vector<int64_t> in(static_cast<size_t>(n)), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int64_t>(i) * 3 - 7;
  dev->memcpy_async(words.view().data(), in.data(), in.size() * 8, s);
  dev->memcpy_async(out.data(), words.view().data(), out.size() * 8, s);
  s.synchronize();
  EXPECT_EQ(out, in);
  words.reset();
  s.synchronize();  // the host-read block is cached now
  TensorBuffer grad(*dev, DType::I64, {n}, MemTag::Grad, s);
  EXPECT_TRUE(is_unbacked(grad.view().data()));
  // Counted by tag as usual.
  EXPECT_EQ(dev->allocator().stats().current_bytes[static_cast<size_t>(MemTag::Grad)],
            static_cast<size_t>(n) * 8);
}

TEST(SimDevice, UnbackedReadsAsZerosAndHealthChecksReadAllFinite) {
  auto dev = make_sim_device(0, round_profile());
  Stream& s = dev->default_stream();
  TensorBuffer big(*dev, DType::F32, {1 << 20}, MemTag::Grad, s);
  TensorBuffer result(*dev, DType::I64, {3}, MemTag::Other, s);
  TensorBuffer sq(*dev, DType::F32, {1}, MemTag::Other, s);
  ASSERT_TRUE(is_unbacked(big.view().data()));
  dev->ops().fill(s, result, 7.0);  // backed: really written
  dev->ops().fill(s, sq, 2.5);
  dev->ops().find_nonfinite(s, big, result);
  dev->ops().sum_squares(s, big, sq);
  int64_t r[3] = {9, 9, 9};
  float q = 0.0f;
  std::vector<float> host(16, 5.0f);
  dev->memcpy_async(r, result.view().data(), sizeof r, s);
  dev->memcpy_async(&q, sq.view().data(), sizeof q, s);
  dev->memcpy_async(host.data(), big.view().data(), host.size() * sizeof(float), s);
  s.synchronize();
  EXPECT_EQ(r[0], -1);
  EXPECT_EQ(r[1], 0);
  EXPECT_EQ(r[2], 0);
  EXPECT_EQ(q, 2.5f);  // sum_squares adds 0
  for (float v : host) EXPECT_EQ(v, 0.0f);
}

TEST(SimDevice, ProfilesAreKnownByName) {
  const std::vector<std::string> names = gpu_profile_names();
  for (const char* want : {"h100", "h200", "a100", "cpu"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  EXPECT_EQ(gpu_profile("h200").hbm_bytes_per_s, 4.8e12);
  EXPECT_EQ(gpu_profile("a100").bf16_flops, 312e12);
  EXPECT_EQ(gpu_profile("cpu").sharing, 2);
  try {
    gpu_profile("h1000");
    FAIL() << "expected an error";
  } catch (const UserError& e) {
    EXPECT_NE(
        std::string(e.what()).find("unknown GPU profile 'h1000' (known: h100, h200, a100, cpu"),
        std::string::npos)
        << e.what();
  }
}

TEST(SimDevice, SharingMultipliesOpTimes) {
  GpuProfile p = round_profile();
  p.sharing = 2;
  auto dev = make_sim_device(0, p);
  Stream& s = dev->create_stream("compute");
  Gemm g(*dev, s, 1024, DType::BF16);
  g.run(*dev, s);
  s.synchronize();
  EXPECT_NEAR(*dev->virtual_time_s(), 2 * kGemmSeconds, 1e-9);
}

TEST(SimDevice, EfficiencyCurveChargesAFixedCostPerOp) {
  GpuProfile p = round_profile();
  p.gemm_max_efficiency = 0.5;
  p.gemm_half_flops = 1e9;
  EXPECT_NEAR(p.gemm_seconds(1e9, true), 2e9 / 0.5e12, 1e-15);  // half of 0.5 * peak
  p.mem_half_bytes = 1e6;
  EXPECT_NEAR(p.memory_seconds(1e6), 2e6 / 1e12, 1e-15);
}

}  // namespace
}  // namespace moezero::sim
