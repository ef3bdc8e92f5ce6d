// report/report_html.cpp — the HTML form of the report: one page, inline CSS and SVG only (no
// script, no network, no external font), readable when printed or opened from a file.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "report/html_parts.h"
#include "report/report_render.h"

namespace moezero::report {

namespace {

struct Rgb {
  double r, g, b;
};

Rgb hex_rgb(unsigned v) {
  return {double((v >> 16) & 255), double((v >> 8) & 255), double(v & 255)};
}

std::string rgb_hex(const Rgb& c) {
  char buf[8];
  auto q = [](double x) { return static_cast<int>(std::lround(std::clamp(x, 0.0, 255.0))); };
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", q(c.r), q(c.g), q(c.b));
  return buf;
}

template <size_t N>
std::string interpolate(const std::array<unsigned, N>& stops, double t) {
  t = std::clamp(std::isfinite(t) ? t : 0.0, 0.0, 1.0);
  const double x = t * double(N - 1);
  const size_t i = std::min(static_cast<size_t>(x), N - 2);
  const double f = x - double(i);
  const Rgb a = hex_rgb(stops[i]), b = hex_rgb(stops[i + 1]);
  return rgb_hex({a.r + (b.r - a.r) * f, a.g + (b.g - a.g) * f, a.b + (b.b - a.b) * f});
}

// viridis (matplotlib), 10 stops.
constexpr std::array<unsigned, 10> kViridis = {0x440154, 0x482878, 0x3e4989, 0x31688e, 0x26828e,
                                               0x1f9e89, 0x35b779, 0x6ece58, 0xb5de2b, 0xfde725};
// RdBu (ColorBrewer), reversed: blue for negative, red for positive.
constexpr std::array<unsigned, 9> kBlueRed = {0x2166ac, 0x4393c3, 0x92c5de, 0xd1e5f0, 0xf7f7f7,
                                              0xfddbc7, 0xf4a582, 0xd6604d, 0xb2182b};

bool is_dark(const std::string& hex) {
  const Rgb c = hex_rgb(static_cast<unsigned>(std::stoul(hex.substr(1), nullptr, 16)));
  return 0.299 * c.r + 0.587 * c.g + 0.114 * c.b < 140.0;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string opt(const std::optional<double>& v, const char* f) {
  return v ? fmt(f, *v) : std::string("n/a");
}
std::string num(int64_t v) {
  std::string s = std::to_string(v), o;
  const size_t n = s.size();
  for (size_t i = 0; i < n; ++i) {
    o += s[i];
    const size_t left = n - 1 - i;
    if (left > 0 && left % 3 == 0 && s[i] != '-') o += ',';
  }
  return o;
}
std::string px(double v) { return fmt("%.1f", v); }

// A "nice" upper bound >= v for axes and scales: 1, 2, 2.5, 5 times a power of ten.
double nice_ceil(double v) {
  if (!(v > 0)) return 1.0;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= v * (1 - 1e-12)) return m * p;
  return 10.0 * p;
}

std::string cell_color(const Heatmap& h, double v) {
  if (std::isnan(v)) return "#e4e7eb";
  return h.diverging ? diverging_color(v / h.hi) : sequential_color((v - h.lo) / (h.hi - h.lo));
}

std::string col_label(const Heatmap& h, size_t c) {
  return c < h.cols.size() ? esc(h.cols[c]) : std::to_string(c);
}
std::string cell_text(const Heatmap& h, double v) {
  return std::isnan(v) ? std::string("n/a") : fmt(h.value_fmt, v);
}

}  // namespace

std::string heatmap_svg(const Heatmap& h) {
  const size_t nr = h.rows.size(), ne = nr ? h.values[0].size() : 0;
  const double cw = std::clamp(500.0 / double(std::max<size_t>(ne, 1)), 12.0, 58.0);
  const double ch = std::clamp(cw * 0.62, 14.0, 30.0);
  const double left = 40, top = 20, gw = cw * double(ne), gh = ch * double(nr);
  const double legend_w = std::min(std::max(gw, 200.0), 300.0);
  const double width = left + std::max(gw, legend_w) + 12, height = top + gh + 54;
  std::ostringstream o;
  o << "<svg id=\"" << h.id << "\" class=\"heatmap\" width=\"" << px(width) << "\" height=\""
    << px(height) << "\" viewBox=\"0 0 " << px(width) << " " << px(height)
    << "\" role=\"img\" aria-label=\"" << esc(h.title) << "\">\n";
  const bool labels_every = cw >= 18;
  for (size_t e = 0; e < ne; ++e)
    if (labels_every || e % 4 == 0)
      o << "<text x=\"" << px(left + cw * (double(e) + 0.5)) << "\" y=\"" << px(top - 6)
        << "\" text-anchor=\"middle\" class=\"ax\">" << col_label(h, e) << "</text>";
  o << "\n";
  const bool values_in_cells = cw >= 34 && ch >= 16;
  for (size_t l = 0; l < nr; ++l) {
    const double y = top + ch * double(l);
    o << "<text x=\"" << px(left - 6) << "\" y=\"" << px(y + ch / 2 + 4)
      << "\" text-anchor=\"end\" class=\"ax\">" << esc(h.rows[l]) << "</text>";
    for (size_t e = 0; e < ne; ++e) {
      const double v = h.values[l][e];
      const std::string c = cell_color(h, v);
      const double x = left + cw * double(e);
      o << "<rect class=\"cell\" x=\"" << px(x) << "\" y=\"" << px(y) << "\" width=\"" << px(cw)
        << "\" height=\"" << px(ch) << "\" fill=\"" << c << "\"><title>" << h.row_name << " "
        << esc(h.rows[l]) << ", " << h.col_name << " " << col_label(h, e) << ": " << cell_text(h, v)
        << "</title></rect>";
      if (values_in_cells)
        o << "<text x=\"" << px(x + cw / 2) << "\" y=\"" << px(y + ch / 2 + 4)
          << "\" text-anchor=\"middle\" class=\"cv\" fill=\""
          << (is_dark(c) ? "#ffffff" : "#1d2733") << "\">" << cell_text(h, v) << "</text>";
    }
    o << "\n";
  }
  o << "<rect x=\"" << px(left) << "\" y=\"" << px(top) << "\" width=\"" << px(gw) << "\" height=\""
    << px(gh) << "\" fill=\"none\" stroke=\"#9aa5b1\" stroke-width=\"1\"/>\n";
  // Legend: the colour bar of the scale with its ends and middle labelled.
  const double ly = top + gh + 14;
  o << "<defs><linearGradient id=\"" << h.id << "-grad\" x1=\"0\" x2=\"1\" y1=\"0\" y2=\"0\">";
  for (int i = 0; i <= 20; ++i) {
    const double t = i / 20.0;
    o << "<stop offset=\"" << fmt("%.2f", t) << "\" stop-color=\""
      << (h.diverging ? diverging_color(2 * t - 1) : sequential_color(t)) << "\"/>";
  }
  o << "</linearGradient></defs>";
  o << "<rect x=\"" << px(left) << "\" y=\"" << px(ly) << "\" width=\"" << px(legend_w)
    << "\" height=\"10\" fill=\"url(#" << h.id
    << "-grad)\" stroke=\"#9aa5b1\" stroke-width=\"0.5\"/>";
  const double lo = h.diverging ? -h.hi : h.lo;
  for (int i = 0; i <= 2; ++i) {
    const double t = i / 2.0;
    const double x = left + legend_w * t;
    o << "<line x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"" << px(ly + 10) << "\" y2=\""
      << px(ly + 14) << "\" stroke=\"#5b6775\"/>";
    o << "<text x=\"" << px(x) << "\" y=\"" << px(ly + 25) << "\" text-anchor=\""
      << (i == 0   ? "start"
          : i == 2 ? "end"
                   : "middle")
      << "\" class=\"ax\">"
      << (i == 1 && h.diverging ? std::string("0") : fmt(h.legend_fmt, lo + (h.hi - lo) * t))
      << "</text>";
  }
  o << "<text x=\"" << px(left + legend_w + 0) << "\" y=\"" << px(ly + 38)
    << "\" text-anchor=\"end\" class=\"ax2\">" << esc(h.caption) << "</text>";
  o << "</svg>\n";
  return o.str();
}

namespace {

std::string placeholder(const std::string& title, const std::string& why) {
  return "<div class=\"hm\"><h3>" + esc(title) + "</h3><div class=\"empty\">" + esc(why) +
         "</div></div>\n";
}

std::string panel(const Heatmap& h, const std::string& note) {
  return "<div class=\"hm\"><h3>" + esc(h.title) + "</h3><p class=\"note\">" + note + "</p>" +
         heatmap_svg(h) + "</div>\n";
}

std::string steps_chart(const Report& r) {
  const double W = 1130, H = 240, left = 56, right = 48, top = 16, bottom = 34;
  const double pw = W - left - right, ph = H - top - bottom;
  const size_t n = r.step_rows.size();
  double ymax = 0;
  for (const StepRow& s : r.step_rows)
    ymax = std::max(ymax, r.has_overlap ? s.comm_ms.value_or(0.0) : s.stall_ms);
  ymax = nice_ceil(ymax);
  std::ostringstream o;
  o << "<svg id=\"steps-chart\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << " " << H << "\" role=\"img\" aria-label=\"communication per step\">\n";
  for (int i = 0; i <= 4; ++i) {
    const double y = top + ph * (1 - i / 4.0);
    o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << px(y) << "\" y2=\""
      << px(y) << "\" stroke=\"#e6eaef\"/><text x=\"" << left - 6 << "\" y=\"" << px(y + 4)
      << "\" text-anchor=\"end\" class=\"ax\">" << fmt("%g", ymax * i / 4.0) << "</text>";
    if (r.has_overlap)
      o << "<text x=\"" << left + pw + 6 << "\" y=\"" << px(y + 4) << "\" class=\"ax\">"
        << fmt("%.2f", i / 4.0) << "</text>";
  }
  o << "<text x=\"14\" y=\"" << px(top + ph / 2) << "\" class=\"ax\" transform=\"rotate(-90 14 "
    << px(top + ph / 2) << ")\" text-anchor=\"middle\">ms (all ranks)</text>";
  if (r.has_overlap)
    o << "<text x=\"" << W - 8 << "\" y=\"" << px(top + ph / 2)
      << "\" class=\"ax\" text-anchor=\"middle\" transform=\"rotate(90 " << W - 8 << " "
      << px(top + ph / 2) << ")\">overlap ratio</text>";
  const double slot = pw / double(std::max<size_t>(n, 1));
  const double bw = std::max(1.0, slot * 0.7);
  auto yv = [&](double v) { return top + ph * (1 - v / ymax); };
  std::string line;
  const size_t label_every = std::max<size_t>(1, n / 12 + (n % 12 != 0 && n > 12));
  for (size_t i = 0; i < n; ++i) {
    const StepRow& s = r.step_rows[i];
    const double x = left + slot * double(i) + (slot - bw) / 2;
    if (r.has_overlap && s.comm_ms && s.exposed_comm_ms) {
      const double ex = *s.exposed_comm_ms, ov = std::max(0.0, *s.comm_ms - ex);
      o << "<rect x=\"" << px(x) << "\" y=\"" << px(yv(ex)) << "\" width=\"" << px(bw)
        << "\" height=\"" << px(top + ph - yv(ex)) << "\" fill=\"#d6604d\"><title>step " << s.step
        << ": exposed " << fmt("%.3f", ex) << " ms</title></rect>";
      o << "<rect x=\"" << px(x) << "\" y=\"" << px(yv(ex + ov)) << "\" width=\"" << px(bw)
        << "\" height=\"" << px(yv(ex) - yv(ex + ov)) << "\" fill=\"#4393c3\"><title>step "
        << s.step << ": overlapped " << fmt("%.3f", ov) << " ms</title></rect>";
      if (s.overlap_ratio)
        line += px(x + bw / 2) + "," + px(top + ph * (1 - *s.overlap_ratio)) + " ";
    } else if (!r.has_overlap) {
      o << "<rect x=\"" << px(x) << "\" y=\"" << px(yv(s.stall_ms)) << "\" width=\"" << px(bw)
        << "\" height=\"" << px(top + ph - yv(s.stall_ms)) << "\" fill=\"#d6604d\"><title>step "
        << s.step << ": stall " << fmt("%.3f", s.stall_ms) << " ms</title></rect>";
    }
    if (i % label_every == 0)
      o << "<text x=\"" << px(x + bw / 2) << "\" y=\"" << px(top + ph + 16)
        << "\" text-anchor=\"middle\" class=\"ax\">" << s.step << "</text>";
  }
  if (!line.empty())
    o << "<polyline points=\"" << line
      << "\" fill=\"none\" stroke=\"#1d2733\" stroke-width=\"1.8\"/>";
  o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << top + ph << "\" y2=\""
    << top + ph << "\" stroke=\"#5b6775\"/>";
  o << "<text x=\"" << px(left + pw / 2) << "\" y=\"" << H - 4
    << "\" text-anchor=\"middle\" class=\"ax\">step</text>";
  o << "</svg>\n";
  return o.str();
}

constexpr std::array<const char*, 8> kTagColors = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                   "#59a14f", "#edc948", "#b07aa1", "#9c755f"};

std::string memory_chart(const Report& r) {
  if (r.rank_rows.empty()) return "";
  std::vector<std::string> tags;
  for (const auto& [t, b] : r.rank_rows[0].peak_bytes) tags.push_back(t);
  double xmax = 0;
  for (const RankRow& k : r.rank_rows) {
    double s = 0;
    for (const auto& [t, b] : k.peak_bytes) s += double(b);
    xmax = std::max({xmax, s, double(k.peak_total_bytes)});
  }
  xmax = std::max(xmax, 1.0);
  const double W = 1130, left = 60, right = 20, bh = 18, gap = 8, top = 8;
  const double pw = W - left - right;
  const double H = top + double(r.rank_rows.size()) * (bh + gap) + 40;
  std::ostringstream o;
  o << "<svg id=\"memory-chart\" width=\"" << W << "\" height=\"" << px(H) << "\" viewBox=\"0 0 "
    << W << " " << px(H) << "\" role=\"img\" aria-label=\"peak memory by tag\">\n";
  for (size_t i = 0; i < r.rank_rows.size(); ++i) {
    const RankRow& k = r.rank_rows[i];
    const double y = top + double(i) * (bh + gap);
    o << "<text x=\"" << left - 8 << "\" y=\"" << px(y + bh / 2 + 4)
      << "\" text-anchor=\"end\" class=\"ax\">rank " << k.rank << "</text>";
    double x = left;
    for (size_t t = 0; t < k.peak_bytes.size(); ++t) {
      const double w = pw * double(k.peak_bytes[t].second) / xmax;
      if (w <= 0) continue;
      o << "<rect x=\"" << px(x) << "\" y=\"" << px(y) << "\" width=\"" << px(w) << "\" height=\""
        << bh << "\" fill=\"" << kTagColors[t % kTagColors.size()] << "\"><title>rank " << k.rank
        << " " << esc(k.peak_bytes[t].first) << ": " << format_bytes(double(k.peak_bytes[t].second))
        << "</title></rect>";
      x += w;
    }
    const double xt = left + pw * double(k.peak_total_bytes) / xmax;
    o << "<line x1=\"" << px(xt) << "\" x2=\"" << px(xt) << "\" y1=\"" << px(y - 3) << "\" y2=\""
      << px(y + bh + 3) << "\" stroke=\"#1d2733\" stroke-width=\"2\"><title>peak "
      << "total " << format_bytes(double(k.peak_total_bytes)) << "</title></line>";
  }
  const double ly = top + double(r.rank_rows.size()) * (bh + gap) + 10;
  double lx = left;
  for (size_t t = 0; t < tags.size(); ++t) {
    o << "<rect x=\"" << px(lx) << "\" y=\"" << px(ly) << "\" width=\"10\" height=\"10\" fill=\""
      << kTagColors[t % kTagColors.size()] << "\"/><text x=\"" << px(lx + 14) << "\" y=\""
      << px(ly + 9) << "\" class=\"ax\">" << esc(tags[t]) << "</text>";
    lx += 24 + 7.0 * double(tags[t].size());
  }
  o << "<line x1=\"" << px(lx) << "\" x2=\"" << px(lx) << "\" y1=\"" << px(ly - 1) << "\" y2=\""
    << px(ly + 11) << "\" stroke=\"#1d2733\" stroke-width=\"2\"/><text x=\"" << px(lx + 6)
    << "\" y=\"" << px(ly + 9) << "\" class=\"ax\">peak total (all tags at once)</text>";
  o << "</svg>\n";
  return o.str();
}

constexpr const char* kCss = R"css(
*{box-sizing:border-box}
body{margin:0;background:#f3f5f8;color:#1d2733;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,"Liberation Sans","DejaVu Sans",sans-serif}
header{background:#1d2733;color:#fff;padding:16px 32px}
header h1{margin:0;font-size:20px;font-weight:600;letter-spacing:.2px}
header .meta{color:#b8c4d2;font-size:13px;margin-top:2px}
main{max-width:1220px;margin:0 auto;padding:8px 24px 40px}
section{background:#fff;border:1px solid #dde3ea;border-radius:8px;padding:14px 20px 16px;margin:14px 0}
h2{font-size:16px;margin:0 0 2px}
h3{font-size:14px;margin:0 0 2px}
p.note{color:#5b6775;margin:0 0 8px;font-size:12.5px}
.cards{display:grid;grid-template-columns:repeat(5,1fr);gap:12px;margin:14px 0}
.card{background:#fff;border:1px solid #dde3ea;border-radius:8px;padding:10px 14px}
.card .k{color:#5b6775;font-size:12px;text-transform:uppercase;letter-spacing:.4px}
.card .v{font-size:21px;font-weight:600;margin-top:2px}
.card .s{color:#5b6775;font-size:12px}
.grid2{display:grid;grid-template-columns:1fr 1fr;gap:14px 28px}
.hm{min-width:0}
.empty{border:1px dashed #c3ccd6;border-radius:6px;color:#5b6775;padding:24px;font-size:13px;background:#fafbfc}
svg text{font-family:inherit}
svg .ax{font-size:11px;fill:#5b6775}
svg .ax2{font-size:11px;fill:#5b6775;font-style:italic}
svg .cv{font-size:10.5px;font-variant-numeric:tabular-nums}
.scroll{max-height:460px;overflow:auto;border:1px solid #eef1f4;border-radius:6px}
table{border-collapse:collapse;width:100%;font-size:12px;font-variant-numeric:tabular-nums}
th,td{padding:3px 7px;text-align:right;border-bottom:1px solid #eef1f4;white-space:nowrap}
table.wide th,table.wide td{padding:3px 5px;font-size:11.5px}
th{background:#f7f9fb;font-weight:600;color:#3b4754;position:sticky;top:0}
th:first-child,td:first-child{text-align:left}
tr.total td{font-weight:600;border-top:1px solid #c3ccd6}
td.neg{color:#2166ac} td.pos{color:#b2182b}
.legend{font-size:12px;color:#5b6775;margin:4px 0 6px}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin:0 4px 0 12px;vertical-align:-1px}
code{background:#eef1f4;border-radius:3px;padding:0 3px;font-size:12px}
)css";

std::string td(const std::string& s, const std::string& cls = "") {
  return cls.empty() ? "<td>" + s + "</td>" : "<td class=\"" + cls + "\">" + s + "</td>";
}
std::string th_row(const std::vector<std::string>& h) {
  std::string o = "<tr>";
  for (const auto& x : h) o += "<th>" + x + "</th>";
  return o + "</tr>";
}

std::string card(const std::string& k, const std::string& v, const std::string& s) {
  return "<div class=\"card\"><div class=\"k\">" + esc(k) + "</div><div class=\"v\">" + v +
         "</div><div class=\"s\">" + s + "</div></div>";
}

// The document head and the page header: source, kind, step range, ranks, layers.
void write_head(std::ostream& o, const Report& r) {
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    << "<title>moezero report: " << esc(r.source) << "</title><style>" << kCss
    << "</style></head><body>\n";
  o << "<header><h1>moezero report</h1><div class=\"meta\">" << esc(r.source) << " &middot; "
    << r.kind << " &middot; steps " << r.first_step << "&ndash;" << r.last_step << " (" << r.steps
    << ") &middot; " << r.ranks << " ranks &middot; " << r.layers.size()
    << " MoE layers</div></header>\n<main>\n";
}

// Summary cards: tokens, expert bytes, overlap, stall, peak memory.
void write_summary_cards(std::ostream& o, const Report& r) {
  int64_t tokens = 0, gathered = 0, expert_gathers = 0;
  for (const ExpertRow& x : r.experts) {
    tokens += x.tokens;
    gathered += x.gathered_bytes;
    expert_gathers += x.gathers;
  }
  int64_t peak = 0;
  for (const RankRow& k : r.rank_rows) {
    peak = std::max(peak, k.peak_total_bytes);
  }
  o << "<div class=\"cards\">"
    << card("Tokens routed", num(tokens), "expert assignments, all MoE layers")
    << card("Expert bytes gathered", r.has_expert_counters ? format_bytes(double(gathered)) : "n/a",
            r.has_expert_counters ? num(expert_gathers) + " gathers" : "needs per-expert counters")
    << card("Overlap ratio", opt(r.total_overlap_ratio, "%.3f"),
            r.has_overlap ? "1 &minus; exposed / comm, whole file" : "needs comm_ms in the file")
    << card("Stall", fmt("%.1f ms", r.total_stall_ms), "compute waiting, all ranks")
    << card("Peak memory", format_bytes(double(peak)), "max over ranks and steps") << "</div>\n";
}

// The prediction quality tables: Brier score per layer, calibration over all layers.
void write_prediction_tables(std::ostream& o, const Report& r) {
  o << "<div class=\"grid2\"><div><h3 style=\"margin-top:12px\">Brier score per layer</h3>"
       "<table id=\"brier-table\">"
    << th_row({"layer", "experts", "pairs", "Brier score"});
  for (const LayerRow& l : r.layers)
    o << "<tr>" << td("L" + std::to_string(l.layer)) << td(num(l.experts)) << td(num(l.brier_pairs))
      << td(opt(l.brier, "%.4f")) << "</tr>";
  o << "</table></div><div><h3 style=\"margin-top:12px\">Calibration, all layers</h3>"
       "<table id=\"calibration-table\">"
    << th_row({"p bucket", "pairs", "mean p", "observed rate"});
  for (const CalibrationRow& c : r.calibration) {
    if (c.layer != -1) continue;
    const bool last = c.hi >= 1.0;
    const std::string range =
        fmt("%.1f", c.lo) + (last ? " &ndash; " : " &ndash; &lt;") + fmt("%.1f", c.hi);
    const double gap = c.observed_rate ? *c.observed_rate - c.mean_predicted : 0.0;
    o << "<tr>" << td(range) << td(num(c.pairs)) << td(fmt("%.2f", c.mean_predicted))
      << td(opt(c.observed_rate, "%.3f"), gap < -0.1  ? "neg"
                                          : gap > 0.1 ? "pos"
                                                      : "")
      << "</tr>";
  }
  o << "</table><p class=\"note\">mean p is the bucket centre; well calibrated: observed rate "
       "near it (red: more often active than predicted, blue: less).</p></div></div>";
}

// Brier heatmap: MoE layers x steps (NaN where no plan before routing covered the step).
Heatmap brier_heatmap(const Report& r) {
  Heatmap h;
  h.id = "heatmap-brier";
  h.title = "Brier score per layer and step";
  h.col_name = "step";
  h.value_fmt = "%.3f";
  h.caption = "mean (p \xe2\x88\x92 active)\xc2\xb2; 0 perfect, 0.25 = always p 0.5";
  const size_t nl = r.layers.size(), ns = nl ? r.brier_cells.size() / nl : 0;
  double max_b = 0;
  for (size_t l = 0; l < nl; ++l) {
    h.rows.push_back("L" + std::to_string(r.layers[l].layer));
    h.values.emplace_back(ns, std::nan(""));
  }
  for (size_t s = 0; s < ns; ++s) {
    h.cols.push_back(std::to_string(r.brier_cells[s * nl].step));
    for (size_t l = 0; l < nl; ++l) {
      const BrierCell& c = r.brier_cells[s * nl + l];
      if (!c.brier) continue;
      h.values[l][s] = *c.brier;
      max_b = std::max(max_b, *c.brier);
    }
  }
  h.hi = nice_ceil(std::max(max_b, 0.05));
  return h;
}

// Balance heatmap: MoE layers x steps of max/mean (cv = false) or CV of the tokens per expert.
Heatmap balance_heatmap(const Report& r, bool cv) {
  Heatmap h;
  h.id = cv ? "heatmap-balance-cv" : "heatmap-balance-max";
  h.title = cv ? "Load CV per layer and step" : "Load max / mean per layer and step";
  h.col_name = "step";
  h.value_fmt = "%.3f";
  h.caption = cv ? "std / mean of tokens per expert; 0 = balanced"
                 : "max / mean of tokens per expert; 1 = balanced";
  const size_t nl = r.layers.size(), ns = nl ? r.balance_cells.size() / nl : 0;
  double lo = cv ? 0.0 : 1.0, hi = lo;
  for (size_t l = 0; l < nl; ++l) {
    h.rows.push_back("L" + std::to_string(r.layers[l].layer));
    h.values.emplace_back(ns, std::nan(""));
  }
  for (size_t s = 0; s < ns; ++s) {
    h.cols.push_back(std::to_string(r.balance_cells[s * nl].step));
    for (size_t l = 0; l < nl; ++l) {
      const BalanceCell& c = r.balance_cells[s * nl + l];
      const std::optional<double>& v = cv ? c.cv : c.max_over_mean;
      if (!v) continue;
      h.values[l][s] = *v;
      hi = std::max(hi, *v);
    }
  }
  h.lo = lo;
  h.hi = lo + nice_ceil(std::max(hi - lo, 0.05));
  return h;
}

// Expert activity heatmaps (layers x experts), then the prediction quality of the plans made
// before routing: Brier heatmap (layers x steps) and tables.
void write_expert_activity(std::ostream& o, const Report& r) {
  Heatmap share, active;
  double max_share = 0;
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const std::string label = "L" + std::to_string(r.layers[l].layer);
    std::vector<double> s, a;
    for (size_t x = 0; x < size_t(r.layers[l].experts); ++x) {
      const ExpertRow& row = r.expert(l, x);
      s.push_back(row.token_share);
      a.push_back(row.active_fraction);
      max_share = std::max(max_share, row.token_share);
    }
    for (Heatmap* h : {&share, &active}) h->rows.push_back(label);
    share.values.push_back(s);
    active.values.push_back(a);
  }
  share.id = "heatmap-share";
  share.title = "Token share";
  share.hi = nice_ceil(max_share);
  share.caption = "share of the layer's routed tokens";
  active.id = "heatmap-active";
  active.title = "Observed: fraction of steps active";
  active.caption = "steps with tokens > 0 / steps";
  o << "<section><h2>Expert activity (layers &times; experts)</h2><p class=\"note\">Rows are "
       "MoE layers (model layer index), columns experts. Token share sums to 1 over a layer's "
       "experts (uniform routing: 1/E = "
    << fmt("%.3f", 1.0 / double(std::max<int64_t>(r.layers[0].experts, 1)))
    << "). Hover a cell for its value.</p>\n<div class=\"grid2\">\n";
  o << panel(share, "tokens[l][e] / &sum;<sub>e</sub> tokens[l][e], summed over the steps");
  o << panel(active, "fraction of the steps in which the expert received tokens");
  o << "</div></section>\n";
  if (r.has_balance) {
    o << "<section><h2>Load balance per layer over steps</h2><p class=\"note\">Rows are MoE "
         "layers, columns steps: the metrics' load_max_over_mean and load_cv (tokens per expert "
         "in the step, after capacity); grey: the step routed no token to the layer.</p>\n"
         "<div class=\"grid2\">\n";
    o << panel(balance_heatmap(r, false), "max<sub>e</sub> tokens / mean<sub>e</sub> tokens");
    o << panel(balance_heatmap(r, true), "std<sub>e</sub> tokens / mean<sub>e</sub> tokens");
    o << "</div></section>\n";
  }
  o << "<section><h2>Prediction quality (plans before routing)</h2>";
  if (!r.has_prediction_quality) {
    o << placeholder("Brier score per layer and step",
                     "This file has no brier_sum / calibration counts (moe_layers): they are "
                     "recorded by newer trainers.")
      << "</section>\n";
    return;
  }
  o << "<p class=\"note\">For every micro-batch that had a plan before routing, each expert's "
       "probability p the plan used against whether it turned out active (y). Brier score = "
       "mean (p &minus; y)<sup>2</sup>; grey: no plan before routing in that step.</p>\n";
  o << "<div class=\"hm\">" << heatmap_svg(brier_heatmap(r)) << "</div>\n";
  write_prediction_tables(o, r);
  o << "</section>\n";
}

// The loss curve: training loss per step and validation loss where evaluated (two polylines
// on one axis). Empty when no step has a loss.
std::string loss_chart(const Report& r) {
  const double W = 1130, H = 220, left = 56, right = 48, top = 16, bottom = 34;
  const double pw = W - left - right, ph = H - top - bottom;
  double lo = 1e300, hi = -1e300;
  for (const StepRow& s : r.step_rows)
    for (const std::optional<double>& v : {s.loss, s.val_loss})
      if (v && std::isfinite(*v)) lo = std::min(lo, *v), hi = std::max(hi, *v);
  if (lo > hi) return "";
  if (hi - lo < 1e-9) hi = lo + 1.0;
  const int64_t first = r.step_rows.front().step, last = r.step_rows.back().step;
  auto xv = [&](int64_t step) {
    return left + pw * double(step - first) / double(std::max<int64_t>(1, last - first));
  };
  auto yv = [&](double v) { return top + ph * (1 - (v - lo) / (hi - lo)); };
  std::ostringstream o;
  o << "<svg id=\"loss-chart\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 " << W
    << " " << H << "\" role=\"img\" aria-label=\"training and validation loss\">\n";
  for (int i = 0; i <= 4; ++i) {
    const double y = top + ph * (1 - i / 4.0);
    o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << px(y) << "\" y2=\""
      << px(y) << "\" stroke=\"#e6eaef\"/><text x=\"" << left - 6 << "\" y=\"" << px(y + 4)
      << "\" text-anchor=\"end\" class=\"ax\">" << fmt("%.3f", lo + (hi - lo) * i / 4.0)
      << "</text>";
  }
  std::string train_line, val_line;
  for (const StepRow& s : r.step_rows) {
    if (s.loss && std::isfinite(*s.loss))
      train_line += px(xv(s.step)) + "," + px(yv(*s.loss)) + " ";
    if (s.val_loss && std::isfinite(*s.val_loss)) {
      val_line += px(xv(s.step)) + "," + px(yv(*s.val_loss)) + " ";
      o << "<circle cx=\"" << px(xv(s.step)) << "\" cy=\"" << px(yv(*s.val_loss))
        << "\" r=\"3\" fill=\"#d6604d\"><title>step " << s.step << ": val loss "
        << fmt("%.4f", *s.val_loss) << "</title></circle>";
    }
  }
  o << "<polyline class=\"train-loss\" points=\"" << train_line
    << "\" fill=\"none\" stroke=\"#4393c3\" stroke-width=\"1.5\"/>";
  if (!val_line.empty())
    o << "<polyline class=\"val-loss\" points=\"" << val_line
      << "\" fill=\"none\" stroke=\"#d6604d\" stroke-width=\"1.8\"/>";
  o << "<text x=\"" << px(left) << "\" y=\"" << H - 4 << "\" class=\"ax\">step " << first
    << "</text><text x=\"" << px(left + pw) << "\" y=\"" << H - 4
    << "\" text-anchor=\"end\" class=\"ax\">step " << last << "</text>";
  o << "</svg>\n";
  return o.str();
}

void write_losses(std::ostream& o, const Report& r) {
  const std::string chart = r.step_rows.empty() ? "" : loss_chart(r);
  if (chart.empty()) return;
  o << "<section><h2>Loss</h2><div class=\"legend\"><span class=\"sw\" "
       "style=\"background:#4393c3\"></span>training loss<span class=\"sw\" "
       "style=\"background:#d6604d\"></span>validation loss (train.eval_every)</div>"
    << chart << "</section>\n";
}

// Communication per step: chart and table.
void write_steps(std::ostream& o, const Report& r) {
  o << "<section><h2>Communication per step</h2><p class=\"note\">"
    << (r.has_overlap
            ? "Time in collectives summed over ranks: <b>exposed</b> (compute waited for it) "
              "and <b>overlapped</b> (hidden behind compute) = comm &minus; exposed. The line is "
              "the overlap ratio 1 &minus; exposed / comm (right axis)."
            : "This file has no comm_ms / exposed_comm_ms: the bars show the compute stream's "
              "stall time summed over ranks.")
    << "</p>";
  if (r.has_overlap)
    o << "<div class=\"legend\"><span class=\"sw\" style=\"background:#d6604d\"></span>exposed"
      << "<span class=\"sw\" style=\"background:#4393c3\"></span>overlapped"
      << "<span class=\"sw\" style=\"background:#1d2733;height:2px;vertical-align:3px\"></span>"
         "overlap ratio</div>";
  o << steps_chart(r);
  o << "<div class=\"scroll\" style=\"max-height:300px;margin-top:8px\"><table>"
    << th_row({"step", "loss", "val loss", "comm ms", "exposed ms", "overlapped ms",
               "overlap ratio", "stall ms"});
  for (const StepRow& s : r.step_rows)
    o << "<tr>" << td(std::to_string(s.step)) << td(opt(s.loss, "%.4f"))
      << td(opt(s.val_loss, "%.4f")) << td(opt(s.comm_ms, "%.3f"))
      << td(opt(s.exposed_comm_ms, "%.3f")) << td(opt(s.overlapped_ms, "%.3f"))
      << td(opt(s.overlap_ratio, "%.3f")) << td(fmt("%.3f", s.stall_ms)) << "</tr>";
  o << "<tr class=\"total\">" << td("all") << td("") << td("") << td(opt(r.total_comm_ms, "%.3f"))
    << td(opt(r.total_exposed_comm_ms, "%.3f"))
    << td(r.total_comm_ms ? fmt("%.3f", *r.total_comm_ms - *r.total_exposed_comm_ms) : "n/a")
    << td(opt(r.total_overlap_ratio, "%.3f")) << td(fmt("%.3f", r.total_stall_ms))
    << "</tr></table></div></section>\n";
}

// Per layer and expert: the counters table.
void write_expert_table(std::ostream& o, const Report& r) {
  o << "<section><h2>Per layer and expert</h2><p class=\"note\">Sums over the " << r.steps
    << " steps and all ranks. pf = prefetch; waste = bytes prefetched but never used; a2a "
       "in/out = tokens the expert's owner received from / sent to other ranks."
    << (r.has_expert_counters ? "" : " This file has no per-expert counters: n/a.")
    << "</p><div class=\"scroll\"><table class=\"wide\">"
    << th_row({"layer", "expert", "tokens", "share", "active", "mean p", "gathers", "gathered",
               "gather ms", "cache hit", "cache miss", "pf hit", "pf miss", "pf waste", "a2a in",
               "a2a out"});
  const bool c = r.has_expert_counters;
  auto n = [&](int64_t v) { return c ? num(v) : std::string("n/a"); };
  for (const ExpertRow& x : r.experts) {
    o << "<tr>" << td("L" + std::to_string(x.layer)) << td(std::to_string(x.expert))
      << td(num(x.tokens)) << td(fmt("%.4f", x.token_share)) << td(fmt("%.3f", x.active_fraction))
      << td(opt(x.predicted, "%.3f")) << td(n(x.gathers))
      << td(c ? format_bytes(double(x.gathered_bytes)) : "n/a")
      << td(c ? fmt("%.3f", x.gather_ms) : "n/a") << td(n(x.cache_hits)) << td(n(x.cache_misses))
      << td(n(x.prefetch_hits)) << td(n(x.prefetch_misses))
      << td(c ? format_bytes(double(x.wasted_bytes)) : "n/a") << td(n(x.a2a_tokens_in))
      << td(n(x.a2a_tokens_out)) << "</tr>";
  }
  o << "</table></div></section>\n";
}

// Comms summary: collective spans by op/group/size, then bytes and counters per rank.
void write_comms(std::ostream& o, const Report& r) {
  o << "<section><h2>Comms summary</h2>";
  if (r.has_collectives) {
    o << "<p class=\"note\">Collective spans of the trace grouped by op, group kind and message "
         "size (powers of two). algbw = bytes / time; busbw = algbw &times; the nccl-tests "
         "factor of the op on n ranks ((n&minus;1)/n for all_gather, reduce_scatter, "
         "all_to_all; 2(n&minus;1)/n for all_reduce; 1 for broadcast). GB/s = 10<sup>9</sup> "
         "B/s."
      << (r.has_group_size ? "" : " Some spans lack args.group_size: busbw n/a for their rows.")
      << "</p><div class=\"scroll\"><table>"
      << th_row({"op", "group", "message size", "count", "total ms", "avg ms", "algbw GB/s",
                 "busbw GB/s"});
    for (const CommRow& c : r.comms)
      o << "<tr>" << td(esc(c.op)) << td(esc(c.group))
        << td(c.bucket_lo_bytes == 0 ? std::string("0 B")
                                     : format_bytes(double(c.bucket_lo_bytes)) + " &ndash; " +
                                           format_bytes(double(c.bucket_hi_bytes)))
        << td(num(c.count)) << td(fmt("%.3f", c.total_ms)) << td(fmt("%.4f", c.avg_ms))
        << td(opt(c.algbw_gbps, "%.3f")) << td(opt(c.busbw_gbps, "%.3f")) << "</tr>";
    o << "</table></div>";
  } else {
    o << "<p class=\"note\">"
      << (r.kind == "trace" ? "The trace has no collective spans."
                            : "Latencies and bandwidths need a trace: run with "
                              "<code>profile.trace</code> (or <code>moezero train --trace "
                              "FILE</code>) and report the trace. Byte counters per rank:")
      << "</p>";
  }
  o << "<h3 style=\"margin-top:10px\">Bytes and counters per rank</h3><p class=\"note\">Sums "
       "over the steps.</p><div class=\"scroll\"><table>"
    << th_row({"rank", "gathered", "dense", "expert", "reduce-scattered", "all-reduced", "a2a",
               "pf hit", "pf miss", "pf waste", "cache hit", "cache miss", "evictions",
               "stall ms"});
  for (const RankRow& k : r.rank_rows)
    o << "<tr>" << td(std::to_string(k.rank)) << td(format_bytes(double(k.gathered_bytes)))
      << td(format_bytes(double(k.gathered_dense_bytes)))
      << td(format_bytes(double(k.gathered_expert_bytes)))
      << td(format_bytes(double(k.reduce_scattered_bytes)))
      << td(format_bytes(double(k.all_reduced_bytes))) << td(format_bytes(double(k.a2a_bytes)))
      << td(num(k.prefetch_hits)) << td(num(k.prefetch_misses))
      << td(k.has("wasted_bytes") ? format_bytes(double(k.wasted_bytes)) : "n/a")
      << td(num(k.cache_hits)) << td(num(k.cache_misses)) << td(num(k.cache_evictions))
      << td(fmt("%.3f", k.stall_ms)) << "</tr>";
  o << "</table></div></section>\n";
}

// Peak memory per rank: chart and table by tag.
void write_memory(std::ostream& o, const Report& r) {
  o << "<section><h2>Peak memory per rank</h2><p class=\"note\">Each tag's own peak over the "
       "steps (tags need not peak at the same moment, so the stack can exceed the marked peak "
       "total).</p>"
    << memory_chart(r) << "<div class=\"scroll\"><table>";
  std::vector<std::string> head = {"rank"};
  if (!r.rank_rows.empty())
    for (const auto& [t, b] : r.rank_rows[0].peak_bytes) head.push_back(esc(t));
  head.push_back("peak total");
  o << th_row(head);
  for (const RankRow& k : r.rank_rows) {
    o << "<tr>" << td(std::to_string(k.rank));
    for (size_t i = 1; i + 1 < head.size(); ++i) {
      auto it = std::find_if(k.peak_bytes.begin(), k.peak_bytes.end(),
                             [&](const auto& p) { return esc(p.first) == head[i]; });
      o << td(it == k.peak_bytes.end() ? "&ndash;" : format_bytes(double(it->second)));
    }
    o << td(format_bytes(double(k.peak_total_bytes))) << "</tr>";
  }
  o << "</table></div></section>\n";
}

}  // namespace

std::string html_escape(const std::string& s) { return esc(s); }
const char* report_css() { return kCss; }

std::string sequential_color(double t) { return interpolate(kViridis, t); }
std::string diverging_color(double t) {
  return interpolate(kBlueRed, (std::clamp(std::isfinite(t) ? t : 0.0, -1.0, 1.0) + 1.0) / 2.0);
}

std::string render_html(const Report& r) {
  std::ostringstream o;
  write_head(o, r);
  write_summary_cards(o, r);
  if (!r.layers.empty()) write_expert_activity(o, r);
  write_losses(o, r);
  write_steps(o, r);
  if (!r.experts.empty()) write_expert_table(o, r);
  write_comms(o, r);
  write_memory(o, r);
  o << "</main></body></html>\n";
  return o.str();
}

}  // namespace moezero::report
