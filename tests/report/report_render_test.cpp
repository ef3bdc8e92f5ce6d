// The report's prediction quality (Brier score, calibration) and per-layer balance from
// hand-made metrics fixtures, drawn as heatmaps, and the rendering's promises: a self-contained
// HTML page with every heatmap, escaped file names, the colour scales.
#include "report/report_render.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "report/report.h"
#include "report/run_input.h"
#include "tests/report/report_test_gen.h"

namespace moezero::report {
namespace {

using nlohmann::json;

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
