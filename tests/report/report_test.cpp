// The report's numbers against an independent recomputation from metrics generated in the test
// (random, seeded, in the trainer's metrics format), the comms summary of a hand-built trace with
// known spans (exact algbw / busbw), the --json round trip, and the rendering's promises.
#include "report/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/step_counters.h"
#include "report/report_render.h"
#include "report/run_input.h"

namespace moezero::report {
namespace {

using nlohmann::json;

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

uint64_t seed_for_test() {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

TEST(Report, ExpertNumbersEqualIndependentRecomputation) {
  const uint64_t seed = seed_for_test();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Gen g(seed);
  const Report r = compute_report(parse_run(g.metrics_text(), "gen.jsonl"));
  EXPECT_EQ(r.kind, "metrics");
  EXPECT_EQ(r.steps, g.S);
  EXPECT_EQ(r.ranks, g.R);
  EXPECT_TRUE(r.has_expert_counters);
  ASSERT_EQ(r.layers.size(), size_t(g.L));
  ASSERT_EQ(r.experts.size(), size_t(g.L * g.E));
  for (int l = 0; l < g.L; ++l) {
    int64_t layer_tokens = 0;
    for (int s = 0; s < g.S; ++s)
      for (int e = 0; e < g.E; ++e) layer_tokens += g.tokens[size_t(s)][size_t(l)][size_t(e)];
    EXPECT_EQ(r.layers[size_t(l)].layer, g.layer_ids[size_t(l)]);
    EXPECT_EQ(r.layers[size_t(l)].tokens, layer_tokens);
    for (int e = 0; e < g.E; ++e) {
      const ExpertRow& x = r.expert(size_t(l), size_t(e));
      SCOPED_TRACE("layer " + std::to_string(l) + " expert " + std::to_string(e));
      int64_t t = 0, ga = 0, gb = 0, h = 0, m = 0, pfh = 0, pfm = 0, pfw = 0, in = 0, out = 0;
      double ms = 0, p = 0;
      int active = 0;
      for (int s = 0; s < g.S; ++s) {
        const size_t ss = size_t(s), sl = size_t(l), se = size_t(e);
        const int64_t ts = g.tokens[ss][sl][se];
        t += ts;
        active += ts > 0;
        ga += g.gathers[ss][sl][se];
        gb += g.gbytes[ss][sl][se];
        h += g.ch[ss][sl][se];
        m += g.cm[ss][sl][se];
        pfh += g.ph[ss][sl][se];
        pfm += g.pm[ss][sl][se];
        pfw += g.pw[ss][sl][se];
        in += g.ain[ss][sl][se];
        out += g.aout[ss][sl][se];
        ms += g.gms[ss][sl][se];
        p += g.pred[ss][sl][se];
      }
      EXPECT_EQ(x.layer, g.layer_ids[size_t(l)]);
      EXPECT_EQ(x.expert, e);
      EXPECT_EQ(x.tokens, t);
      EXPECT_EQ(x.gathers, ga);
      EXPECT_EQ(x.gathered_bytes, gb);
      EXPECT_EQ(x.cache_hits, h);
      EXPECT_EQ(x.cache_misses, m);
      EXPECT_EQ(x.prefetch_hits, pfh);
      EXPECT_EQ(x.prefetch_misses, pfm);
      EXPECT_EQ(x.wasted_bytes, pfw);
      EXPECT_EQ(x.a2a_tokens_in, in);
      EXPECT_EQ(x.a2a_tokens_out, out);
      // Float sums in a different order than the report's: a few ulps apart at most.
      EXPECT_NEAR(x.gather_ms, ms, 1e-12 * g.S * 3);
      EXPECT_EQ(x.active_steps, active);
      EXPECT_DOUBLE_EQ(x.active_fraction, double(active) / g.S);
      EXPECT_DOUBLE_EQ(x.token_share, layer_tokens ? double(t) / double(layer_tokens) : 0.0);
      ASSERT_TRUE(x.predicted);
      EXPECT_NEAR(*x.predicted, p / g.S, 1e-14);
    }
    // The generator writes no prediction-quality fields: absent, not zero.
    EXPECT_FALSE(r.layers[size_t(l)].brier);
  }
  EXPECT_FALSE(r.has_prediction_quality);
  EXPECT_TRUE(r.brier_cells.empty() && r.calibration.empty());
  // Shares of a layer sum to one.
  for (size_t l = 0; l < r.layers.size(); ++l) {
    double sum = 0;
    for (size_t e = 0; e < size_t(g.E); ++e) sum += r.expert(l, e).token_share;
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
}

TEST(Report, StepOverlapAndRankNumbersEqualIndependentRecomputation) {
  const uint64_t seed = seed_for_test();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const Gen g(seed);
  const Report r = compute_report(parse_run(g.metrics_text(), "gen.jsonl"));
  ASSERT_EQ(r.step_rows.size(), size_t(g.S));
  EXPECT_TRUE(r.has_overlap);
  double comm = 0, exposed = 0, stall_total = 0;
  for (int s = 0; s < g.S; ++s) {
    const StepRow& row = r.step_rows[size_t(s)];
    const double c = g.comm[size_t(s)], x = g.exposed[size_t(s)];
    EXPECT_EQ(row.step, s + 1);
    EXPECT_EQ(row.loss, g.loss[size_t(s)]);
    if (s % 3 == 2)
      EXPECT_EQ(row.val_loss, g.loss[size_t(s)] + 0.25);
    else
      EXPECT_FALSE(row.val_loss);
    ASSERT_TRUE(row.comm_ms && row.exposed_comm_ms && row.overlapped_ms);
    EXPECT_EQ(*row.comm_ms, c);
    EXPECT_EQ(*row.exposed_comm_ms, x);
    EXPECT_DOUBLE_EQ(*row.overlapped_ms, c - x);
    if (c > 0) {
      ASSERT_TRUE(row.overlap_ratio);
      EXPECT_DOUBLE_EQ(*row.overlap_ratio, 1 - x / c);
    } else {
      EXPECT_FALSE(row.overlap_ratio) << "no communication: the ratio is undefined";
    }
    double st = 0;
    for (int k = 0; k < g.R; ++k) st += g.stall[size_t(s)][size_t(k)];
    EXPECT_NEAR(row.stall_ms, st, 1e-12);
    comm += c;
    exposed += x;
    stall_total += st;
  }
  ASSERT_TRUE(r.total_comm_ms && r.total_exposed_comm_ms && r.total_overlap_ratio);
  EXPECT_NEAR(*r.total_comm_ms, comm, 1e-9);
  EXPECT_NEAR(*r.total_overlap_ratio, 1 - exposed / comm, 1e-12);
  EXPECT_NEAR(r.total_stall_ms, stall_total, 1e-9);

  ASSERT_EQ(r.rank_rows.size(), size_t(g.R));
  for (int k = 0; k < g.R; ++k) {
    const RankRow& row = r.rank_rows[size_t(k)];
    std::vector<int64_t> sums(g.rank_keys.size(), 0);
    std::vector<int64_t> peaks(g.tags.size(), 0);
    int64_t pt = 0;
    for (int s = 0; s < g.S; ++s) {
      for (size_t i = 0; i < sums.size(); ++i) sums[i] += g.rank_counters[size_t(s)][size_t(k)][i];
      for (size_t t = 0; t < peaks.size(); ++t)
        peaks[t] = std::max(peaks[t], g.peak[size_t(s)][size_t(k)][t]);
      pt = std::max(pt, g.peak_total[size_t(s)][size_t(k)]);
    }
    const std::vector<int64_t> got = {row.gathered_bytes,       row.reduce_scattered_bytes,
                                      row.all_reduced_bytes,    row.a2a_bytes,
                                      row.gathered_dense_bytes, row.gathered_expert_bytes,
                                      row.prefetch_hits,        row.prefetch_misses,
                                      row.miss_bytes,           row.exact_prefetches,
                                      row.wasted_bytes,         row.needed_expert_bytes,
                                      row.active_layer_experts, row.layer_expert_slots,
                                      row.cache_hits,           row.cache_misses,
                                      row.cache_evictions};
    EXPECT_EQ(got, sums) << "rank " << k;
    EXPECT_EQ(row.peak_total_bytes, pt);
    ASSERT_EQ(row.peak_bytes.size(), g.tags.size());
    for (size_t t = 0; t < g.tags.size(); ++t) {
      // nlohmann orders object keys: look the tag up by name.
      auto it = std::find_if(row.peak_bytes.begin(), row.peak_bytes.end(),
                             [&](const auto& p) { return p.first == g.tags[t]; });
      ASSERT_NE(it, row.peak_bytes.end()) << g.tags[t];
      EXPECT_EQ(it->second, peaks[t]) << g.tags[t];
    }
  }
  EXPECT_FALSE(r.has_collectives) << "a metrics file has no spans";
}

TEST(Report, OlderMetricsWithoutExpertCountersStillReport) {
  const Gen g(7, /*with_counters=*/false);
  const Report r = compute_report(parse_run(g.metrics_text(), "old.jsonl"));
  EXPECT_FALSE(r.has_expert_counters);
  EXPECT_FALSE(r.has_overlap);
  EXPECT_FALSE(r.total_overlap_ratio);
  for (const ExpertRow& x : r.experts) {
    EXPECT_FALSE(x.predicted);
    EXPECT_EQ(x.gathers, 0);
  }
  int64_t t = 0;
  for (int s = 0; s < g.S; ++s) t += g.tokens[size_t(s)][0][0];
  EXPECT_EQ(r.expert(0, 0).tokens, t);
  EXPECT_FALSE(r.layers[0].brier);
  const std::string html = render_html(r);
  EXPECT_NE(html.find("id=\"heatmap-share\""), std::string::npos);
  EXPECT_EQ(html.find("id=\"heatmap-predicted\""), std::string::npos);
  EXPECT_NE(html.find("no per-expert counters"), std::string::npos);
  std::ostringstream text;
  write_text(text, r);
  EXPECT_NE(text.str().find("latencies and bandwidths need a trace"), std::string::npos);
}

// ---- trace input and the comms summary ----------------------------------------------------

json span(int pid, const std::string& op, const std::string& group, int64_t bytes, double dur,
          std::optional<int64_t> group_size) {
  json args = {{"op", op}, {"group", group}, {"bytes", bytes}, {"gbps", 1.0}};
  if (group_size) args["group_size"] = *group_size;
  return {{"ph", "X"}, {"cat", "collective"}, {"name", op}, {"pid", pid},
          {"tid", 1},  {"ts", 100.0},         {"dur", dur}, {"args", args}};
}

json hand_trace() {
  const Gen g(11);
  json ev = json::array();
  ev.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", {{"name", "rank 0"}}}});
  // all_gather over EDP groups of 2: 1 MiB in 1 ms twice (two groups, one row).
  ev.push_back(span(0, "all_gather", "edp0", 1 << 20, 1000.0, 2));
  ev.push_back(span(1, "all_gather", "edp1", 1 << 20, 1000.0, 2));
  // all_reduce over the world of 4: 4096 B in 10 us.
  ev.push_back(span(0, "all_reduce", "world", 4096, 10.0, 4));
  // all_to_all_v on ep1 (2 ranks): 3000 B in 4 us and 2500 B in 6 us, both in [2 KiB, 4 KiB).
  ev.push_back(span(1, "all_to_all_v", "ep1", 3000, 4.0, 2));
  ev.push_back(span(1, "all_to_all_v", "ep1", 2500, 6.0, 2));
  // reduce_scatter without group_size: busbw unknown.
  ev.push_back(span(0, "reduce_scatter", "world", 8192, 8.0, std::nullopt));
  // broadcast on 3 ranks: 1000 B in 2 us.
  ev.push_back(span(2, "broadcast", "world", 1000, 2.0, 3));
  // Events the report must ignore.
  ev.push_back({{"ph", "i"},
                {"cat", "cache"},
                {"name", "hit"},
                {"pid", 0},
                {"tid", 9},
                {"ts", 5.0},
                {"args", {{"group", "x"}, {"layer", 1}, {"expert", 2}, {"bytes", 8}}}});
  ev.push_back(
      {{"ph", "C"}, {"name", "cache_bytes"}, {"pid", 0}, {"ts", 5.0}, {"args", {{"bytes", 8}}}});
  ev.push_back({{"ph", "X"},
                {"cat", "compute"},
                {"name", "layers.1.attn fwd"},
                {"pid", 0},
                {"tid", 0},
                {"ts", 1.0},
                {"dur", 3.0}});
  // Steps 2 and 1, out of order: the report sorts them.
  for (int s : {1, 0}) {
    ev.push_back({{"ph", "i"},
                  {"cat", "step"},
                  {"name", "step_metrics"},
                  {"pid", 0},
                  {"tid", 9},
                  {"ts", 1000.0 * s},
                  {"s", "g"},
                  {"args", g.step_json(s)}});
  }
  return {{"traceEvents", ev},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"moezero_version", "0.1.0"}}}};
}

const CommRow& find_row(const Report& r, const std::string& op) {
  for (const CommRow& c : r.comms)
    if (c.op == op) return c;
  throw std::runtime_error("no comms row for " + op);
}

TEST(Report, CommsSummaryOfHandBuiltTraceHasExactBandwidths) {
  const Report r = compute_report(parse_run(hand_trace().dump(), "hand.trace.json"));
  EXPECT_EQ(r.kind, "trace");
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.first_step, 1);
  EXPECT_EQ(r.step_rows[1].step, 2);
  EXPECT_TRUE(r.has_collectives);
  EXPECT_FALSE(r.has_group_size) << "the reduce_scatter span has no group_size";
  ASSERT_EQ(r.comms.size(), 5u);

