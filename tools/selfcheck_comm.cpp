// tools/selfcheck_comm.cpp — collectives of `moezero selfcheck` on ranks-as-threads.
// Inputs are small integers in float, so every sum is exact and results are compared bit
// for bit on every rank.
#include "tools/selfcheck_comm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

#include "comm/world.h"
#include "core/communicator.h"
#include "core/process_groups.h"
#include "core/tensor.h"

namespace moezero::cli {
namespace {

struct Tally {
  std::mutex mu;
  std::vector<std::pair<std::string, int>> failures;  // (collective, ranks that saw a mismatch)
  std::vector<std::string> order;
  void result(const std::string& what, bool ok) {
    std::lock_guard lock(mu);
    auto it = std::find_if(failures.begin(), failures.end(), [&](auto& p) { return p.first == what; });
    if (it == failures.end()) {
      failures.push_back({what, 0});
      order.push_back(what);
      it = failures.end() - 1;
    }
    if (!ok) ++it->second;
  }
};

std::vector<float> run_and_fetch(Device& dev, Stream& s, const Tensor& t) {
  s.synchronize();
  std::vector<float> v(static_cast<size_t>(t.numel()));
  dev.memcpy_async(v.data(), t.data(), t.size_bytes(), s);
  s.synchronize();
  return v;
}

void put(Device& dev, Stream& s, const Tensor& t, const std::vector<float>& v) {
  dev.memcpy_async(t.data(), v.data(), v.size() * sizeof(float), s);
  s.synchronize();
}

}  // namespace

void check_collectives(int ranks, const CheckLine& report) {
  Tally tally;
  const size_t n = 1000;
  comm::WorldOptions options;
  options.comm.timeout = std::chrono::seconds(30);
  comm::World::run(ranks, [&](comm::RankContext& ctx) {
    Device& dev = *ctx.device;
    Stream& s = dev.create_stream("comm");
    auto world = ctx.communicator(ctx.world_group(), "selfcheck");
    const int r = ctx.rank, W = ctx.world_size;
    auto buf = [&](size_t elems) {
      return TensorBuffer(dev, DType::F32, Shape{static_cast<int64_t>(elems)}, MemTag::CommBuffer, s);
    };
    {  // all_gather
      auto send = buf(n), recv = buf(n * W);
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = float(r * 1000 + int(i % 1000));
      put(dev, s, send, v);
      world->all_gather(send.view().data(), recv.view().data(), n, DType::F32, s);
      auto out = run_and_fetch(dev, s, recv);
      bool ok = true;
      for (int p = 0; p < W; ++p)
        for (size_t i = 0; i < n; ++i) ok &= out[p * n + i] == float(p * 1000 + int(i % 1000));
      tally.result("all_gather", ok);
    }
    {  // reduce_scatter (sum)
      auto send = buf(n * W), recv = buf(n);
      std::vector<float> v(n * W);
      for (size_t i = 0; i < v.size(); ++i) v[i] = float(r + int(i % 7));
      put(dev, s, send, v);
      world->reduce_scatter(send.view().data(), recv.view().data(), n, DType::F32, ReduceOp::Sum, s);
      auto out = run_and_fetch(dev, s, recv);
      bool ok = true;
      for (size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int p = 0; p < W; ++p) want += float(p + int((r * n + i) % 7));
        ok &= out[i] == want;
      }
      tally.result("reduce_scatter sum", ok);
    }
    {  // all_reduce (sum, max), in place
      auto x = buf(n);
      std::vector<float> v(n);
      for (size_t i = 0; i < n; ++i) v[i] = float((r + 1) * int(i % 5));
      put(dev, s, x, v);
      world->all_reduce(x.view().data(), x.view().data(), n, DType::F32, ReduceOp::Sum, s);
      auto out = run_and_fetch(dev, s, x);
      bool ok = true;
      for (size_t i = 0; i < n; ++i) ok &= out[i] == float(W * (W + 1) / 2 * int(i % 5));
      tally.result("all_reduce sum (in place)", ok);
      put(dev, s, x, v);
      world->all_reduce(x.view().data(), x.view().data(), n, DType::F32, ReduceOp::Max, s);
      out = run_and_fetch(dev, s, x);
      ok = true;
      for (size_t i = 0; i < n; ++i) ok &= out[i] == float(W * int(i % 5));
      tally.result("all_reduce max", ok);
    }
    {  // all_to_all_v with uneven and zero counts: rank r sends ((r + p) % 3) * 5 to p.
      std::vector<size_t> sc(W), rc(W);
      size_t st = 0, rt = 0;
      for (int p = 0; p < W; ++p) {
        sc[p] = size_t((r + p) % 3) * 5;
        rc[p] = size_t((p + r) % 3) * 5;
        st += sc[p];
        rt += rc[p];
      }
      auto send = buf(std::max<size_t>(st, 1)), recv = buf(std::max<size_t>(rt, 1));
      std::vector<float> v(std::max<size_t>(st, 1), 0.0f);
      size_t o = 0;
      for (int p = 0; p < W; ++p)
        for (size_t j = 0; j < sc[p]; ++j) v[o++] = float(r * 100 + p * 10 + int(j));
      put(dev, s, send, v);
      world->all_to_all_v(send.view().data(), sc, recv.view().data(), rc, DType::F32, s);
      auto out = run_and_fetch(dev, s, recv);
      bool ok = true;
      o = 0;
      for (int p = 0; p < W; ++p)
        for (size_t j = 0; j < rc[p]; ++j) ok &= out[o++] == float(p * 100 + r * 10 + int(j));
      tally.result("all_to_all_v (uneven, zero counts)", ok);
    }
    {  // broadcast from the last rank
      auto x = buf(n);
      std::vector<float> v(n, float(r == W - 1 ? 7 : -1));
      put(dev, s, x, v);
      world->broadcast(x.view().data(), x.view().data(), n, DType::F32, W - 1, s);
      auto out = run_and_fetch(dev, s, x);
      bool ok = true;
      for (float f : out) ok &= f == 7.0f;
      tally.result("broadcast", ok);
    }
    {  // expert-data-parallel groups: all_reduce over ranks with the same EP index
      const int ep = (W % 2 == 0) ? 2 : 1;
      ProcessGroups groups(W, ep, /*num_experts=*/ep * 4);
      auto edp = ctx.communicator(groups.edp_group_of(r), "selfcheck-edp");
      auto x = buf(16);
      put(dev, s, x, std::vector<float>(16, float(r)));
      edp->all_reduce(x.view().data(), x.view().data(), 16, DType::F32, ReduceOp::Sum, s);
      auto out = run_and_fetch(dev, s, x);
      float want = 0;
      for (int g : groups.edp_group_of(r).ranks) want += float(g);
      bool ok = true;
      for (float f : out) ok &= f == want;
      tally.result("all_reduce over EDP groups (ep_size " + std::to_string(ep) + ")", ok);
    }
    world->barrier(s);
    s.synchronize();
  }, options);
  for (const auto& what : tally.order) {
    int bad = 0;
    for (auto& [w, b] : tally.failures)
      if (w == what) bad = b;
    report(what, bad == 0, bad == 0 ? "exact on all ranks" : std::to_string(bad) + " rank(s) differ");
  }
}

}  // namespace moezero::cli
