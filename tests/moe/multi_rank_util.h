// tests/moe/multi_rank_util.h — runs one MoE FFN sub-layer (moe/moe_layer.h) forward + backward
// on `ranks` rank threads (comm::World::run, one CPU device each) for tests/moe/moe_layer_test.cpp.
//
// Per rank: ProcessGroups(ranks, ep, E); the token all-to-all over the rank's EP group (channel
// "a2a", none when ep == 1) and the agreement all-reduce over the world (channel "router");
// a SimpleParams provider holding the layer's groups (the norm+gate group, then the rank's local
// experts) with values from ONE global table keyed by parameter name; rows
// [rank·N, (rank+1)·N) of the global h and upstream gradient c. Returns per rank: out, dL/dh,
// the accumulated gradient of every group, the provider's call log (and where backward began),
// MoeStats, loss_out and aux_out. Communicator timeout 10 s: a hang is an error, not a stuck test.
#pragma once

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/dtype.h"
#include "core/process_groups.h"
#include "moe/moe_layer.h"
#include "moe/moe_runtime.h"
#include "tests/common/simple_params.h"

namespace moezero::test {

using ParamTable = std::map<std::string, std::vector<float>>;  // HF name -> values (f32)

struct LayerRun {
  ModelConfig model;
  MoeConfig moe;
  int ranks = 4, ep = 1;
  int64_t batch = 2, seq = 4;  // N = batch * seq tokens per rank
  DType dtype = DType::F32;
  uint64_t seed = 0;
  ParamTable params;
  std::vector<float> h, c;  // (ranks * N, C) global input and upstream gradient
};

struct RankOut {
  std::vector<float> out, dh;              // (N, C)
  std::vector<GroupSpec> groups;           // the layer's groups (provider order)
  std::vector<std::vector<float>> grads;   // per group, layout numel (accumulated, f32)
  std::vector<SimpleParams::Event> calls;  // the provider's call log, forward then backward
  size_t backward_begin = 0;               // index of backward's first call in `calls`
  moe::MoeStats stats;
  float loss = 0.0f, aux = 0.0f;
  bool left_acquired = false;
};

namespace multi_rank_detail {

inline TensorBuffer upload(Device& dev, Stream& s, const float* v, Shape shape, DType dt) {
  TensorBuffer b(dev, dt, shape, MemTag::Other, s, "test.input");
  const size_t n = static_cast<size_t>(shape.numel());
  std::vector<uint8_t> bytes(n * dtype_size_bytes(dt));
  for (size_t i = 0; i < n; ++i) {
    if (dt == DType::F32) {
      std::memcpy(&bytes[i * 4], &v[i], 4);
    } else {
      const bf16 x = float_to_bf16(v[i]);
      std::memcpy(&bytes[i * 2], &x, 2);
    }
  }
  dev.memcpy_async(b.view().data(), bytes.data(), bytes.size(), s);
  s.synchronize();
  return b;
}

inline std::vector<float> download(Device& dev, Stream& s, const Tensor& t) {
  const size_t n = static_cast<size_t>(t.numel());
  std::vector<uint8_t> bytes(t.size_bytes());
  dev.memcpy_async(bytes.data(), t.data(), bytes.size(), s);
  s.synchronize();
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (t.dtype() == DType::F32) {
      std::memcpy(&v[i], &bytes[i * 4], 4);
    } else {
      bf16 x;
      std::memcpy(&x, &bytes[i * 2], 2);
      v[i] = bf16_to_float(x);
    }
  }
  return v;
}

// The flat master values of a group from the global table (alignment gaps zero).
inline std::vector<float> group_values(const GroupLayout& lay, const ParamTable& table) {
  std::vector<float> v(static_cast<size_t>(lay.numel()), 0.0f);
  for (size_t i = 0; i < lay.param_count(); ++i) {
    const ParamSpec& p = lay.spec().params[i];
    auto it = table.find(p.name);
    MOEZERO_CHECK(it != table.end(), "multi_rank_util: no value for ", p.name);
    MOEZERO_CHECK(static_cast<int64_t>(it->second.size()) == p.shape.numel(), p.name, ": ",
                  it->second.size(), " values for ", p.shape.numel());
    std::copy(it->second.begin(), it->second.end(), v.begin() + lay.offset(i));
  }
  return v;
}

}  // namespace multi_rank_detail

