// `moezero report` end to end: the real trainer writes a metrics file and a trace, the report
// reads each and writes HTML and JSON (ReportCli); headless Chromium renders the HTML and the
// screenshot must show the heatmap's colours where the heatmap is drawn
// (ReportCli.ScreenshotShowsTheHeatmap).
//
// Paths come from CMake: MOEZERO_BIN (the moezero program), MOEZERO_SOURCE_DIR, MOEZERO_WORK_DIR
// (a scratch folder in the build tree).
#include <gtest/gtest.h>
#if MOEZERO_HAVE_PNG
#include <png.h>
#endif

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

#include "report/report.h"

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs a shell command, output to `log`; returns the exit status.
int run(const std::string& cmd, const fs::path& log) {
  const std::string full = cmd + " >" + log.string() + " 2>&1";
  const int rc = std::system(full.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// One scratch folder per CTest entry (report_cli and report_screenshot run this executable with
// different filters, possibly at once under ctest -j): MOEZERO_TEST_SCRATCH names it.
fs::path work_dir() {
  const char* sub = std::getenv("MOEZERO_TEST_SCRATCH");
  return fs::path(MOEZERO_WORK_DIR) / (sub && *sub ? sub : "default");
}
const fs::path kWork = work_dir();

// Trains 6 steps of the tiny config once and reports it; every test reads the outputs.
class ReportCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::create_directories(kWork);
    metrics_ = kWork / "tiny_metrics.jsonl";
    trace_ = kWork / "tiny_trace.json";
    html_ = kWork / "tiny_report.html";
    json_ = kWork / "tiny_report.json";
    trace_json_ = kWork / "tiny_trace_report.json";
    fs::remove(metrics_);
    fs::remove(trace_);
    train_rc_ = run(std::string(MOEZERO_BIN) + " train --config " + MOEZERO_SOURCE_DIR +
                        "/examples/configs/tiny.json --set train.steps=6 --quiet --metrics " +
                        metrics_.string() + " --trace " + trace_.string(),
                    kWork / "train.log");
    report_rc_ = run(std::string(MOEZERO_BIN) + " report " + metrics_.string() + " --html " +
                         html_.string() + " --json " + json_.string(),
                     kWork / "report.log");
    trace_report_rc_ = run(
        std::string(MOEZERO_BIN) + " report " + trace_.string() + " --json " + trace_json_.string(),
        kWork / "trace_report.log");
  }
  static void expect_ran() {
    ASSERT_EQ(train_rc_, 0) << slurp(kWork / "train.log");
    ASSERT_EQ(report_rc_, 0) << slurp(kWork / "report.log");
  }
  static inline fs::path metrics_, trace_, html_, json_, trace_json_;
  static inline int train_rc_ = -1, report_rc_ = -1, trace_report_rc_ = -1;
};

TEST_F(ReportCli, TrainThenReportWritesHtmlWithTheHeatmap) {
  expect_ran();
  const std::string html = slurp(html_);
  ASSERT_NE(html.find("<svg id=\"heatmap-share\""), std::string::npos);
  // tiny.json: 2 MoE layers x 8 experts, two heatmaps at least (share, observed activity).
  size_t cells = 0;
  for (size_t p = html.find("class=\"cell\""); p != std::string::npos;
       p = html.find("class=\"cell\"", p + 1))
    ++cells;
  EXPECT_GE(cells, 2u * 2 * 8);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  const std::string text = slurp(kWork / "report.log");
  EXPECT_NE(text.find("== Experts"), std::string::npos) << text;
  EXPECT_NE(text.find("== Peak memory per rank"), std::string::npos) << text;
}

TEST_F(ReportCli, JsonNumbersEqualTheMetricsFile) {
  expect_ran();
  const moezero::report::Report r = moezero::report::report_from_json(slurp(json_), json_.string());
  EXPECT_EQ(r.steps, 6);
  EXPECT_EQ(r.ranks, 2);
  ASSERT_EQ(r.layers.size(), 2u);
  // Recompute the tokens routed per expert and the stall per step from the raw lines.
  std::map<std::pair<size_t, size_t>, int64_t> tokens;
  std::ifstream f(metrics_);
  std::string line;
  size_t s = 0;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    for (size_t l = 0; l < j["tokens_per_expert"].size(); ++l)
      for (size_t e = 0; e < j["tokens_per_expert"][l].size(); ++e)
        tokens[{l, e}] += j["tokens_per_expert"][l][e].get<int64_t>();
    double stall = 0;
    for (const auto& rk : j["ranks"]) stall += rk["stall_ms"].get<double>();
    ASSERT_LT(s, r.step_rows.size());
    EXPECT_NEAR(r.step_rows[s].stall_ms, stall, 1e-9);
    ++s;
  }
  EXPECT_EQ(s, 6u);
  for (const auto& [key, t] : tokens) EXPECT_EQ(r.expert(key.first, key.second).tokens, t);
}