  const CommRow& ag = find_row(r, "all_gather");
  EXPECT_EQ(ag.group, "edp");
  EXPECT_EQ(ag.count, 2);
  EXPECT_EQ(ag.bucket_lo_bytes, 1 << 20);
  EXPECT_EQ(ag.bucket_hi_bytes, 2 << 20);
  EXPECT_DOUBLE_EQ(ag.total_ms, 2.0);
  EXPECT_DOUBLE_EQ(ag.avg_ms, 1.0);
  EXPECT_DOUBLE_EQ(*ag.algbw_gbps, 1.048576);  // 2 MiB / 2 ms
  EXPECT_DOUBLE_EQ(*ag.busbw_gbps, 0.524288);  // x (2-1)/2

  const CommRow& ar = find_row(r, "all_reduce");
  EXPECT_EQ(ar.bucket_lo_bytes, 4096);
  EXPECT_DOUBLE_EQ(*ar.algbw_gbps, 0.4096);  // 4096 B / 10 us
  EXPECT_DOUBLE_EQ(*ar.busbw_gbps, 0.6144);  // x 2(4-1)/4

  const CommRow& a2a = find_row(r, "all_to_all_v");
  EXPECT_EQ(a2a.group, "ep");
  EXPECT_EQ(a2a.count, 2);
  EXPECT_EQ(a2a.total_bytes, 5500);
  EXPECT_EQ(a2a.bucket_lo_bytes, 2048);
  EXPECT_DOUBLE_EQ(a2a.avg_ms, 0.005);
  EXPECT_DOUBLE_EQ(*a2a.algbw_gbps, 0.55);   // 5500 B / 10 us
  EXPECT_DOUBLE_EQ(*a2a.busbw_gbps, 0.275);  // x (2-1)/2