inline std::vector<RankOut> run_layer(const LayerRun& run) {
  namespace d = multi_rank_detail;
  std::vector<RankOut> outs(static_cast<size_t>(run.ranks));
  comm::WorldOptions opts;
  opts.comm.timeout = std::chrono::seconds(10);
  comm::World::run(
      run.ranks,
      [&](comm::RankContext& rc) {
        const int rank = rc.rank;
        const int64_t N = run.batch * run.seq, C = run.model.d_model;
        ProcessGroups pg(run.ranks, run.ep, static_cast<int>(run.model.num_experts));
        std::unique_ptr<Communicator> a2a;
        if (run.ep > 1) a2a = rc.communicator(pg.ep_group_of(rank), "a2a");
        std::unique_ptr<Communicator> router = rc.communicator(rc.world_group(), "router");
        RankOut& ro = outs[static_cast<size_t>(rank)];
        moe::MoeRuntime rt;
        rt.options.moe = run.moe;
        rt.comms.ep_size = run.ep;
        rt.comms.ep_rank = pg.ep_rank(rank);
        rt.comms.a2a = a2a.get();
        rt.comms.router = router.get();
        rt.options.seed = run.seed;
        rt.report.stats = &ro.stats;
        moe::MoeFeedForward layer(run.model, rt, /*layer=*/0, /*moe_index=*/0, /*first_group=*/0);
        Device& dev = *rc.device;
        Stream& s = dev.default_stream();
        ro.groups = layer.param_groups();
        SimpleParams params(dev, s, ro.groups, run.dtype, run.seed);
        for (int g = 0; g < params.group_count(); ++g)
          params.set_params_host(g, d::group_values(params.layout(g), run.params));

        TensorBuffer loss(dev, DType::F32, Shape{1}, MemTag::Other, s, "test.loss");
        TensorBuffer aux(dev, DType::F32, Shape{1}, MemTag::Other, s, "test.aux");
        dev.ops().fill(s, loss, 0.0);
        dev.ops().fill(s, aux, 0.0);
        layers::ModuleContext ctx;
        ctx.stream = &s;
        ctx.dtype = run.dtype;
        ctx.batch = run.batch;
        ctx.seq = run.seq;
        ctx.micro_batch = 0;
        ctx.token_offset = rank * N;
        ctx.global_tokens = run.ranks * N;
        ctx.loss_out = loss;
        ctx.aux_out = aux;

        TensorBuffer h =
            d::upload(dev, s, &run.h[static_cast<size_t>(rank * N * C)], Shape{N, C}, run.dtype);
        TensorBuffer dresid =
            d::upload(dev, s, &run.c[static_cast<size_t>(rank * N * C)], Shape{N, C}, run.dtype);
        TensorBuffer out(dev, run.dtype, Shape{N, C}, MemTag::Other, s, "test.out");
        auto saved = layer.forward(ctx, params, h, out);
        ro.backward_begin = params.calls().size();
        layer.backward(ctx, params, std::move(saved), h, dresid);
        s.synchronize();
        ro.out = d::download(dev, s, out);
        ro.dh = d::download(dev, s, dresid);
        ro.loss = d::download(dev, s, loss)[0];
        ro.aux = d::download(dev, s, aux)[0];
        for (int g = 0; g < params.group_count(); ++g) ro.grads.push_back(params.grads_host(g));
        ro.calls = params.calls();
        ro.left_acquired = params.any_acquired();
      },
      opts);
  return outs;
}

}  // namespace moezero::test
