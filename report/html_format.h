// report/html_format.h — (internal to report/) the text helpers of the HTML pages: escaping,
// number formatting, table cells, axis bounds.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moezero::report::html {

std::string esc(const std::string& s);                           // & < > " escaped
std::string fmt(const char* f, double v);                        // snprintf of one double
std::string opt(const std::optional<double>& v, const char* f);  // fmt, or "n/a"
std::string num(int64_t v);                                      // 1,234,567
std::string px(double v);                                        // "%.1f": SVG coordinates
// A "nice" upper bound >= v for axes and scales: 1, 2, 2.5, 5 times a power of ten.
double nice_ceil(double v);
// <td> (with class `cls` when given) and a row of <th>.
std::string td(const std::string& s, const std::string& cls = "");
std::string th_row(const std::vector<std::string>& h);

}  // namespace moezero::report::html
