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
    auto it =
        std::find_if(failures.begin(), failures.end(), [&](auto& p) { return p.first == what; });
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

namespace {

// One rank's view of a check: its device, stream, world communicator and the shared tally.
struct RankCheck {
  comm::RankContext& ctx;
  Device& dev;
  Stream& s;
  Communicator& world;
  Tally& tally;
  int r, W;
  TensorBuffer buf(size_t elems) const {
    return TensorBuffer(dev, DType::F32, Shape{static_cast<int64_t>(elems)}, MemTag::CommBuffer, s);
  }
};

constexpr size_t kElems = 1000;

void check_all_gather(const RankCheck& c) {
  const size_t n = kElems;
  auto send = c.buf(n), recv = c.buf(n * c.W);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(c.r * 1000 + int(i % 1000));
  put(c.dev, c.s, send, v);
  c.world.all_gather(send.view().data(), recv.view().data(), n, DType::F32, c.s);
  auto out = run_and_fetch(c.dev, c.s, recv);
  bool ok = true;
  for (int p = 0; p < c.W; ++p)
    for (size_t i = 0; i < n; ++i) ok &= out[p * n + i] == float(p * 1000 + int(i % 1000));
  c.tally.result("all_gather", ok);
}

void check_reduce_scatter(const RankCheck& c) {
  const size_t n = kElems;
  auto send = c.buf(n * c.W), recv = c.buf(n);
  std::vector<float> v(n * c.W);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(c.r + int(i % 7));
  put(c.dev, c.s, send, v);
  c.world.reduce_scatter(send.view().data(), recv.view().data(), n, DType::F32, ReduceOp::Sum, c.s);
  auto out = run_and_fetch(c.dev, c.s, recv);
  bool ok = true;
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int p = 0; p < c.W; ++p) want += float(p + int((c.r * n + i) % 7));
    ok &= out[i] == want;
  }
  c.tally.result("reduce_scatter sum", ok);
}

void check_all_reduce(const RankCheck& c) {  // sum and max, in place
  const size_t n = kElems;
  auto x = c.buf(n);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float((c.r + 1) * int(i % 5));
  put(c.dev, c.s, x, v);
  c.world.all_reduce(x.view().data(), x.view().data(), n, DType::F32, ReduceOp::Sum, c.s);
  auto out = run_and_fetch(c.dev, c.s, x);
  bool ok = true;
  for (size_t i = 0; i < n; ++i) ok &= out[i] == float(c.W * (c.W + 1) / 2 * int(i % 5));
  c.tally.result("all_reduce sum (in place)", ok);
  put(c.dev, c.s, x, v);
  c.world.all_reduce(x.view().data(), x.view().data(), n, DType::F32, ReduceOp::Max, c.s);
  out = run_and_fetch(c.dev, c.s, x);
  ok = true;
  for (size_t i = 0; i < n; ++i) ok &= out[i] == float(c.W * int(i % 5));
  c.tally.result("all_reduce max", ok);
}

// Uneven and zero counts: rank r sends ((r + p) % 3) * 5 elements to p.
void check_all_to_all_v(const RankCheck& c) {
  const int r = c.r, W = c.W;
  std::vector<size_t> sc(W), rc(W);
  size_t st = 0, rt = 0;
  for (int p = 0; p < W; ++p) {
    sc[p] = size_t((r + p) % 3) * 5;
    rc[p] = size_t((p + r) % 3) * 5;
    st += sc[p];
    rt += rc[p];
  }
  auto send = c.buf(std::max<size_t>(st, 1)), recv = c.buf(std::max<size_t>(rt, 1));
  std::vector<float> v(std::max<size_t>(st, 1), 0.0f);
  size_t o = 0;
  for (int p = 0; p < W; ++p)
    for (size_t j = 0; j < sc[p]; ++j) v[o++] = float(r * 100 + p * 10 + int(j));
  put(c.dev, c.s, send, v);
  c.world.all_to_all_v(send.view().data(), sc, recv.view().data(), rc, DType::F32, c.s);
  auto out = run_and_fetch(c.dev, c.s, recv);
  bool ok = true;
  o = 0;
  for (int p = 0; p < W; ++p)
    for (size_t j = 0; j < rc[p]; ++j) ok &= out[o++] == float(p * 100 + r * 10 + int(j));
  c.tally.result("all_to_all_v (uneven, zero counts)", ok);
}

void check_broadcast(const RankCheck& c) {  // from the last rank
  auto x = c.buf(kElems);
  std::vector<float> v(kElems, float(c.r == c.W - 1 ? 7 : -1));
  put(c.dev, c.s, x, v);
  c.world.broadcast(x.view().data(), x.view().data(), kElems, DType::F32, c.W - 1, c.s);
  auto out = run_and_fetch(c.dev, c.s, x);
  bool ok = true;
  for (float f : out) ok &= f == 7.0f;
  c.tally.result("broadcast", ok);
}

// Expert-data-parallel groups: all_reduce over the ranks with the same EP index.
void check_edp_all_reduce(const RankCheck& c) {
  const int ep = (c.W % 2 == 0) ? 2 : 1;
  ProcessGroups groups(c.W, ep, /*num_experts=*/ep * 4);
  auto edp = c.ctx.communicator(groups.edp_group_of(c.r), "selfcheck-edp");
  auto x = c.buf(16);
  put(c.dev, c.s, x, std::vector<float>(16, float(c.r)));
  edp->all_reduce(x.view().data(), x.view().data(), 16, DType::F32, ReduceOp::Sum, c.s);
  auto out = run_and_fetch(c.dev, c.s, x);
  float want = 0;
  for (int g : groups.edp_group_of(c.r).ranks) want += float(g);
  bool ok = true;
  for (float f : out) ok &= f == want;
  c.tally.result("all_reduce over EDP groups (ep_size " + std::to_string(ep) + ")", ok);
}

}  // namespace

void check_collectives(int ranks, const CheckLine& report) {
  Tally tally;
  comm::WorldOptions options;
  options.comm.timeout = std::chrono::seconds(30);
  comm::World::run(
      ranks,
      [&](comm::RankContext& ctx) {
        Stream& s = ctx.device->create_stream("comm");
        auto world = ctx.communicator(ctx.world_group(), "selfcheck");
        const RankCheck c{ctx, *ctx.device, s, *world, tally, ctx.rank, ctx.world_size};
        check_all_gather(c);
        check_reduce_scatter(c);
        check_all_reduce(c);
        check_all_to_all_v(c);
        check_broadcast(c);
        check_edp_all_reduce(c);
        world->barrier(s);
        s.synchronize();
      },
      options);
  for (const auto& what : tally.order) {
    int bad = 0;
    for (auto& [w, b] : tally.failures)
      if (w == what) bad = b;
    report(what, bad == 0,
           bad == 0 ? "exact on all ranks" : std::to_string(bad) + " rank(s) differ");
  }
}

}  // namespace moezero::cli
