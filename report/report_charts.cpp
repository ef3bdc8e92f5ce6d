// report/report_charts.cpp — the SVG charts of the run report (report_charts.h).
#include "report/report_charts.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>
#include <vector>

#include "report/html_format.h"
#include "report/report_render.h"

namespace moezero::report {

using html::esc;
using html::fmt;
using html::nice_ceil;
using html::num;
using html::px;

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

}  // namespace moezero::report
