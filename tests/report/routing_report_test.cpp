// tests/report/routing_report_test.cpp — `moezero report` of a routing trace: the per-layer
// balance over steps and the token shares of a hand-made trace against values worked out by
// hand, detection by the header, and bad lines refused naming the file, line and field.
#include "report/routing_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.h"

namespace moezero::report {
namespace {

namespace fs = std::filesystem;

fs::path write(const std::string& name, const std::string& text) {
  const fs::path dir =
      fs::temp_directory_path() / ("moezero_routing_report_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / name) << text;
  return dir / name;
}

const char* kHeader = R"({"format":"moezero routing trace","version":1,"world_size":2,"ep_size":1,)"
                      R"("num_experts":3,"top_k":1,"grad_accum_steps":1,"moe_layers":[0,2]})"
                      "\n";

std::string line(int step, int layer, int rank, const char* counts) {
  return "{\"step\":" + std::to_string(step) + ",\"micro_batch\":" + std::to_string(step - 1) +
         ",\"layer\":" + std::to_string(layer) + ",\"rank\":" + std::to_string(rank) +
         ",\"counts\":" + counts + "}\n";
}

std::string good_trace() {
  return std::string(kHeader) + line(1, 0, 0, "[2,1,1]") + line(1, 0, 1, "[2,1,1]") +
         line(1, 2, 0, "[1,1,1]") + line(1, 2, 1, "[1,1,1]") + line(2, 0, 0, "[1,1,2]") +
         line(2, 0, 1, "[1,1,2]") + line(2, 2, 0, "[0,0,0]") + line(2, 2, 1, "[0,0,0]");
}

TEST(RoutingReport, BalanceAndSharesOfAHandMadeTrace) {
  const fs::path p = write("good.jsonl", good_trace());
  ASSERT_TRUE(is_routing_trace(p.string()));
  const RoutingReport r = read_routing_report(p.string());
  EXPECT_EQ(r.world_size, 2);
  EXPECT_EQ(r.num_experts, 3);
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.first_step, 1);
  EXPECT_EQ(r.last_step, 2);
  ASSERT_EQ(r.layers.size(), 2u);
  const RoutingLayer& a = r.layers[0];
  EXPECT_EQ(a.layer, 0);
  EXPECT_EQ(a.tokens, 16);
  ASSERT_EQ(a.steps.size(), 2u);
  EXPECT_EQ(a.steps[0].load, (std::vector<int64_t>{4, 2, 2}));
  EXPECT_EQ(a.steps[1].load, (std::vector<int64_t>{2, 2, 4}));
  // load (4, 2, 2): mean 8/3, max/mean 1.5, std sqrt(8/9), cv sqrt(2)/4.
  for (const auto& b : a.steps) {
    ASSERT_TRUE(b.max_over_mean && b.cv);
    EXPECT_NEAR(*b.max_over_mean, 1.5, 1e-12);
    EXPECT_NEAR(*b.cv, std::sqrt(2.0) / 4, 1e-12);
  }
  EXPECT_NEAR(*a.max_over_mean_mean, 1.5, 1e-12);
  EXPECT_NEAR(*a.cv_max, std::sqrt(2.0) / 4, 1e-12);
  EXPECT_NEAR(a.token_share[0], 0.375, 1e-12);  // (6, 4, 6) / 16
  EXPECT_NEAR(a.token_share[1], 0.25, 1e-12);
  EXPECT_NEAR(a.token_share[2], 0.375, 1e-12);
  const RoutingLayer& b = r.layers[1];
  EXPECT_EQ(b.layer, 2);
  EXPECT_EQ(b.tokens, 6);
  ASSERT_EQ(b.steps.size(), 2u);
  EXPECT_NEAR(*b.steps[0].max_over_mean, 1.0, 1e-12);
  EXPECT_NEAR(*b.steps[0].cv, 0.0, 1e-12);
  EXPECT_FALSE(b.steps[1].max_over_mean.has_value()) << "no token routed: absent, not 0";
  EXPECT_NEAR(*b.max_over_mean_mean, 1.0, 1e-12);  // over the steps that routed tokens
  EXPECT_NEAR(b.token_share[1], 1.0 / 3, 1e-12);
  // JSON and text carry the numbers.
  const auto j = nlohmann::json::parse(routing_report_to_json(r));
  EXPECT_EQ(j["kind"], "routing_trace");
  EXPECT_EQ(j["layers"][0]["steps"][1]["tokens_per_expert"], nlohmann::json::array({2, 2, 4}));
  EXPECT_NEAR(j["layers"][0]["steps"][0]["load_max_over_mean"].get<double>(), 1.5, 1e-12);
  EXPECT_TRUE(j["layers"][1]["steps"][1]["load_cv"].is_null());
  std::ostringstream text;
  write_routing_text(text, r);
  EXPECT_NE(text.str().find("1.500"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("37.5"), std::string::npos) << text.str();
}

// The number of <rect class="cell"> of the <svg id="id"> in `page` (-1: no such svg).
int cells(const std::string& page, const std::string& id) {
  const size_t at = page.find("<svg id=\"" + id + "\"");
  if (at == std::string::npos) return -1;
  const size_t end = page.find("</svg>", at);
  int n = 0;
  for (size_t p = page.find("<rect class=\"cell\"", at); p < end;
       p = page.find("<rect class=\"cell\"", p + 1))
    ++n;
  return n;
}

// The HTML page draws the hand-made trace: shares (layers x experts), balance (layers x steps)
// and each layer's loads over steps (steps x experts), with the values worked out above.
TEST(RoutingReport, HtmlPageDrawsTheTracesHeatmaps) {
  const RoutingReport r = read_routing_report(write("html.jsonl", good_trace()).string());
  const std::string page = render_routing_html(r);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("<table id=\"routing-balance-table\">"), std::string::npos);
  EXPECT_EQ(cells(page, "heatmap-routing-share"), 2 * 3);
  EXPECT_EQ(cells(page, "heatmap-routing-max-over-mean"), 2 * 2);
  EXPECT_EQ(cells(page, "heatmap-routing-cv"), 2 * 2);
  EXPECT_EQ(cells(page, "heatmap-routing-load-L0"), 2 * 3);
  EXPECT_EQ(cells(page, "heatmap-routing-load-L2"), 2 * 3);
  // Layer 0: shares 37.5 / 25 / 37.5 %; step 1 loads (4, 2, 2) = 1.5, 0.75, 0.75 of the mean;
  // layer 2 routed nothing at step 2 (n/a), max/mean 1.50 for layer 0 at step 1.
  EXPECT_NE(page.find("<title>layer L0, expert 1: 25.0</title>"), std::string::npos);
  EXPECT_NE(page.find("<title>step 1, expert 0: 1.50</title>"), std::string::npos);
  EXPECT_NE(page.find("<title>step 2, expert 2: 1.50</title>"), std::string::npos);
  EXPECT_NE(page.find("<title>layer L2, step 2: n/a</title>"), std::string::npos);
  EXPECT_NE(page.find("<title>layer L0, step 1: 1.50</title>"), std::string::npos);

  // A long trace is binned: 200 steps -> 80 step columns at most (here 67 bins of 3); layer 0
  // routes (2, 3, 4) every step: expert 2 has 4/3 of the mean.
  std::string longer = kHeader;
  for (int s = 1; s <= 200; ++s)
    longer += line(s, 0, 0, "[1,2,3]") + line(s, 0, 1, "[1,1,1]") + line(s, 2, 0, "[0,0,1]");
  const std::string big =
      render_routing_html(read_routing_report(write("long.jsonl", longer).string()));
  EXPECT_EQ(cells(big, "heatmap-routing-max-over-mean"), 2 * 67);
  EXPECT_EQ(cells(big, "heatmap-routing-load-L0"), 40 * 3);  // 40 rows of 5 steps
  EXPECT_NE(big.find("<title>step 196-200, expert 2: 1.33</title>"), std::string::npos);
}

TEST(RoutingReport, DetectsTheHeaderAndRefusesBadLines) {
  EXPECT_FALSE(is_routing_trace(write("metrics.jsonl", "{\"step\":1,\"loss\":2.0}\n").string()));
  EXPECT_FALSE(is_routing_trace("/nonexistent/routing.jsonl"));
  auto error = [](const std::string& name, const std::string& text) {
    try {
      read_routing_report(write(name, text).string());
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string e = error("count.jsonl", std::string(kHeader) + line(1, 0, 0, "[1,-1,1]"));
  EXPECT_NE(e.find("count.jsonl:2"), std::string::npos) << e;
  EXPECT_NE(e.find("counts[1]"), std::string::npos) << e;
  e = error("layer.jsonl", std::string(kHeader) + line(1, 1, 0, "[1,1,1]"));
  EXPECT_NE(e.find("layer 1 is not in moe_layers"), std::string::npos) << e;
  e = error("len.jsonl", std::string(kHeader) + line(1, 0, 0, "[1,1]"));
  EXPECT_NE(e.find("counts must be a list of 3"), std::string::npos) << e;
  e = error("rank.jsonl", std::string(kHeader) + line(1, 0, 5, "[1,1,1]"));
  EXPECT_NE(e.find("rank 5"), std::string::npos) << e;
  e = error("json.jsonl", std::string(kHeader) + "{\"step\":\n");
  EXPECT_NE(e.find("json.jsonl:2: not a JSON object"), std::string::npos) << e;
}

}  // namespace
}  // namespace moezero::report