  const CommRow& rs = find_row(r, "reduce_scatter");
  EXPECT_DOUBLE_EQ(*rs.algbw_gbps, 1.024);
  EXPECT_FALSE(rs.busbw_gbps) << "no group size, no bus bandwidth";

  const CommRow& bc = find_row(r, "broadcast");
  EXPECT_EQ(bc.bucket_lo_bytes, 512);
  EXPECT_DOUBLE_EQ(*bc.algbw_gbps, 0.5);
  EXPECT_DOUBLE_EQ(*bc.busbw_gbps, 0.5);

  std::ostringstream text;
  write_text(text, r);
  EXPECT_NE(text.str().find("busbw n/a"), std::string::npos);
  EXPECT_NE(text.str().find("1.00 MiB - 2.00 MiB"), std::string::npos);
}

TEST(Report, BusBandwidthFactorsAndBuckets) {
  EXPECT_DOUBLE_EQ(*busbw_factor("all_gather", 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(*busbw_factor("reduce_scatter", 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(*busbw_factor("all_to_all_v", 2), 0.5);
  EXPECT_DOUBLE_EQ(*busbw_factor("all_reduce", 8), 14.0 / 8);
  EXPECT_DOUBLE_EQ(*busbw_factor("broadcast", 5), 1.0);
  EXPECT_DOUBLE_EQ(*busbw_factor("all_reduce", 1), 0.0);
  EXPECT_FALSE(busbw_factor("barrier", 4));
  EXPECT_EQ(size_bucket(0), std::make_pair(int64_t(0), int64_t(1)));
  EXPECT_EQ(size_bucket(1), std::make_pair(int64_t(1), int64_t(2)));
  EXPECT_EQ(size_bucket(4095), std::make_pair(int64_t(2048), int64_t(4096)));
  EXPECT_EQ(size_bucket(4096), std::make_pair(int64_t(4096), int64_t(8192)));
  EXPECT_EQ(group_kind("edp12"), "edp");
  EXPECT_EQ(group_kind("world"), "world");
}

// ---- --json round trip -------------------------------------------------------------------

TEST(Report, JsonRoundTrips) {
  const Gen g(3);
  for (const Report& r : {compute_report(parse_run(g.metrics_text(), "a.jsonl")),
                          compute_report(parse_run(Gen(4, false).metrics_text(), "b.jsonl")),
                          compute_report(parse_run(hand_trace().dump(), "c.json"))}) {
    const std::string text = report_to_json(r);
    const Report back = report_from_json(text, "r.json");
    EXPECT_TRUE(back == r) << r.source;
    EXPECT_EQ(report_to_json(back), text);
  }
  try {
    report_from_json(R"({"format": "moezero.report/2", "source": "x"})", "r.json");
    FAIL() << "a report without its fields must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("r.json: report.kind: missing field"), std::string::npos)
        << e.what();
  }
}

// ---- prediction quality ---------------------------------------------------------------------

// Two steps of two MoE layers (model layers 1 and 3), two experts, one rank, with hand-made
// prediction-quality fields: step 1 layer 3 had no plan before routing (count 0).
//   step 1 L1: sum 0.5 over 4 pairs, buckets 0: 1 pair (0 active), 9: 3 pairs (2 active)
//   step 2 L1: sum 0.3 over 2 pairs, bucket 5: 2 pairs (1 active)
//   step 2 L3: sum 1.0 over 4 pairs, bucket 5: 4 pairs (2 active)
std::string prediction_fixture() {
  auto layer = [](int id, double sum, int64_t count, std::map<int, std::pair<int64_t, int64_t>> b) {
    std::vector<int64_t> cc(10, 0), ca(10, 0);
    for (auto& [k, v] : b) cc[size_t(k)] = v.first, ca[size_t(k)] = v.second;
    const std::vector<int64_t> t = {4, 0};
    return json{{"layer", id},
                {"tokens", t},
                {"gathers", t},
                {"gathered_bytes", t},
                {"gather_ms", {0.0, 0.0}},
                {"cache_hits", t},
                {"cache_misses", t},
                {"prefetch_hits", t},
                {"prefetch_misses", t},
                {"wasted_bytes", t},
                {"a2a_tokens_in", t},
                {"a2a_tokens_out", t},
                {"predicted", {0.75, 0.25}},
                {"brier_sum", sum},
                {"brier_count", count},
                {"calibration_count", cc},
                {"calibration_active", ca}};
  };
  json rank = {{"peak_bytes", {{"grad", 1}}}, {"peak_total_bytes", 1}};
#define MOEZERO_ZERO(name, unit, source) rank[#name] = 0;
  MOEZERO_RANK_STEP_COUNTERS(MOEZERO_ZERO)
#undef MOEZERO_ZERO
  const json tpe = {{4, 0}, {4, 0}};
  json s1 = {{"step", 1},
             {"tokens_per_expert", tpe},
             {"ranks", {rank}},
             {"moe_layers", {layer(1, 0.5, 4, {{0, {1, 0}}, {9, {3, 2}}}), layer(3, 0.0, 0, {})}}};
  json s2 = {{"step", 2},
             {"tokens_per_expert", tpe},
             {"ranks", {rank}},
             {"moe_layers", {layer(1, 0.3, 2, {{5, {2, 1}}}), layer(3, 1.0, 4, {{5, {4, 2}}})}}};
  return s1.dump() + "\n" + s2.dump() + "\n";
}

TEST(Report, BrierAndCalibrationFromHandMadeFixture) {
  const Report r = compute_report(parse_run(prediction_fixture(), "p.jsonl"));
  ASSERT_TRUE(r.has_prediction_quality);
  // Per (step, layer): brier_sum / brier_count; absent where no plan covered the step.
  ASSERT_EQ(r.brier_cells.size(), 4u);
  const std::vector<BrierCell> cells = {
      {1, 1, 4, 0.125}, {1, 3, 0, std::nullopt}, {2, 1, 2, 0.15}, {2, 3, 4, 0.25}};
  for (size_t i = 0; i < cells.size(); ++i) {
    SCOPED_TRACE("cell " + std::to_string(i));
    EXPECT_EQ(r.brier_cells[i].step, cells[i].step);
    EXPECT_EQ(r.brier_cells[i].layer, cells[i].layer);
    EXPECT_EQ(r.brier_cells[i].pairs, cells[i].pairs);
    ASSERT_EQ(r.brier_cells[i].brier.has_value(), cells[i].brier.has_value());
    if (cells[i].brier) {
      EXPECT_DOUBLE_EQ(*r.brier_cells[i].brier, *cells[i].brier);
    }
  }
  // Per layer: pooled over steps, (0.5 + 0.3) / 6 and 1.0 / 4.
  ASSERT_EQ(r.layers.size(), 2u);
  EXPECT_EQ(r.layers[0].brier_pairs, 6);
  EXPECT_DOUBLE_EQ(r.layers[0].brier.value(), 0.8 / 6.0);
  EXPECT_EQ(r.layers[1].brier_pairs, 4);
  EXPECT_DOUBLE_EQ(r.layers[1].brier.value(), 0.25);
  // Calibration: 10 buckets for all layers (-1), then 10 per layer.
  ASSERT_EQ(r.calibration.size(), 30u);
  struct Want {
    int64_t layer, bucket, pairs, active;
    std::optional<double> rate;
  };
  const std::vector<Want> want = {{-1, 0, 1, 0, 0.0},         {-1, 1, 0, 0, std::nullopt},
                                  {-1, 5, 6, 3, 0.5},         {-1, 9, 3, 2, 2.0 / 3.0},
                                  {1, 5, 2, 1, 0.5},          {1, 9, 3, 2, 2.0 / 3.0},
                                  {3, 0, 0, 0, std::nullopt}, {3, 5, 4, 2, 0.5}};
  for (const Want& w : want) {
    SCOPED_TRACE("layer " + std::to_string(w.layer) + " bucket " + std::to_string(w.bucket));
    const size_t block = w.layer == -1 ? 0 : w.layer == 1 ? 1 : 2;
    const CalibrationRow& c = r.calibration[block * 10 + size_t(w.bucket)];
    EXPECT_EQ(c.layer, w.layer);
    EXPECT_EQ(c.bucket, w.bucket);
    EXPECT_DOUBLE_EQ(c.lo, double(w.bucket) / 10.0);
    EXPECT_DOUBLE_EQ(c.hi, double(w.bucket + 1) / 10.0);
    EXPECT_DOUBLE_EQ(c.mean_predicted, (double(w.bucket) + 0.5) / 10.0);
    EXPECT_EQ(c.pairs, w.pairs);
    EXPECT_EQ(c.active, w.active);
    ASSERT_EQ(c.observed_rate.has_value(), w.rate.has_value());
    if (w.rate) {
      EXPECT_DOUBLE_EQ(*c.observed_rate, *w.rate);
    }
  }
  // JSON round trip keeps every cell and row.
  EXPECT_EQ(report_from_json(report_to_json(r), "r.json"), r);
  // Text: per-step table and the calibration rows.
  std::ostringstream text;
  write_text(text, r);
  const std::string t = text.str();
  EXPECT_NE(t.find("1     0.1250     n/a"), std::string::npos) << t;
  EXPECT_NE(t.find("2     0.1500  0.2500"), std::string::npos) << t;
  EXPECT_NE(t.find("0.5 - <0.6      6    0.55     0.500"), std::string::npos) << t;
  EXPECT_NE(t.find("0.9 - 1.0       3    0.95     0.667"), std::string::npos) << t;
  EXPECT_NE(t.find("0.1 - <0.2      0    0.15       n/a"), std::string::npos) << t;
  // HTML: the Brier heatmap has layers x steps cells, one of them n/a; the calibration table.
  const std::string html = render_html(r);
  const size_t begin = html.find("<svg id=\"heatmap-brier\"");
  ASSERT_NE(begin, std::string::npos);
  const std::string svg = html.substr(begin, html.find("</svg>", begin) - begin);
  size_t cells_n = 0;
  for (size_t p = svg.find("class=\"cell\""); p != std::string::npos;
       p = svg.find("class=\"cell\"", p + 1))
    ++cells_n;
  EXPECT_EQ(cells_n, 4u);
  EXPECT_NE(svg.find("layer L3, step 1: n/a"), std::string::npos);
  EXPECT_NE(svg.find("layer L1, step 2: 0.150"), std::string::npos);
  EXPECT_NE(html.find("id=\"calibration-table\""), std::string::npos);
  EXPECT_EQ(html.find("heatmap-error"), std::string::npos);
}

// The per-layer balance of the metrics (load_max_over_mean, load_cv; null when the step routed
// no token to the layer) becomes balance cells, survives the JSON round trip and is drawn as two
// layers x steps heatmaps; a file without the fields has none; a negative value is refused.
TEST(Report, BalanceCellsAndHeatmapsFromTheMetrics) {
  std::istringstream in(prediction_fixture());
  std::string out;
  int n = 0;
  const double mom[2][2] = {{1.25, 2.0}, {1.5, -1.0}}, cv[2][2] = {{0.1, 0.7}, {0.3, -1.0}};
  for (std::string line; std::getline(in, line); ++n) {
    json j = json::parse(line);
    for (size_t l = 0; l < 2; ++l) {
      j["moe_layers"][l]["load_max_over_mean"] = mom[n][l] < 0 ? json(nullptr) : json(mom[n][l]);
      j["moe_layers"][l]["load_cv"] = cv[n][l] < 0 ? json(nullptr) : json(cv[n][l]);
    }
    out += j.dump() + "\n";
  }
  const Report r = compute_report(parse_run(out, "b.jsonl"));
  ASSERT_TRUE(r.has_balance);
  ASSERT_EQ(r.balance_cells.size(), 4u);
  EXPECT_EQ(r.balance_cells[1].step, 1);
  EXPECT_EQ(r.balance_cells[1].layer, 3);
  EXPECT_DOUBLE_EQ(r.balance_cells[1].max_over_mean.value(), 2.0);
  EXPECT_DOUBLE_EQ(r.balance_cells[2].cv.value(), 0.3);
  EXPECT_FALSE(r.balance_cells[3].max_over_mean.has_value());
  EXPECT_FALSE(r.balance_cells[3].cv.has_value());
  EXPECT_EQ(report_from_json(report_to_json(r), "r.json"), r);
  const std::string html = render_html(r);
  for (const char* id : {"heatmap-balance-max", "heatmap-balance-cv"}) {
    const size_t begin = html.find(std::string("<svg id=\"") + id + "\"");
    ASSERT_NE(begin, std::string::npos) << id;
    const std::string svg = html.substr(begin, html.find("</svg>", begin) - begin);
    size_t cells_n = 0;
    for (size_t p = svg.find("class=\"cell\""); p != std::string::npos;
         p = svg.find("class=\"cell\"", p + 1))
      ++cells_n;
    EXPECT_EQ(cells_n, 4u) << id;
    EXPECT_NE(svg.find("layer L3, step 2: n/a"), std::string::npos) << id;
  }
  EXPECT_NE(html.find("layer L3, step 1: 2.000"), std::string::npos);
  EXPECT_NE(html.find("layer L1, step 2: 0.300"), std::string::npos);
  // Without the fields: no balance, no heatmap.
  const Report old = compute_report(parse_run(prediction_fixture(), "p.jsonl"));
  EXPECT_FALSE(old.has_balance);
  EXPECT_TRUE(old.balance_cells.empty());
  EXPECT_EQ(render_html(old).find("heatmap-balance-max"), std::string::npos);
  // A negative value is refused naming the field.
  json bad = json::parse(out.substr(0, out.find('\n')));
  bad["moe_layers"][0]["load_cv"] = -0.5;
  try {
    parse_run(bad.dump() + "\n", "bad.jsonl");
    ADD_FAILURE() << "a negative load_cv was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("load_cv"), std::string::npos) << e.what();
  }
}

// ---- rendering -----------------------------------------------------------------------------

TEST(Report, HtmlIsSelfContainedAndHasEveryHeatmap) {
  const Gen g(5);
  const Report r = compute_report(parse_run(g.metrics_text(), "a<b>.jsonl"));
  const std::string html = render_html(r);
  EXPECT_NE(html.find("class=\"val-loss\""), std::string::npos) << "validation loss line";
  EXPECT_NE(html.find("class=\"train-loss\""), std::string::npos) << "training loss line";
  for (const char* id :
       {"heatmap-share", "heatmap-active", "steps-chart", "memory-chart", "loss-chart"})
    EXPECT_NE(html.find(std::string("id=\"") + id + "\""), std::string::npos) << id;
  size_t cells = 0;
  for (size_t p = html.find("class=\"cell\""); p != std::string::npos;
       p = html.find("class=\"cell\"", p + 1))
    ++cells;
  EXPECT_EQ(cells, size_t(2 * g.L * g.E));  // no prediction-quality fields: no Brier heatmap
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  EXPECT_EQ(html.find("@import"), std::string::npos);
  EXPECT_EQ(html.find("a<b>"), std::string::npos) << "file names are escaped";
  EXPECT_NE(html.find("a&lt;b&gt;.jsonl"), std::string::npos);
}

TEST(Report, ColourScales) {
  EXPECT_EQ(sequential_color(0.0), "#440154");
  EXPECT_EQ(sequential_color(1.0), "#fde725");
  EXPECT_EQ(sequential_color(2.0), "#fde725");
  EXPECT_EQ(diverging_color(0.0), "#f7f7f7");
  EXPECT_EQ(diverging_color(-1.0), "#2166ac");
  EXPECT_EQ(diverging_color(1.0), "#b2182b");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3.0 * 1024 * 1024 * 1024), "3.00 GiB");
}

}  // namespace
}  // namespace moezero::report
