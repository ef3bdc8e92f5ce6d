// The caching allocator: byte accounting by tag (current and peak), stream-safe reuse (a block
// freed while another stream still reads it is not handed out until that stream passes the
// release point), and out-of-memory errors that name the tag and the request.
#include "core/allocator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <latch>
#include <thread>

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/backend.h"

namespace moezero {
namespace {

// The state peak is simultaneous: a cached expert retagged from full_param to cache, and a
// gradient allocated after a full parameter is freed, are not counted twice.
TEST(Allocator, StatePeakIsTheSimultaneousPeakOfTheStateTags) {
  auto dev = make_cpu_device(0);
  Stream& s = dev->default_stream();
  Allocator& alloc = dev->allocator();
  {
    Buffer act = alloc.allocate(5000, MemTag::Activation, s);  // not state
    Buffer full = alloc.allocate(1000, MemTag::FullParam, s);
    full.retag(MemTag::Cache);
    EXPECT_EQ(alloc.stats().state_current_bytes, 1000u);
    full = Buffer();
    Buffer grad = alloc.allocate(800, MemTag::Grad, s);
    const MemStats st = alloc.stats();
    EXPECT_EQ(st.state_current_bytes, 800u);
    EXPECT_EQ(st.state_peak_bytes, 1000u);  // the sum of the tags' own peaks would say 2800
    EXPECT_EQ(st.peak_bytes[size_t(MemTag::FullParam)] + st.peak_bytes[size_t(MemTag::Cache)] +
                  st.peak_bytes[size_t(MemTag::Grad)],
              2800u);
    alloc.reset_peak();
    EXPECT_EQ(alloc.stats().state_peak_bytes, 800u);
  }
  s.synchronize();
  EXPECT_EQ(alloc.stats().state_current_bytes, 0u);
}

TEST(Allocator, CountsBytesByTagWithPeaks) {
  auto dev = make_cpu_device(0);
  Stream& s = dev->default_stream();
  Allocator& alloc = dev->allocator();
  {
    Buffer a = alloc.allocate(1000, MemTag::ParamShard, s);
    Buffer b = alloc.allocate(3000, MemTag::Activation, s);
    {
      Buffer c = alloc.allocate(500, MemTag::Activation, s);
      MemStats st = alloc.stats();
      EXPECT_EQ(st.current_bytes[size_t(MemTag::ParamShard)], 1000u);
      EXPECT_EQ(st.current_bytes[size_t(MemTag::Activation)], 3500u);
      EXPECT_EQ(st.total_current_bytes, 4500u);
    }
    MemStats st = alloc.stats();
    EXPECT_EQ(st.current_bytes[size_t(MemTag::Activation)], 3000u);
    EXPECT_EQ(st.peak_bytes[size_t(MemTag::Activation)], 3500u);
    EXPECT_EQ(st.total_peak_bytes, 4500u);
  }
  s.synchronize();
  MemStats st = alloc.stats();
  EXPECT_EQ(st.total_current_bytes, 0u);
  EXPECT_EQ(st.total_peak_bytes, 4500u);
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().total_peak_bytes, 0u);
}

TEST(Allocator, RetagMovesBytesBetweenTags) {
  auto dev = make_cpu_device(0);
  Allocator& alloc = dev->allocator();
  Buffer b = alloc.allocate(4096, MemTag::FullParam, dev->default_stream());
  b.retag(MemTag::Cache);
  MemStats st = alloc.stats();
  EXPECT_EQ(st.current_bytes[size_t(MemTag::FullParam)], 0u);
  EXPECT_EQ(st.current_bytes[size_t(MemTag::Cache)], 4096u);
  EXPECT_EQ(st.peak_bytes[size_t(MemTag::Cache)], 4096u);
  EXPECT_EQ(st.total_current_bytes, 4096u);
  b.reset();
  EXPECT_EQ(alloc.stats().current_bytes[size_t(MemTag::Cache)], 0u) << "freed under its new tag";
}

TEST(Allocator, ZeroBytesGivesEmptyBuffer) {
  auto dev = make_cpu_device(0);
  Buffer b = dev->allocator().allocate(0, MemTag::Other, dev->default_stream());
  EXPECT_FALSE(b);
  EXPECT_EQ(b.data(), nullptr);
}

TEST(Allocator, BlockFreedWhileAnotherStreamReadsIsNotReusedEarly) {
  auto dev = make_cpu_device(0);
  Stream& home = dev->create_stream("compute");
  Stream& reader = dev->create_stream("reduce");
  Allocator& alloc = dev->allocator();
  std::latch gate(1);
  Buffer buf = alloc.allocate(1 << 16, MemTag::Grad, home);
  void* first = buf.data();
  // The reader stream is held up "using" the buffer.
  reader.enqueue_host([&gate] { gate.wait(); });
  buf.record_stream(reader);
  buf.reset();  // host frees it while `reader` has not passed this point
  Buffer again = alloc.allocate(1 << 16, MemTag::Grad, home);
  EXPECT_NE(again.data(), first) << "block reused while another stream may still read it";
  EXPECT_GT(alloc.stats().pending_bytes, 0u);
  gate.count_down();
  reader.synchronize();
  home.synchronize();
  Buffer third = alloc.allocate(1 << 16, MemTag::Grad, home);
  EXPECT_EQ(third.data(), first) << "after both streams passed, the cached block is reused";
  EXPECT_EQ(alloc.stats().pending_bytes, 0u);
}

TEST(Allocator, OutOfMemoryNamesTagAndRequest) {
  auto dev = make_cpu_device(0, CpuDeviceOptions{.capacity_bytes = 1 << 20});
  Stream& s = dev->default_stream();
  Buffer a = dev->allocator().allocate(900 << 10, MemTag::FullParam, s, "layer 3 expert 5");
  try {
    Buffer b = dev->allocator().allocate(200 << 10, MemTag::Cache, s, "expert 7 cache entry");
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("expert 7 cache entry"), std::string::npos) << m;
    EXPECT_NE(m.find("cache"), std::string::npos) << m;
    EXPECT_NE(m.find("204800"), std::string::npos) << m;
  }
  // Freeing makes room again: the failed request left the allocator consistent.
  a.reset();
  Buffer c = dev->allocator().allocate(200 << 10, MemTag::Cache, s);
  EXPECT_TRUE(c);
}

