// core/step_list.cpp — parsing of step lists such as "3-5,10" (see step_list.h).
#include "core/step_list.h"

#include <cctype>
#include <charconv>

#include "core/error.h"

namespace moezero {

namespace {

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

// A positive step number, or nullopt-like -1 when `s` is not one.
int64_t parse_step(const std::string& s) {
  if (s.empty()) return -1;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 1) return -1;
  return v;
}

}  // namespace

std::string StepList::parse_into(const std::string& text, StepList& out) {
  out.ranges_.clear();
  if (trim(text).empty()) return {};
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find(',', pos);
    const std::string item =
        trim(text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos));
    const size_t dash = item.find('-', 1);  // a leading '-' is a bad number, not a range
    int64_t a = -1, b = -1;
    if (dash == std::string::npos) {
      a = b = parse_step(item);
    } else {
      a = parse_step(trim(item.substr(0, dash)));
      b = parse_step(trim(item.substr(dash + 1)));
    }
    if (a < 1 || b < 1)
      return detail::concat("'", item, "' in \"", text,
                            "\" is not a step (an integer >= 1) or a range a-b of steps");
    if (a > b)
      return detail::concat("range '", item, "' in \"", text, "\" runs backwards (", a, " > ", b,
                            ")");
    out.ranges_.emplace_back(a, b);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return {};
}

StepList StepList::parse(const std::string& text, const std::string& key) {
  StepList out;
  const std::string why = parse_into(text, out);
  if (!why.empty()) MOEZERO_THROW(key, ": ", why);
  return out;
}

bool StepList::contains(int64_t step) const {
  if (ranges_.empty()) return true;
  for (const auto& [a, b] : ranges_)
    if (step >= a && step <= b) return true;
  return false;
}

}  // namespace moezero
