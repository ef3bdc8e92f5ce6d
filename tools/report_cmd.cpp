// tools/report_cmd.cpp — `moezero report TRACE_OR_METRICS [--html FILE] [--json FILE]
// [--quiet]`: reads a metrics file, a trace or a routing trace (told apart by content), prints
// the report's tables, and writes the HTML page and/or the report's numbers as JSON.
#include <fstream>
#include <iostream>

#include "core/error.h"
#include "report/report.h"
#include "report/report_render.h"
#include "report/routing_report.h"
#include "report/step_breakdown.h"
#include "tools/cli.h"

namespace moezero::cli {

namespace {

void write_file(const std::string& path, const std::string& text, const char* what) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) MOEZERO_USER_ERROR(what, ": cannot open '", path, "' for writing");
  f << text;
  f.close();
  if (!f) MOEZERO_USER_ERROR(what, ": write to '", path, "' failed");
}

}  // namespace

int report(const std::vector<std::string>& args) {
  std::string input, html, json;
  bool quiet = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> std::string {
      MOEZERO_REQUIRE(i + 1 < args.size(), flag, " needs a file name");
      return args[++i];
    };
    if (a == "--html")
      html = value("--html");
    else if (a == "--json")
      json = value("--json");
    else if (a == "--quiet")
      quiet = true;
    else if (a.rfind("--", 0) == 0)
      MOEZERO_USER_ERROR("unknown option '", a, "' (expected --html FILE, --json FILE, --quiet)");
    else if (input.empty())
      input = a;
    else
      MOEZERO_USER_ERROR("one input file expected, got '", input, "' and '", a, "'");
  }
  MOEZERO_REQUIRE(!input.empty(),
                  "usage: moezero report TRACE_OR_METRICS [--html FILE] [--json FILE] [--quiet]");
  if (report::is_routing_trace(input)) {  // profile.routing_trace: its own summary
    const report::RoutingReport r = report::read_routing_report(input);
    if (!quiet) report::write_routing_text(std::cout, r);
    if (!html.empty()) {
      write_file(html, report::render_routing_html(r), "--html");
      std::cerr << "report: wrote " << html << "\n";
    }
    if (!json.empty()) {
      write_file(json, report::routing_report_to_json(r) + "\n", "--json");
      std::cerr << "report: wrote " << json << "\n";
    }
    return 0;
  }
  const report::Report r = report::compute_report(report::read_run(input));
  if (!quiet) report::write_text(std::cout, r);
  if (!quiet && r.kind == "trace")
    report::write_step_breakdown(std::cout, report::read_step_breakdown(input));
  if (!html.empty()) {
    write_file(html, report::render_html(r), "--html");
    std::cerr << "report: wrote " << html << "\n";
  }
  if (!json.empty()) {
    write_file(json, report::report_to_json(r) + "\n", "--json");
    std::cerr << "report: wrote " << json << "\n";
  }
  return 0;
}

}  // namespace moezero::cli
