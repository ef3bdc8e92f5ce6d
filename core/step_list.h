// core/step_list.h — a set of 1-based step numbers written as "3-5,10" (profile.steps): which
// steps the trace recorder records. Empty text means every step.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace moezero {

class StepList {
 public:
  StepList() = default;  // every step
  // Parses "a", "a-b" and comma-separated lists of them (spaces allowed around items);
  // steps are 1-based, ranges inclusive with a <= b. Throws moezero::Error naming `key` and
  // the offending item on bad input ("profile.steps: '4-x' is not a step or a range a-b").
  static StepList parse(const std::string& text, const std::string& key);
  // The same parse without throwing: "" when `text` is valid (out filled), else the reason.
  static std::string parse_into(const std::string& text, StepList& out);

  bool all() const { return ranges_.empty(); }
  bool contains(int64_t step) const;
  const std::vector<std::pair<int64_t, int64_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // inclusive; empty: every step
};

}  // namespace moezero
