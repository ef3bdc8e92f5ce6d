// tests/comm/nccl_communicator_test.cpp — NcclCommunicator on one GPU (world size 1): every
// collective with exact results, the debug call check, trace records; the in-process id
// bootstrap (no GPU needed). Skips with the reason where CUDA is not available.
#include <gtest/gtest.h>

#include "kernels/backend.h"

#if defined(MOEZERO_HAVE_CUDA)
#include <cuda_runtime.h>

#include <thread>

#include "comm/nccl/nccl_communicator.h"
#include "core/cuda_check.h"
#endif

namespace moezero::comm {
namespace {

#if defined(MOEZERO_HAVE_CUDA)
// A device buffer of `n` floats filled from / read back to the host.
struct DeviceFloats {
  explicit DeviceFloats(const std::vector<float>& host) : n(host.size()) {
    MOEZERO_CUDA_CHECK(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(float)));
    if (n) MOEZERO_CUDA_CHECK(cudaMemcpy(ptr, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  ~DeviceFloats() { cudaFree(ptr); }
  std::vector<float> host() const {
    std::vector<float> v(n);
    if (n) MOEZERO_CUDA_CHECK(cudaMemcpy(v.data(), ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
    return v;
  }
  float* ptr = nullptr;
  size_t n;
};

TEST(NcclBootstrap, NonRootGetsRootsIdOrTimesOut) {
  InProcessNcclBootstrap boot(std::chrono::milliseconds(200));
  auto exchange = boot.exchange();
  ncclUniqueId id{};
  id.internal[0] = 42;
  ncclUniqueId got{};
  std::thread t([&] { got = exchange("a2a@ep0{0,1}", std::nullopt); });
  exchange("a2a@ep0{0,1}", id);
  t.join();
  EXPECT_EQ(got.internal[0], 42);
  EXPECT_THROW(exchange("never@world{0,1}", std::nullopt), TimeoutError);
}
#endif

TEST(NcclCommunicator, WorldSizeOneCollectives) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << "CUDA not available: " << why;
#if defined(MOEZERO_HAVE_CUDA)
  auto device = make_cuda_device(0);
  Stream& s = device->create_stream("nccl");
  InProcessNcclBootstrap boot;
  CommOptions opts;
  opts.timeout = std::chrono::seconds(60);
  opts.call_check = CallCheck::On;
  NcclCommunicator comm(make_world_group(1), 0, "gather", *device, boot.exchange(), opts);
  const std::vector<float> x{1, -2, 3, 4.5f, 0, 7, -8, 9, 10};
  DeviceFloats a(x), b(std::vector<float>(x.size(), -1));
  comm.all_gather(a.ptr, b.ptr, x.size(), DType::F32, s);
  comm.synchronize(s);
  EXPECT_EQ(b.host(), x);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    DeviceFloats c(std::vector<float>(x.size(), -1));
    comm.all_reduce(a.ptr, c.ptr, x.size(), DType::F32, op, s);
    comm.synchronize(s);
    EXPECT_EQ(c.host(), x) << reduce_op_name(op);
    DeviceFloats d(std::vector<float>(x.size(), -1));
    comm.reduce_scatter(a.ptr, d.ptr, x.size(), DType::F32, op, s);
    comm.synchronize(s);
    EXPECT_EQ(d.host(), x) << reduce_op_name(op);
  }
  DeviceFloats e(std::vector<float>(x.size(), -1));
  comm.broadcast(a.ptr, e.ptr, x.size(), DType::F32, 0, s);
  std::vector<size_t> counts{x.size()};
  DeviceFloats f(std::vector<float>(x.size(), -1));
  comm.all_to_all_v(a.ptr, counts, f.ptr, counts, DType::F32, s);
  std::vector<size_t> zero{0};
  comm.all_to_all_v(a.ptr, zero, f.ptr, zero, DType::F32, s);
  comm.barrier(s);
  comm.synchronize(s);
  EXPECT_EQ(e.host(), x);
  EXPECT_EQ(f.host(), x);
  const auto recs = comm.records();
  ASSERT_EQ(recs.size(), 11u);
  EXPECT_EQ(recs.back().op, CollectiveOp::Barrier);
  EXPECT_EQ(recs.back().seq, 10u);
  EXPECT_EQ(recs[0].bytes, x.size() * sizeof(float));
  EXPECT_EQ(recs[0].group, "world{0}");
#endif
}

}  // namespace
}  // namespace moezero::comm