// The report of the trace the same run wrote: the same per-expert numbers as the metrics file
// (the trace carries every step's metrics line), and a comms summary whose counts and bytes are
// those of the trace's collective spans, with busbw for every row (moezero writes group_size).
TEST_F(ReportCli, TraceReportHasTheMetricsNumbersAndBusbw) {
  expect_ran();
  ASSERT_EQ(trace_report_rc_, 0) << slurp(kWork / "trace_report.log");
  using moezero::report::Report;
  const Report m = moezero::report::report_from_json(slurp(json_), json_.string());
  const Report t = moezero::report::report_from_json(slurp(trace_json_), trace_json_.string());
  EXPECT_EQ(t.steps, m.steps);
  EXPECT_EQ(t.ranks, m.ranks);
  ASSERT_EQ(t.experts.size(), m.experts.size());
  for (size_t i = 0; i < t.experts.size(); ++i) EXPECT_EQ(t.experts[i], m.experts[i]) << i;
  EXPECT_TRUE(m.comms.empty()) << "a metrics file has no collective spans";
  ASSERT_TRUE(t.has_collectives);
  EXPECT_TRUE(t.has_group_size) << "moezero's collective spans carry args.group_size";
  int64_t spans = 0, bytes = 0;
  const auto trace = nlohmann::json::parse(slurp(trace_));
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "collective") {
      ++spans;
      bytes += e["args"]["bytes"].get<int64_t>();
    }
  int64_t rows_count = 0, rows_bytes = 0;
  for (const auto& c : t.comms) {
    rows_count += c.count;
    rows_bytes += c.total_bytes;
    if (c.total_ms > 0) {
      EXPECT_TRUE(c.algbw_gbps.has_value()) << c.op << " " << c.group;
      EXPECT_TRUE(c.busbw_gbps.has_value()) << c.op << " " << c.group;
    }
  }
  EXPECT_GT(spans, 0);
  EXPECT_EQ(rows_count, spans);
  EXPECT_EQ(rows_bytes, bytes);
  EXPECT_NE(slurp(kWork / "trace_report.log").find("busbw"), std::string::npos);
}

TEST_F(ReportCli, BadInputFailsWithTheFileAndLine) {
  const fs::path bad = kWork / "bad_metrics.jsonl";
  std::ofstream(bad) << "{\"step\": 1, \"tokens_per_expert\": [], \"ranks\": []}\n";
  const fs::path log = kWork / "bad.log";
  EXPECT_EQ(run(std::string(MOEZERO_BIN) + " report " + bad.string(), log), 1);
  EXPECT_NE(slurp(log).find(bad.string() + ":1: ranks: is empty"), std::string::npos) << slurp(log);
}

