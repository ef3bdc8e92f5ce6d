// fuzz/report_fuzz.cpp — libFuzzer target: a metrics file (JSON lines) or a Chrome trace
// through parse_run, then what it accepted through compute_report and the text and HTML
// renderers (what `moezero report` does with a user-supplied file). Bad input must end in
// moezero::Error naming the file, line or event, never a crash, a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "core/error.h"
#include "report/report.h"
#include "report/report_render.h"
#include "report/run_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const moezero::report::RunInput in = moezero::report::parse_run(text, "<fuzz>");
    const moezero::report::Report r = moezero::report::compute_report(in);
    std::ostringstream os;
    moezero::report::write_text(os, r);
    (void)moezero::report::render_html(r);
    (void)moezero::report::report_from_json(moezero::report::report_to_json(r), "<round trip>");
  } catch (const moezero::Error&) {
  }
  return 0;
}
