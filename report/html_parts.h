// report/html_parts.h — (internal to report/) the pieces of the HTML pages that the run report
// (report_html.cpp) and the routing-trace report (routing_html.cpp) share: the heatmap, HTML
// escaping and the page's style sheet.
#pragma once

#include <string>
#include <vector>

namespace moezero::report {

struct Heatmap {
  std::string id, title, caption;
  std::vector<std::string> rows;            // row labels ("L1")
  std::vector<std::string> cols;            // column labels; empty: 0, 1, ...
  std::string row_name = "layer";           // in the cells' tooltips
  std::string col_name = "expert";          // in the cells' tooltips
  std::vector<std::vector<double>> values;  // (rows, cols); NaN: no value (grey, "n/a")
  bool diverging = false;
  double lo = 0.0, hi = 1.0;  // scale; diverging: [-hi, hi]
  const char* value_fmt = "%.2f";
  const char* legend_fmt = "%g";
};

// <svg id="{id}" class="heatmap"> with one <rect class="cell" fill="#rrggbb"> per value, its
// row and column labels, and a colour-bar legend.
std::string heatmap_svg(const Heatmap& h);
// A titled panel: the heatmap under its title and a note (HTML, not escaped).
std::string heatmap_panel(const Heatmap& h, const std::string& note);

std::string html_escape(const std::string& s);
const char* report_css();  // the inline style sheet of every report page

}  // namespace moezero::report