// A routing trace (profile.routing_trace) of the tiny run, reported: per step and layer the
// summed counts are the metrics' tokens_per_expert and the balance equals the trainer's own
// load_max_over_mean and load_cv of the same run; --html draws the trace's heatmaps.
TEST_F(ReportCli, RoutingTraceReportMatchesTheMetricsBalance) {
  const fs::path routing = kWork / "routing.jsonl", metrics = kWork / "routing_metrics.jsonl";
  const fs::path json = kWork / "routing_report.json";
  fs::remove(routing);
  ASSERT_EQ(run(std::string(MOEZERO_BIN) + " train --config " + MOEZERO_SOURCE_DIR +
                    "/examples/configs/tiny.json --set train.steps=3 --set train.log_every=1 " +
                    "--quiet --metrics " + metrics.string() +
                    " --set profile.routing_trace=" + routing.string(),
                kWork / "routing_train.log"),
            0)
      << slurp(kWork / "routing_train.log");
  ASSERT_EQ(
      run(std::string(MOEZERO_BIN) + " report " + routing.string() + " --json " + json.string(),
          kWork / "routing_report.log"),
      0)
      << slurp(kWork / "routing_report.log");
  EXPECT_NE(slurp(kWork / "routing_report.log").find("load balance per MoE layer"),
            std::string::npos);
  const nlohmann::json r = nlohmann::json::parse(slurp(json));
  ASSERT_EQ(r["kind"], "routing_trace");
  ASSERT_EQ(r["steps"], 3);
  std::ifstream in(metrics);
  int steps = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json m = nlohmann::json::parse(line);
    if (!m.contains("moe_layers")) continue;
    const int64_t step = m["step"];
    ASSERT_GE(step, 1);
    ASSERT_LE(step, 3);
    ASSERT_EQ(r["layers"].size(), m["moe_layers"].size());
    for (size_t l = 0; l < m["moe_layers"].size(); ++l) {
      const auto& got = r["layers"][l]["steps"][static_cast<size_t>(step - 1)];
      const auto& want = m["moe_layers"][l];
      EXPECT_EQ(r["layers"][l]["layer"], want["layer"]);
      EXPECT_EQ(got["step"], step);
      EXPECT_EQ(got["tokens_per_expert"], m["tokens_per_expert"][l]) << "step " << step;
      EXPECT_NEAR(got["load_max_over_mean"].get<double>(), want["load_max_over_mean"].get<double>(),
                  1e-9);
      EXPECT_NEAR(got["load_cv"].get<double>(), want["load_cv"].get<double>(), 1e-9);
    }
    ++steps;
  }
  EXPECT_EQ(steps, 3);
  // The metrics' report has the same balance per (step, layer), drawn in its HTML page.
  const fs::path mjson = kWork / "routing_metrics_report.json";
  const fs::path mhtml = kWork / "routing_metrics_report.html";
  ASSERT_EQ(run(std::string(MOEZERO_BIN) + " report " + metrics.string() + " --quiet --json " +
                    mjson.string() + " --html " + mhtml.string(),
                kWork / "routing_metrics_report.log"),
            0)
      << slurp(kWork / "routing_metrics_report.log");
  const moezero::report::Report mr =
      moezero::report::report_from_json(slurp(mjson), mjson.string());
  ASSERT_TRUE(mr.has_balance);
  const size_t nl = r["layers"].size();
  ASSERT_EQ(mr.balance_cells.size(), 3 * nl);
  for (size_t i = 0; i < mr.balance_cells.size(); ++i) {
    const auto& c = mr.balance_cells[i];
    const auto& got = r["layers"][i % nl]["steps"][i / nl];
    EXPECT_EQ(c.step, got["step"].get<int64_t>());
    EXPECT_NEAR(c.max_over_mean.value(), got["load_max_over_mean"].get<double>(), 1e-9);
    EXPECT_NEAR(c.cv.value(), got["load_cv"].get<double>(), 1e-9);
  }
  const std::string page = slurp(mhtml);
  EXPECT_NE(page.find("<svg id=\"heatmap-balance-max\""), std::string::npos);
  EXPECT_NE(page.find("<svg id=\"heatmap-balance-cv\""), std::string::npos);
  // The routing trace's own page: its heatmaps, one per MoE layer for the loads over steps.
  const fs::path log = kWork / "routing_html.log", rhtml = kWork / "routing.html";
  ASSERT_EQ(run(std::string(MOEZERO_BIN) + " report " + routing.string() + " --quiet --html " +
                    rhtml.string(),
                log),
            0)
      << slurp(log);
  const std::string rpage = slurp(rhtml);
  for (const char* id :
       {"heatmap-routing-share", "heatmap-routing-max-over-mean", "heatmap-routing-cv"})
    EXPECT_NE(rpage.find(std::string("<svg id=\"") + id + "\""), std::string::npos) << id;
  for (const auto& l : r["layers"])
    EXPECT_NE(rpage.find("<svg id=\"heatmap-routing-load-L" + l["layer"].dump() + "\""),
              std::string::npos)
        << l["layer"];
}

// ---- headless Chromium ---------------------------------------------------------------------

std::string find_chromium() {
  if (const char* env = std::getenv("MOEZERO_CHROMIUM")) return env;
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(c)) return c;
  return "";
}

struct Image {
  unsigned width = 0, height = 0;
  std::vector<unsigned char> rgb;  // (height, width, 3)
};

// Decodes a PNG with libpng's simplified API into 8-bit RGB.
bool read_png(const fs::path& p, Image& img, std::string& why) {
#if MOEZERO_HAVE_PNG
  png_image im{};
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&im, p.c_str())) {
    why = im.message;
    return false;
  }
  im.format = PNG_FORMAT_RGB;
  img.width = im.width;
  img.height = im.height;
  img.rgb.resize(PNG_IMAGE_SIZE(im));
  if (!png_image_finish_read(&im, nullptr, img.rgb.data(), 0, nullptr)) {
    why = im.message;
    png_image_free(&im);
    return false;
  }
  return true;
#else
  why =
      "built without libpng: run scripts/install_deps.sh (Debian package libpng-dev) and "
      "reconfigure";
  return false;
