// report/html_parts.cpp — the shared pieces of the HTML pages (html_parts.h): colour scales,
// the heatmap SVG and the style sheet.
#include "report/html_parts.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "report/html_format.h"
#include "report/report_render.h"

namespace moezero::report {

using html::esc;
using html::fmt;
using html::px;

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

std::string heatmap_panel(const Heatmap& h, const std::string& note) {
  return "<div class=\"hm\"><h3>" + esc(h.title) + "</h3><p class=\"note\">" + note + "</p>" +
         heatmap_svg(h) + "</div>\n";
}

std::string html_escape(const std::string& s) { return esc(s); }
const char* report_css() { return kCss; }

std::string sequential_color(double t) { return interpolate(kViridis, t); }
std::string diverging_color(double t) {
  return interpolate(kBlueRed, (std::clamp(std::isfinite(t) ? t : 0.0, -1.0, 1.0) + 1.0) / 2.0);
}

}  // namespace moezero::report
