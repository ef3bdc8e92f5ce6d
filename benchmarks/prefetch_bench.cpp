// benchmarks/prefetch_bench.cpp — moezero-bench-prefetch: expert prefetch policies and the
// shard cache on a synthetic routing workload, ranks as threads with link emulation.
//
// Workload (per step, L MoE layers, E experts, top-k): every global token picks k distinct
// experts from a Zipf(s) distribution over a per-layer permutation of the experts (optionally
// drifting: the permutation rotates every few steps). The active set of a layer is the union
// over all ranks (what the MoE layer agrees on). Forward: plan prefetch (policy), a dense
// "attention" GEMM the gathers can overlap with, the frequency model learns the agreed counts,
// mispredictions are discarded, each active local expert is acquired, runs its SwiGLU GEMMs
// on its rows, and is released (into the shard cache when on). Backward: exact prefetch of
// the forward's active set, dense GEMM, expert GEMMs again. The engine's optimizer step
// ends each step (it empties the cache). Parameters move through the real ZeroEngine
// (ZeRO-3 over the expert-data-parallel group) and LocalCommunicator with an emulated link.
//
// Per (ep_size, policy) row: step time (median of the measured steps, forward+backward),
// ideal = max(compute-only, communication-only) measured in the same run (compute-only: the
// same steps with experts resident, stage 2; communication-only: the same policy's gathers with
// no GEMMs), their ratio (1.0 = perfect overlap), and exact per-step byte counters of rank 0 after
// warm-up: gathered, needed (active local experts x bytes x 2 passes), miss (gathered on demand),
// wasted (prefetched, never used), stall (compute stream waiting on gathers).
//
//   moezero-bench-prefetch [--zipf S] [--drift] [--steps N] [--json FILE] [--link-gbps G]
//                          [--experts E] [--tokens N] [--min-probability P] [--ema-decay D]
//                          [--warmup N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "comm/world.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/process_groups.h"
#include "prefetch/frequency_model.h"
#include "prefetch/prefetch_policy.h"
#include "prefetch/shard_cache.h"
#include "zero/zero_engine.h"

using namespace moezero;