#endif
}

TEST_F(ReportCli, ScreenshotShowsTheHeatmap) {
  expect_ran();
  const std::string chromium = find_chromium();
  ASSERT_FALSE(chromium.empty())
      << "chromium not found: the HTML report's screenshot test needs Debian's chromium "
         "package; run scripts/install_deps.sh (or set MOEZERO_CHROMIUM to a Chromium binary)";
  const fs::path png = kWork / "tiny_report.png";
  fs::remove(png);
  // --no-sandbox: Chromium refuses to run as root with its sandbox (CI runs as root).
  const int rc = run(chromium +
                         " --headless --no-sandbox --disable-gpu --hide-scrollbars "
                         "--force-color-profile=srgb --force-device-scale-factor=1 "
                         "--user-data-dir=" +
                         (kWork / "chromium-profile").string() + " --screenshot=" + png.string() +
                         " --window-size=1280,2000 file://" + fs::absolute(html_).string(),
                     kWork / "chromium.log");
  ASSERT_EQ(rc, 0) << slurp(kWork / "chromium.log");
  ASSERT_TRUE(fs::exists(png)) << slurp(kWork / "chromium.log");
  Image img;
  std::string why;
  ASSERT_TRUE(read_png(png, img, why)) << png << ": " << why;
  EXPECT_EQ(img.width, 1280u);
  EXPECT_EQ(img.height, 2000u);

  // The colours of the token-share heatmap's cells, from the page itself.
  const std::string html = slurp(html_);
  const size_t begin = html.find("<svg id=\"heatmap-share\"");
  ASSERT_NE(begin, std::string::npos);
  const std::string svg = html.substr(begin, html.find("</svg>", begin) - begin);
  const std::regex cell_re("class=\"cell\"[^>]*fill=\"#([0-9a-f]{6})\"");
  std::map<std::string, int> colours;  // colour -> cells
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), cell_re);
       it != std::sregex_iterator(); ++it)
    colours[(*it)[1]]++;
  ASSERT_GE(colours.size(), 2u) << "a heatmap of one colour proves little";

  // Count the pixels of each cell colour (+-2 per channel: rounding in the compositor) and the
  // bounding box of all of them: that is where the heatmap was drawn.
  std::map<std::string, long> found;
  unsigned x0 = img.width, y0 = img.height, x1 = 0, y1 = 0;
  std::vector<std::array<int, 3>> rgb;
  for (const auto& [hex, n] : colours)
    rgb.push_back({std::stoi(hex.substr(0, 2), nullptr, 16),
                   std::stoi(hex.substr(2, 2), nullptr, 16),
                   std::stoi(hex.substr(4, 2), nullptr, 16)});
  std::vector<std::string> names;
  for (const auto& [hex, n] : colours) names.push_back(hex);
  for (unsigned y = 0; y < img.height; ++y)
    for (unsigned x = 0; x < img.width; ++x) {
      const unsigned char* p = &img.rgb[(size_t(y) * img.width + x) * 3];
      // Cells of close values have colours within the tolerance of each other: a pixel
      // counts for every colour it matches.
      for (size_t c = 0; c < rgb.size(); ++c)
        if (std::abs(p[0] - rgb[c][0]) <= 2 && std::abs(p[1] - rgb[c][1]) <= 2 &&
            std::abs(p[2] - rgb[c][2]) <= 2) {
          found[names[c]]++;
          x0 = std::min(x0, x);
          y0 = std::min(y0, y);
          x1 = std::max(x1, x);
          y1 = std::max(y1, y);
        }
    }
  // A cell is at least 12 x 14 px; the legend's gradient shows any one colour on a few pixels
  // only, so 120 pixels of a colour means cells of that colour were painted.
  size_t painted = 0;
  for (const auto& [hex, n] : colours)
    if (found[hex] >= 120L * n) ++painted;
  EXPECT_GE(painted, colours.size() * 9 / 10)
      << painted << " of " << colours.size() << " cell colours painted; screenshot " << png;
  ASSERT_LT(x0, x1) << "no heatmap colour in the screenshot " << png;
  // 8 experts x >= 12 px wide, 2 layers x >= 14 px high, inside the window.
  EXPECT_GE(x1 - x0, 8u * 12) << "heatmap region x " << x0 << "-" << x1;
  EXPECT_GE(y1 - y0, 2u * 14) << "heatmap region y " << y0 << "-" << y1;
  std::printf("heatmap drawn at x %u-%u, y %u-%u; %zu of %zu colours painted\n", x0, x1, y0, y1,
              painted, colours.size());
}

}  // namespace
