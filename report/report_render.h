// report/report_render.h — turns a computed Report into plain-text tables (stdout) and into one
// self-contained HTML page (inline CSS and SVG; no script, no network, no external font).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "report/report.h"

namespace moezero::report {

// Plain-text tables, one section per part of the report.
void write_text(std::ostream& os, const Report& r);

// The HTML page. Heatmaps are <svg id="heatmap-share|heatmap-active"> (layers x experts) and
// <svg id="heatmap-brier"> (layers x steps) whose cells are <rect class="cell" fill="#rrggbb">;
// the calibration table is <table id="calibration-table">; the per-step chart is
// <svg id="steps-chart">.
std::string render_html(const Report& r);

// Colour scales of the heatmaps, as "#rrggbb".
// Sequential (viridis): t in [0, 1] (clamped).
std::string sequential_color(double t);
// Diverging (blue - white - red): t in [-1, 1] (clamped); 0 is white.
std::string diverging_color(double t);

// "1.50 MiB", "512 B": binary units, three significant digits.
std::string format_bytes(double bytes);

}  // namespace moezero::report
