// report/report_charts.h — (internal to report/) the SVG charts of the run report's HTML page
// (report_html.cpp): per-step communication, memory by tag per rank, and the loss curve.
#pragma once

#include <string>

#include "report/report.h"

namespace moezero::report {

// <svg id="steps-chart">: communication (or stall) per step.
std::string steps_chart(const Report& r);
// Peak memory by tag, a stacked bar per rank. Empty when there is nothing to draw.
std::string memory_chart(const Report& r);
// The loss curve: training loss per step and validation loss where evaluated (two polylines
// on one axis). Empty when no step has a loss.
std::string loss_chart(const Report& r);

}  // namespace moezero::report
