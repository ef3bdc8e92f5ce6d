// report/html_format.cpp — the text helpers of the HTML pages (html_format.h).
#include "report/html_format.h"

#include <cmath>
#include <cstdio>

namespace moezero::report::html {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string opt(const std::optional<double>& v, const char* f) {
  return v ? fmt(f, *v) : std::string("n/a");
}
std::string num(int64_t v) {
  std::string s = std::to_string(v), o;
  const size_t n = s.size();
  for (size_t i = 0; i < n; ++i) {
    o += s[i];
    const size_t left = n - 1 - i;
    if (left > 0 && left % 3 == 0 && s[i] != '-') o += ',';
  }
  return o;
}
std::string px(double v) { return fmt("%.1f", v); }

double nice_ceil(double v) {
  if (!(v > 0)) return 1.0;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * p >= v * (1 - 1e-12)) return m * p;
  return 10.0 * p;
}

std::string td(const std::string& s, const std::string& cls) {
  return cls.empty() ? "<td>" + s + "</td>" : "<td class=\"" + cls + "\">" + s + "</td>";
}
std::string th_row(const std::vector<std::string>& h) {
  std::string o = "<tr>";
  for (const auto& x : h) o += "<th>" + x + "</th>";
  return o + "</tr>";
}

}  // namespace moezero::report::html
