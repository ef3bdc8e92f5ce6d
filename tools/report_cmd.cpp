// tools/report_cmd.cpp — `moezero report TRACE_OR_METRICS [--html FILE] [--json FILE]
// [--quiet]`: reads a metrics file, a trace or a routing trace (told apart by content), prints
// the report's tables, and writes the HTML page and/or the report's numbers as JSON.
#include <iostream>

#include "core/error.h"
#include "core/output_file.h"
#include "report/report.h"
#include "report/report_render.h"
#include "report/routing_report.h"
#include "report/step_breakdown.h"
#include "tools/cli.h"

namespace moezero::cli {

int report(const std::vector<std::string>& args) {
  std::string input, html, json;
  bool quiet = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* flag) -> std::string {
      MOEZERO_USAGE_REQUIRE(i + 1 < args.size(), flag, " needs a file name");
      return args[++i];
    };
    if (a == "--html")
      html = value("--html");
    else if (a == "--json")
      json = value("--json");
    else if (a == "--quiet")
      quiet = true;
    else if (a.rfind("--", 0) == 0)
      MOEZERO_USAGE_ERROR("unknown option '", a, "' (expected --html FILE, --json FILE, --quiet)");
    else if (input.empty())
      input = a;
    else
      MOEZERO_USAGE_ERROR("one input file expected, got '", input, "' and '", a, "'");
  }
  MOEZERO_USAGE_REQUIRE(
      !input.empty(),
      "usage: moezero report TRACE_OR_METRICS [--html FILE] [--json FILE] [--quiet]");
  if (report::is_routing_trace(input)) {  // profile.routing_trace: its own summary
    const report::RoutingReport r = report::read_routing_report(input);
    if (!quiet) report::write_routing_text(std::cout, r);
    if (!html.empty()) {
      write_output_file(html, report::render_routing_html(r), "--html");
      std::cerr << "report: wrote " << html << "\n";
    }
    if (!json.empty()) {
      write_output_file(json, report::routing_report_to_json(r) + "\n", "--json");
      std::cerr << "report: wrote " << json << "\n";
    }
    return 0;
  }
  const report::RunInput run = report::read_run(input);
  if (run.repeated_steps_dropped > 0)
    std::cerr << "report: " << input << " repeats " << run.repeated_steps_dropped
              << " step(s) (a resumed run): the last record of each is kept\n";
  const report::Report r = report::compute_report(run);
  if (!quiet) report::write_text(std::cout, r);
  if (!quiet && r.kind == "trace")
    report::write_step_breakdown(std::cout, report::read_step_breakdown(input));
  if (!html.empty()) {
    write_output_file(html, report::render_html(r), "--html");
    std::cerr << "report: wrote " << html << "\n";
  }
  if (!json.empty()) {
    write_output_file(json, report::report_to_json(r) + "\n", "--json");
    std::cerr << "report: wrote " << json << "\n";
  }
  return 0;
}

}  // namespace moezero::cli
