// report/routing_html.cpp — the HTML page of a routing trace (routing_report.h): the per-layer
// balance table and heatmaps drawn from the trace's own counts. Inline CSS and SVG only, as the
// run report (report_html.cpp, whose heatmap it shares through html_parts.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "report/html_format.h"
#include "report/html_parts.h"
#include "report/routing_report.h"

namespace moezero::report {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
// At most this many step columns (layers x steps) or step rows (steps x experts): longer runs
// are drawn in bins of consecutive steps.
constexpr size_t kMaxStepColumns = 80, kMaxStepRows = 40;

using html::fmt;
std::string opt3(const std::optional<double>& v) { return html::opt(v, "%.3f"); }

// Consecutive steps [first, last] of bin b, when `steps` (sorted) are cut into <= max_bins.
struct StepBins {
  std::vector<int64_t> steps;
  size_t per_bin = 1;
  size_t count() const { return (steps.size() + per_bin - 1) / per_bin; }
  size_t bin_of(size_t i) const { return i / per_bin; }
  std::string label(size_t b) const {
    const int64_t a = steps[b * per_bin], z = steps[std::min(steps.size(), (b + 1) * per_bin) - 1];
    return a == z ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(z);
  }
};

StepBins step_bins(const RoutingReport& r, size_t max_bins) {
  std::map<int64_t, bool> all;
  for (const RoutingLayer& L : r.layers)
    for (const RoutingStepBalance& b : L.steps) all[b.step] = true;
  StepBins bins;
  for (const auto& [s, _] : all) bins.steps.push_back(s);
  bins.per_bin = std::max<size_t>(1, (bins.steps.size() + max_bins - 1) / max_bins);
  return bins;
}

using html::nice_ceil;  // the smallest of 1, 2, 2.5, 5 x 10^n that is >= v (v > 0), else 1

double max_finite(const std::vector<std::vector<double>>& v) {
  double m = 0.0;
  for (const auto& row : v)
    for (double x : row)
      if (std::isfinite(x)) m = std::max(m, x);
  return m;
}

std::string layer_label(const RoutingLayer& L) { return "L" + std::to_string(L.layer); }

// Layers x experts: each expert's share of the layer's assignments over the whole trace (%).
Heatmap share_heatmap(const RoutingReport& r) {
  Heatmap h;
  h.id = "heatmap-routing-share";
  h.title = "Token share per expert";
  h.caption = "% of the layer's token assignments, all steps";
  for (const RoutingLayer& L : r.layers) {
    h.rows.push_back(layer_label(L));
    std::vector<double> row;
    for (double s : L.token_share) row.push_back(L.tokens > 0 ? 100.0 * s : kNaN);
    h.values.push_back(std::move(row));
  }
  h.hi = nice_ceil(max_finite(h.values));
  h.value_fmt = "%.1f";
  return h;
}

// Layers x steps (binned: the mean over the bin's steps) of max/mean (cv = false) or CV.
Heatmap balance_heatmap(const RoutingReport& r, const StepBins& bins, bool cv) {
  Heatmap h;
  h.id = cv ? "heatmap-routing-cv" : "heatmap-routing-max-over-mean";
  h.title = cv ? "Coefficient of variation of tokens per expert" : "Max / mean tokens per expert";
  h.caption = cv ? "CV per step (0: balanced)" : "max/mean per step (1: balanced)";
  h.col_name = "step";
  for (size_t b = 0; b < bins.count(); ++b) h.cols.push_back(bins.label(b));
  for (const RoutingLayer& L : r.layers) {
    h.rows.push_back(layer_label(L));
    std::vector<double> sum(bins.count(), 0.0), n(bins.count(), 0.0);
    for (const RoutingStepBalance& s : L.steps) {
      const auto& v = cv ? s.cv : s.max_over_mean;
      if (!v) continue;
      const size_t i = static_cast<size_t>(
          std::lower_bound(bins.steps.begin(), bins.steps.end(), s.step) - bins.steps.begin());
      sum[bins.bin_of(i)] += *v;
      n[bins.bin_of(i)] += 1;
    }
    std::vector<double> row;
    for (size_t b = 0; b < sum.size(); ++b) row.push_back(n[b] > 0 ? sum[b] / n[b] : kNaN);
    h.values.push_back(std::move(row));
  }
  h.lo = cv ? 0.0 : 1.0;
  h.hi = std::max(h.lo + 0.5, nice_ceil(max_finite(h.values)));
  return h;
}

// Steps (binned: loads summed) x experts of one layer: each expert's load / the mean load of
// the row (1: its fair share; 0: idle).
Heatmap load_heatmap(const RoutingLayer& L, const StepBins& bins) {
  Heatmap h;
  h.id = "heatmap-routing-load-L" + std::to_string(L.layer);
  h.title = "Tokens per expert over steps, layer " + std::to_string(L.layer);
  h.caption = "tokens / mean tokens per expert (1: fair share)";
  h.row_name = "step";
  const size_t E = L.token_share.size();
  std::vector<std::vector<double>> load(bins.count(), std::vector<double>(E, 0.0));
  for (const RoutingStepBalance& s : L.steps) {
    const size_t i = static_cast<size_t>(
        std::lower_bound(bins.steps.begin(), bins.steps.end(), s.step) - bins.steps.begin());
    for (size_t e = 0; e < E && e < s.load.size(); ++e)
      load[bins.bin_of(i)][e] += static_cast<double>(s.load[e]);
  }
  for (size_t b = 0; b < load.size(); ++b) {
    h.rows.push_back(bins.label(b));
    double total = 0.0;
    for (double x : load[b]) total += x;
    const double mean = E > 0 ? total / static_cast<double>(E) : 0.0;
    std::vector<double> row;
    for (double x : load[b]) row.push_back(mean > 0 ? x / mean : kNaN);
    h.values.push_back(std::move(row));
  }
  h.hi = std::max(2.0, nice_ceil(max_finite(h.values)));
  return h;
}

void write_balance_table(std::ostream& o, const RoutingReport& r) {
  o << "<section><h2>Load balance per MoE layer</h2><p class=\"note\">Tokens per expert of each "
       "step (all micro-batches and ranks): max/mean and coefficient of variation (std/mean), "
       "their mean and maximum over the steps.</p>\n<table id=\"routing-balance-table\"><tr>"
       "<th>layer</th><th>tokens</th><th>max/mean (mean)</th><th>max/mean (max)</th>"
       "<th>CV (mean)</th><th>CV (max)</th></tr>\n";
  for (const RoutingLayer& L : r.layers)
    o << "<tr><td>" << L.layer << "</td><td>" << L.tokens << "</td><td>"
      << opt3(L.max_over_mean_mean) << "</td><td>" << opt3(L.max_over_mean_max) << "</td><td>"
      << opt3(L.cv_mean) << "</td><td>" << opt3(L.cv_max) << "</td></tr>\n";
  o << "</table></section>\n";
}

}  // namespace