// train.memory_limit's report: the tag, the buffer (a parameter group), the request, the limit,
// and what is in use by tag, largest first.
TEST(Allocator, OutOfMemoryReportsLimitAndBytesInUseByTag) {
  auto dev = make_cpu_device(0, CpuDeviceOptions{.capacity_bytes = 1 << 20});
  Stream& s = dev->default_stream();
  Buffer a = dev->allocator().allocate(300 << 10, MemTag::Activation, s, "attn out");
  Buffer b = dev->allocator().allocate(600 << 10, MemTag::FullParam, s, "layers.1.experts.3");
  try {
    Buffer c = dev->allocator().allocate(200 << 10, MemTag::FullParam, s, "layers.1.experts.5");
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    for (const char* want :
         {"out of memory on cpu:0: full_param buffer 'layers.1.experts.5' asked for 204800 bytes "
          "(200.0 KiB)",
          "the limit is 1048576 bytes (1.0 MiB, train.memory_limit)",
          "in use 900.0 KiB, by tag: full_param 600.0 KiB, activation 300.0 KiB"})
      EXPECT_NE(m.find(want), std::string::npos) << "missing '" << want << "' in: " << m;
  }
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(3ull << 30), "3.0 GiB");
}

// With cache-tagged buffers in use the report says how to give them back; without, it does not.
TEST(Allocator, OutOfMemoryNamesTheCacheBudgetWhenTheCacheHoldsMemory) {
  auto dev = make_cpu_device(0, CpuDeviceOptions{.capacity_bytes = 1 << 20});
  Stream& s = dev->default_stream();
  const auto report = [&](Allocator& a) {
    try {
      Buffer c = a.allocate(600 << 10, MemTag::FullParam, s, "layers.0.experts.1");
    } catch (const OutOfMemoryError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  {
    Buffer a = dev->allocator().allocate(600 << 10, MemTag::Activation, s, "attn out");
    EXPECT_EQ(report(dev->allocator()).find("shard_cache.capacity_bytes"), std::string::npos);
  }
  Buffer k = dev->allocator().allocate(600 << 10, MemTag::Cache, s, "layers.0.experts.0");
  const std::string m = report(dev->allocator());
  EXPECT_NE(m.find("the cache holds 600.0 KiB: a smaller shard_cache.capacity_bytes"),
            std::string::npos)
      << m;
}

TEST(TensorBuffer, OwnsItsMemoryAndViewsIt) {
  auto dev = make_cpu_device(0);
  Stream& s = dev->default_stream();
  {
    TensorBuffer t(*dev, DType::BF16, Shape{3, 5}, MemTag::Activation, s);
    EXPECT_EQ(t.view().size_bytes(), 30u);
    EXPECT_EQ(t.view().device(), dev.get());
    EXPECT_EQ(dev->allocator().stats().current_bytes[size_t(MemTag::Activation)], 30u);
  }
  EXPECT_EQ(dev->allocator().stats().current_bytes[size_t(MemTag::Activation)], 0u);
}

// A CPU device whose raw_free waits for the whole device, as cudaFree does: it counts the
// frees that happen while a stream task is still running (what deadlocks behind a collective).
class FreeWaitsDevice final : public Device {
 public:
  FreeWaitsDevice() : inner_(make_cpu_device(0)) {}
  DeviceKind kind() const override { return inner_->kind(); }
  int index() const override { return inner_->index(); }
  std::string name() const override { return "free-waits " + inner_->name(); }
  Stream& default_stream() override { return inner_->default_stream(); }
  Stream& create_stream(std::string name) override { return inner_->create_stream(name); }
  std::unique_ptr<Event> create_event() override { return inner_->create_event(); }
  void synchronize() override { inner_->synchronize(); }
  Ops& ops() override { return inner_->ops(); }
  Allocator& allocator() override { return inner_->allocator(); }
  void* raw_alloc(size_t bytes) override { return inner_->raw_alloc(bytes); }
  void raw_free(void* ptr) override {
    frees_while_busy += busy.load() ? 1 : 0;
    inner_->raw_free(ptr);
  }
  void memcpy_async(void* dst, const void* src, size_t bytes, Stream& s) override {
    inner_->memcpy_async(dst, src, bytes, s);
  }
  void memset_async(void* dst, int value, size_t bytes, Stream& s) override {
    inner_->memset_async(dst, value, bytes, s);
  }
  bool raw_free_synchronizes() const override { return true; }

  std::atomic<bool> busy{false};
  int frees_while_busy = 0;

 private:
  std::unique_ptr<Device> inner_;
};

TEST(Allocator, OutOfMemoryRetryDrainsTheStreamsBeforeAFreeThatWaitsForTheDevice) {
  FreeWaitsDevice dev;
  Stream& s = dev.create_stream("reduce");
  const size_t block = 1 << 20;
  Allocator alloc(dev, 3 * block);                              // room for three blocks
  { Buffer cached = alloc.allocate(block, MemTag::Other, s); }  // freed: cached once s passes
  s.synchronize();
  Buffer held = alloc.allocate(block, MemTag::Other, s);       // the cached block again
  { Buffer again = alloc.allocate(block, MemTag::Other, s); }  // a second block, cached
  s.synchronize();
  // A task still running on the stream: a "collective" waiting for its peer.
  std::atomic<bool> release{false};
  dev.busy = true;
  s.enqueue_host([&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    dev.busy = false;
  });
  std::jthread peer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    release = true;
  });
  // 1.5 blocks fit beside `held` only once the cached block is given back (2 + 1.5 > 3): the
  // retry must let the stream finish before it frees.
  Buffer big = alloc.allocate(block + block / 2, MemTag::Other, s);
  peer.join();
  EXPECT_EQ(dev.frees_while_busy, 0) << "a cached block was freed while a stream task ran";
  EXPECT_FALSE(dev.busy.load());
  EXPECT_GE(alloc.stats().device_alloc_count, 3u);
  s.synchronize();
}

}  // namespace
}  // namespace moezero
