// The report's numbers against an independent recomputation from metrics generated in the test
// (random, seeded, in the trainer's metrics format: report_test_gen.h), the comms summary of a
// hand-built trace with known spans (exact algbw / busbw) and the --json round trip. Prediction
// quality, balance and the rendering: report_render_test.cpp.
#include "report/report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/step_counters.h"
#include "report/report_render.h"
#include "report/run_input.h"
#include "tests/report/report_test_gen.h"

namespace moezero::report {
namespace {

using nlohmann::json;

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

}  // namespace
}  // namespace moezero::report