std::string render_routing_html(const RoutingReport& r) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    << "<title>moezero routing trace: " << html_escape(r.source) << "</title><style>"
    << report_css() << "</style></head><body>\n";
  o << "<header><h1>moezero routing trace</h1><div class=\"meta\">" << html_escape(r.source)
    << " &middot; steps " << r.first_step << "&ndash;" << r.last_step << " (" << r.steps
    << ") &middot; world " << r.world_size << ", EP " << r.ep_size << " &middot; " << r.num_experts
    << " experts, top-" << r.top_k << " &middot; " << r.layers.size()
    << " MoE layers</div></header>\n<main>\n";
  write_balance_table(o, r);
  if (r.layers.empty() || r.steps == 0) {
    o << "<section><div class=\"empty\">The trace records no routed step.</div></section>\n";
    o << "</main></body></html>\n";
    return o.str();
  }
  const StepBins columns = step_bins(r, kMaxStepColumns), rows = step_bins(r, kMaxStepRows);
  const std::string binned = columns.per_bin > 1
                                 ? " Columns are bins of " + std::to_string(columns.per_bin) +
                                       " consecutive steps (their mean)."
                                 : "";
  o << "<section><h2>Balance over steps</h2><div class=\"grid2\">"
    << heatmap_panel(
           balance_heatmap(r, columns, false),
           "max<sub>e</sub> tokens / mean<sub>e</sub> tokens per step; grey: no token routed." +
               binned)
    << heatmap_panel(balance_heatmap(r, columns, true),
                     "std<sub>e</sub> tokens / mean<sub>e</sub> tokens per step." + binned)
    << "</div></section>\n";
  o << "<section><h2>Expert share</h2>"
    << heatmap_panel(share_heatmap(r),
                     "Each expert's share of its layer's assignments over the trace.")
    << "</section>\n";
  o << "<section><h2>Tokens per expert over steps</h2><div class=\"grid2\">";
  const std::string row_note =
      rows.per_bin > 1 ? " Rows are bins of " + std::to_string(rows.per_bin) + " steps (summed)."
                       : "";
  for (const RoutingLayer& L : r.layers)
    o << heatmap_panel(load_heatmap(L, rows),
                       "Each expert's tokens relative to the mean expert of the step." + row_note);
  o << "</div></section>\n</main></body></html>\n";
  return o.str();
}

}  // namespace moezero::report
