// tests/report/report_test_gen.h — the report tests' generated input: Gen, random per-step values
// (seeded) written as metrics lines in the trainer's format, kept raw so that the expectations
// recompute every number independently of the parser; seed_for_test prints the seed it draws.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace moezero::report {

using nlohmann::json;

inline uint64_t seed_for_test() {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

// Raw per-step values kept by the generator, so the expectations never read the parser's output.
struct Gen {
  int L = 3, E = 6, R = 3, S = 7;
  std::vector<int> layer_ids = {1, 3, 5};
  // [s][l][e]
  std::vector<std::vector<std::vector<int64_t>>> tokens, gathers, gbytes, ch, cm, ph, pm, pw, ain,
      aout;
  std::vector<std::vector<std::vector<double>>> gms, pred;
  std::vector<double> comm, exposed, loss;
  std::vector<std::vector<double>> stall;                        // [s][r]
  std::vector<std::vector<std::vector<int64_t>>> rank_counters;  // [s][r][12]
  std::vector<std::vector<std::vector<int64_t>>> peak;           // [s][r][tag]
  std::vector<std::vector<int64_t>> peak_total;                  // [s][r]
  std::vector<std::string> tags = {"param_shard", "full_param", "grad", "activation"};
  std::vector<std::string> rank_keys = {
      "gathered_bytes",       "reduce_scattered_bytes", "all_reduced_bytes", "a2a_bytes",
      "gathered_dense_bytes", "gathered_expert_bytes",  "prefetch_hits",     "prefetch_misses",
      "miss_bytes",           "exact_prefetches",       "wasted_bytes",      "needed_expert_bytes",
      "active_layer_experts", "layer_expert_slots",     "cache_hits",        "cache_misses",
      "cache_evictions"};

  explicit Gen(uint64_t seed, bool with_counters = true) : with_counters_(with_counters) {
    std::mt19937_64 rng(seed);
    auto ri = [&](int64_t lo, int64_t hi) {
      return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
    };
    auto rd = [&](double lo, double hi) {
      return std::uniform_real_distribution<double>(lo, hi)(rng);
    };
    auto cube = [&](auto f) {
      using T = decltype(f());
      std::vector<std::vector<T>> c(static_cast<size_t>(L), std::vector<T>(static_cast<size_t>(E)));
      for (auto& row : c)
        for (auto& v : row) v = f();
      return c;
    };
    for (int s = 0; s < S; ++s) {
      // About a third of the experts get no tokens in a step, so active fractions vary.
      tokens.push_back(cube([&] { return ri(0, 2) == 0 ? int64_t(0) : ri(1, 500); }));
      gathers.push_back(cube([&] { return ri(0, 4); }));
      gbytes.push_back(cube([&] { return ri(0, 1 << 20); }));
      ch.push_back(cube([&] { return ri(0, 3); }));
      cm.push_back(cube([&] { return ri(0, 3); }));
      ph.push_back(cube([&] { return ri(0, 3); }));
      pm.push_back(cube([&] { return ri(0, 3); }));
      pw.push_back(cube([&] { return ri(0, 4096); }));
      ain.push_back(cube([&] { return ri(0, 200); }));
      aout.push_back(cube([&] { return ri(0, 200); }));
      gms.push_back(cube([&] { return rd(0, 3); }));
      pred.push_back(cube([&] { return rd(0, 1); }));
      const double c = s == 2 ? 0.0 : rd(1, 50);  // one step without communication
      comm.push_back(c);
      exposed.push_back(c * rd(0, 1));
      loss.push_back(rd(1, 5));
      std::vector<double> st;
      std::vector<std::vector<int64_t>> rc, pk;
      std::vector<int64_t> pt;
      for (int r = 0; r < R; ++r) {
        st.push_back(rd(0, 5));
        std::vector<int64_t> counters;
        for (size_t k = 0; k < rank_keys.size(); ++k) counters.push_back(ri(0, 1 << 24));
        rc.push_back(counters);
        std::vector<int64_t> p;
        for (size_t t = 0; t < tags.size(); ++t) p.push_back(ri(0, 1 << 26));
        pk.push_back(p);
        pt.push_back(ri(1 << 20, 1 << 27));
      }
      stall.push_back(st);
      rank_counters.push_back(rc);
      peak.push_back(pk);
      peak_total.push_back(pt);
    }
  }

  json step_json(int s) const {
    json j;
    j["step"] = s + 1;
    j["loss"] = loss[size_t(s)];
    if (s % 3 == 2) j["val_loss"] = loss[size_t(s)] + 0.25;  // an evaluation every third step
    j["lr"] = 0.001;
    j["grad_norm"] = 1.0;
    j["tokens_per_expert"] = tokens[size_t(s)];
    if (with_counters_) {
      json layers = json::array();
      for (int l = 0; l < L; ++l) {
        const size_t sl = size_t(l), ss = size_t(s);
        layers.push_back({{"layer", layer_ids[sl]},
                          {"tokens", tokens[ss][sl]},
                          {"gathers", gathers[ss][sl]},
                          {"gathered_bytes", gbytes[ss][sl]},
                          {"gather_ms", gms[ss][sl]},
                          {"cache_hits", ch[ss][sl]},
                          {"cache_misses", cm[ss][sl]},
                          {"prefetch_hits", ph[ss][sl]},
                          {"prefetch_misses", pm[ss][sl]},
                          {"wasted_bytes", pw[ss][sl]},
                          {"a2a_tokens_in", ain[ss][sl]},
                          {"a2a_tokens_out", aout[ss][sl]},
                          {"predicted", pred[ss][sl]}});
      }
      j["moe_layers"] = layers;
      j["comm_ms"] = comm[size_t(s)];
      j["exposed_comm_ms"] = exposed[size_t(s)];
      j["overlap_ratio"] =
          comm[size_t(s)] > 0 ? json(1 - exposed[size_t(s)] / comm[size_t(s)]) : json(nullptr);
    }
    json ranks = json::array();
    for (int r = 0; r < R; ++r) {
      json rj;
      for (size_t k = 0; k < rank_keys.size(); ++k)
        rj[rank_keys[k]] = rank_counters[size_t(s)][size_t(r)][k];
      rj["stall_ms"] = stall[size_t(s)][size_t(r)];
      rj["comm_ms"] = 2.0 * stall[size_t(s)][size_t(r)];
      rj["exposed_comm_ms"] = stall[size_t(s)][size_t(r)];
      json p = json::object();
      for (size_t t = 0; t < tags.size(); ++t) p[tags[t]] = peak[size_t(s)][size_t(r)][t];
      rj["peak_bytes"] = p;
      rj["peak_total_bytes"] = peak_total[size_t(s)][size_t(r)];
      ranks.push_back(rj);
    }
    j["ranks"] = ranks;
    return j;
  }

  std::string metrics_text() const {
    std::string t;
    for (int s = 0; s < S; ++s) t += step_json(s).dump() + "\n";
    return t;
  }

 private:
  bool with_counters_;
};

}  // namespace moezero::report