namespace {

struct Bench {
  int world = 4, ep = 1, experts = 16, layers = 4, top_k = 2;
  int64_t tokens_per_rank = 8, C = 128, F = 256, dense_rows = 256;
  int steps = 12, warmup = 4;
  double zipf = 1.0;
  bool drift = false;
  double link_gbps = 10.0, latency_us = 20.0;
  PrefetchConfig prefetch;
  uint64_t cache_bytes = 0;
  bool compute = true;  // false: communication only (no GEMMs)
  int stage = 3;        // 2: experts resident (compute only)
};

struct Result {
  double step_ms = 0;
  double gathered = 0, needed = 0, miss = 0, wasted = 0, stall_ms = 0;
  uint64_t hits = 0, cache_hits = 0;
};

// Agreed routing of one (step, layer): counts[r][e] = assignments of rank r's tokens to e.
std::vector<std::vector<int>> route(const Bench& b, int step, int layer) {
  std::vector<double> w(static_cast<size_t>(b.experts));
  for (int i = 0; i < b.experts; ++i) w[static_cast<size_t>(i)] = 1.0 / std::pow(i + 1.0, b.zipf);
  std::vector<int> perm(static_cast<size_t>(b.experts));
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937_64 prng(1000 + static_cast<uint64_t>(layer));
  std::shuffle(perm.begin(), perm.end(), prng);
  const int shift = b.drift ? step / 4 : 0;  // drift: the hot set moves every 4 steps
  std::mt19937_64 rng(static_cast<uint64_t>(step) * 7919 + static_cast<uint64_t>(layer));
  std::vector<std::vector<int>> counts(static_cast<size_t>(b.world),
                                       std::vector<int>(static_cast<size_t>(b.experts), 0));
  for (int r = 0; r < b.world; ++r)
    for (int64_t t = 0; t < b.tokens_per_rank; ++t) {
      std::vector<double> ww = w;
      for (int j = 0; j < b.top_k; ++j) {
        std::discrete_distribution<int> d(ww.begin(), ww.end());
        const int rank = d(rng);
        ww[static_cast<size_t>(rank)] = 0.0;
        counts[static_cast<size_t>(r)]
              [static_cast<size_t>(perm[static_cast<size_t>((rank + shift) % b.experts)])] += 1;
      }
    }
  return counts;
}

Result run(const Bench& b) {
  Result out;
  std::mutex mu;
  comm::WorldOptions wo;
  wo.comm.timeout = std::chrono::seconds(120);
  wo.comm.emulation = CommEmulation{b.link_gbps, b.latency_us};
  comm::World::run(
      b.world,
      [&](comm::RankContext& ctx) {
        Device& dev = *ctx.device;
        Ops& ops = dev.ops();
        EngineStreams st{&dev.create_stream("compute"), &dev.create_stream("gather"),
                         &dev.create_stream("reduce")};
        Stream& cs = *st.compute;
        ProcessGroups pg(b.world, b.ep, b.experts);
        const int Epr = b.experts / b.ep, ep_rank = pg.ep_rank(ctx.rank);
        auto g_edp = ctx.communicator(pg.edp_group_of(ctx.rank), "gather");
        auto r_edp = ctx.communicator(pg.edp_group_of(ctx.rank), "reduce");
        auto misc = ctx.communicator(ctx.world_group(), "misc");
        std::vector<GroupSpec> groups;
        for (int l = 0; l < b.layers; ++l)
          for (int j = 0; j < Epr; ++j) {
            const int e = ep_rank * Epr + j;
            const std::string p = "l" + std::to_string(l) + ".e" + std::to_string(e) + ".";
            groups.push_back({"layers." + std::to_string(l) + ".experts." + std::to_string(e),
                              GroupKind::Expert,
                              l,
                              e,
                              {linear_weight(p + "w1", b.F, b.C, 0.02f),
                               linear_weight(p + "w2", b.C, b.F, 0.02f),
                               linear_weight(p + "w3", b.F, b.C, 0.02f)}});
          }
        ZeroOptions zo;
        zo.stage = b.stage;
        zo.persistence_threshold_elems = 0;
        ZeroEngine eng(
            dev, st, groups,
            [&](const GroupSpec&) {
              return GroupComms{g_edp.get(), r_edp.get()};
            },
            *misc, zo,
            b.cache_bytes
                ? std::make_unique<prefetch::ShardCache>(b.cache_bytes, EvictionPolicy::Lfu)
                : nullptr);
        prefetch::FrequencyModel freq(b.layers, b.experts, b.prefetch.ema_decay);
        const uint64_t expert_bytes = static_cast<uint64_t>(eng.layout(0).numel()) * 4;
        TensorBuffer dense_x(dev, DType::F32, Shape{b.dense_rows, b.C}, MemTag::Activation, cs);
        TensorBuffer dense_w(dev, DType::F32, Shape{b.C, b.C}, MemTag::Activation, cs);
        TensorBuffer dense_y(dev, DType::F32, Shape{b.dense_rows, b.C}, MemTag::Activation, cs);
        const int64_t max_rows = b.tokens_per_rank * b.top_k * b.ep;
        TensorBuffer xr(dev, DType::F32, Shape{max_rows, b.C}, MemTag::Activation, cs);
        TensorBuffer hr(dev, DType::F32, Shape{max_rows, b.F}, MemTag::Activation, cs);
        TensorBuffer yr(dev, DType::F32, Shape{max_rows, b.C}, MemTag::Activation, cs);
        for (const Tensor& t : {dense_x.view(), dense_w.view(), xr.view()}) ops.fill(cs, t, 0.01);
        std::vector<int> candidates(static_cast<size_t>(Epr));
        std::iota(candidates.begin(), candidates.end(), ep_rank * Epr);
        const std::vector<uint64_t> bytes(static_cast<size_t>(Epr), expert_bytes);
        auto expert_compute = [&](const Tensor& w, int64_t rows, int passes) {
          if (!b.compute || rows == 0) return;
          const GroupLayout& lay = eng.layout(0);
          for (int p = 0; p < passes; ++p) {
            ops.gemm(cs, GemmArgs{xr.view().slice_rows(0, rows), lay.view(w, 0),
                                  hr.view().slice_rows(0, rows), Transpose::No, Transpose::Yes});
            ops.gemm(cs, GemmArgs{xr.view().slice_rows(0, rows), lay.view(w, 2),
                                  hr.view().slice_rows(0, rows), Transpose::No, Transpose::Yes});
            ops.gemm(cs, GemmArgs{hr.view().slice_rows(0, rows), lay.view(w, 1),
                                  yr.view().slice_rows(0, rows), Transpose::No, Transpose::Yes});
          }
        };
        auto dense = [&] {
          if (b.compute) ops.gemm(cs, GemmArgs{dense_x, dense_w, dense_y});
        };
        std::vector<double> times;
        EngineCounters before{};
        double needed = 0;
        for (int step = 0; step < b.steps; ++step) {
          if (step == b.warmup) {
            before = eng.counters();
            needed = 0;
          }
          const auto t0 = std::chrono::steady_clock::now();
          std::vector<std::vector<char>> active(static_cast<size_t>(b.layers));
          std::vector<std::vector<int64_t>> rows(static_cast<size_t>(b.layers));
          for (int l = 0; l < b.layers; ++l) {  // forward
            std::vector<int> plan;
            if (b.stage == 3) {
              const std::vector<char>* prev = l > 0 ? &freq.last_active(l - 1) : nullptr;
              plan = prefetch::plan_prefetch(b.prefetch, freq, l, candidates, bytes, prev);
              for (int e : plan) eng.prefetch(l * Epr + (e - ep_rank * Epr), cs);
            }
            dense();
            auto counts = route(b, step, l);
            std::vector<int64_t> global(static_cast<size_t>(b.experts), 0);
            for (auto& c : counts)
              for (int e = 0; e < b.experts; ++e)
                global[static_cast<size_t>(e)] += c[static_cast<size_t>(e)];
            freq.update(l, global);
            active[static_cast<size_t>(l)].assign(static_cast<size_t>(b.experts), 0);
            rows[static_cast<size_t>(l)].assign(static_cast<size_t>(b.experts), 0);
            for (int e = 0; e < b.experts; ++e) {
              active[static_cast<size_t>(l)][static_cast<size_t>(e)] =
                  global[static_cast<size_t>(e)] > 0;
              for (int r : pg.ep_group_of(ctx.rank).ranks)
                rows[static_cast<size_t>(l)][static_cast<size_t>(e)] +=
                    counts[static_cast<size_t>(r)][static_cast<size_t>(e)];
            }
            for (int j = 0; j < Epr; ++j)
              eng.set_keep_score(l * Epr + j, freq.probability(l, ep_rank * Epr + j));
            for (int e : plan)
              if (!active[static_cast<size_t>(l)][static_cast<size_t>(e)])
                eng.discard_prefetch(l * Epr + (e - ep_rank * Epr));
            for (int j = 0; j < Epr; ++j) {
              const int e = ep_rank * Epr + j;
              if (!active[static_cast<size_t>(l)][static_cast<size_t>(e)]) continue;
              const Tensor w = eng.acquire(l * Epr + j, cs);
              expert_compute(w, rows[static_cast<size_t>(l)][static_cast<size_t>(e)], 1);
              eng.release(l * Epr + j, cs);
              needed += static_cast<double>(expert_bytes);
            }
          }
          for (int l = b.layers - 1; l >= 0; --l) {  // backward
            std::vector<int> local(static_cast<size_t>(Epr));
            std::iota(local.begin(), local.end(), 0);
            std::vector<char> act(static_cast<size_t>(Epr));
            for (int j = 0; j < Epr; ++j)
              act[static_cast<size_t>(j)] =
                  active[static_cast<size_t>(l)][static_cast<size_t>(ep_rank * Epr + j)];
            if (b.stage == 3 && b.prefetch.policy != PrefetchPolicy::None)
              for (int j : prefetch::backward_order(local, act)) eng.prefetch(l * Epr + j, cs);
            dense();
            dense();
            for (int j = 0; j < Epr; ++j) {
              if (!act[static_cast<size_t>(j)]) continue;
              const Tensor w = eng.acquire(l * Epr + j, cs);
              expert_compute(
                  w, rows[static_cast<size_t>(l)][static_cast<size_t>(ep_rank * Epr + j)], 2);
              eng.release(l * Epr + j, cs);
              needed += static_cast<double>(expert_bytes);
            }
          }
          cs.synchronize();
          const auto t1 = std::chrono::steady_clock::now();
          eng.step(AdamWHyper{0.0f});
          if (step >= b.warmup)
            times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        }
        if (ctx.rank == 0) {
          std::lock_guard lock(mu);
          std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
          const double n = b.steps - b.warmup;
          const EngineCounters c = eng.counters();
          out.step_ms = times[times.size() / 2];
          out.gathered = double(c.gathered_expert_bytes - before.gathered_expert_bytes) / n;
          out.needed = needed / n;
          out.miss = double(c.prefetch_misses - before.prefetch_misses) * double(expert_bytes) / n;
          out.wasted = double(c.wasted_bytes - before.wasted_bytes) / n;
          out.stall_ms = (c.stall_ms - before.stall_ms) / n;
          out.hits = c.prefetch_hits - before.prefetch_hits;
          out.cache_hits = c.cache_hits - before.cache_hits;
        }
      },
      wo);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Bench base;
    base.prefetch.min_probability = 0.3;
    std::string json_path;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&] {
        MOEZERO_CHECK(i + 1 < argc, a, " needs a value");
        return std::string(argv[++i]);
      };
      if (a == "--zipf")
        base.zipf = std::stod(next());
      else if (a == "--drift")
        base.drift = true;
      else if (a == "--steps")
        base.steps = std::stoi(next());
      else if (a == "--json")
        json_path = next();
      else if (a == "--link-gbps")
        base.link_gbps = std::stod(next());
      else if (a == "--experts")
        base.experts = std::stoi(next());
      else if (a == "--tokens")
        base.tokens_per_rank = std::stoll(next());
      else if (a == "--min-probability")
        base.prefetch.min_probability = std::stod(next());
      else if (a == "--ema-decay")
        base.prefetch.ema_decay = std::stod(next());
      else if (a == "--warmup")
        base.warmup = std::stoi(next());
      else
        MOEZERO_THROW("moezero-bench-prefetch: unknown option '", a, "'");
    }
    MOEZERO_CHECK(base.steps > base.warmup, "--steps must exceed the ", base.warmup,
                  " warm-up steps");
    base.prefetch.budget_bytes = 64ull << 20;
    std::printf(
        "moezero-bench-prefetch: world %d, %d layers x %d experts, top-%d, %lld tokens/rank, "
        "zipf %.2f%s, link %.1f Gbit/s + %.0f us, %d steps (%d warm-up)\n",
        base.world, base.layers, base.experts, base.top_k, (long long)base.tokens_per_rank,
        base.zipf, base.drift ? " drifting" : "", base.link_gbps, base.latency_us, base.steps,
        base.warmup);
    std::printf("%-18s %3s %9s %9s %6s %11s %11s %11s %11s %9s\n", "policy", "ep", "step ms",
                "ideal ms", "ratio", "gathered B", "needed B", "miss B", "wasted B", "stall ms");
    nlohmann::json rows = nlohmann::json::array();
    for (int ep : {1, 2}) {
      Bench b = base;
      b.ep = ep;
      Bench comp = b;  // compute only: experts resident (stage 2), no link cost to gather
      comp.stage = 2;
      comp.prefetch.policy = PrefetchPolicy::None;
      const double compute_ms = run(comp).step_ms;
      struct Row {
        const char* name;
        PrefetchPolicy p;
        uint64_t cache;
      };
      double all_ms = 0;
      for (Row r : {Row{"none", PrefetchPolicy::None, 0}, Row{"all", PrefetchPolicy::All, 0},
                    Row{"frequency", PrefetchPolicy::Frequency, 0},
                    Row{"frequency+cache", PrefetchPolicy::Frequency, 64ull << 20}}) {
        Bench x = b;
        x.prefetch.policy = r.p;
        x.cache_bytes = r.cache;
        Result res = run(x);
        Bench comm = x;  // communication only: this policy's gathers, no GEMMs
        comm.compute = false;
        const double ideal = std::max(compute_ms, run(comm).step_ms);
        if (r.p == PrefetchPolicy::All) all_ms = res.step_ms;
        std::printf(
            "%-18s %3d %9.2f %9.2f %6.2f %11.0f %11.0f %11.0f %11.0f %9.2f%s\n", r.name, ep,
            res.step_ms, ideal, res.step_ms / ideal, res.gathered, res.needed, res.miss, res.wasted,
            res.stall_ms,
            (r.cache && all_ms > 0)
                ? ("   " + std::to_string(all_ms / res.step_ms).substr(0, 4) + "x vs all").c_str()
                : "");
        rows.push_back({{"policy", r.name},
                        {"ep_size", ep},
                        {"zipf", b.zipf},
                        {"step_ms", res.step_ms},
                        {"ideal_ms", ideal},
                        {"ratio", res.step_ms / ideal},
                        {"gathered_bytes", res.gathered},
                        {"miss_bytes", res.miss},
                        {"wasted_bytes", res.wasted},
                        {"needed_bytes", res.needed},
                        {"stall_ms", res.stall_ms}});
      }
    }
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      MOEZERO_CHECK(static_cast<bool>(out), "cannot write --json file '", json_path, "'");
      out << rows.dump(2) << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moezero-bench-prefetch: error: %s\n", e.what());
    return 1;
  }
}
