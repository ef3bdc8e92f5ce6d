// tests/report/step_breakdown_test.cpp — "where the step goes" (report/step_breakdown.h) on a
// hand-made trace whose numbers are known, an older trace without args.step, and bad input.
#include "report/step_breakdown.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace moezero::report {
namespace {

using nlohmann::json;

json span(const char* name, const char* cat, int pid, int tid, double ts, double dur, json args) {
  return {{"ph", "X"},  {"name", name}, {"cat", cat}, {"pid", pid},
          {"tid", tid}, {"ts", ts},     {"dur", dur}, {"args", std::move(args)}};
}

// Two steps of one rank. Step 1 (0 - 1000 us): attn 0-300, moe 300-900 holding the experts'
// grouped call 400-800 (2e9 flops) with its derived expert spans, and a wait 320-380; a reduce
// stream collective 850-1000. Step 2 (2000 - 2500 us): attn 2000-2200, moe 2200-2500 holding
// experts 2250-2450 (1e9 flops), and a compute-stream all_reduce 2450-2500 of 5e6 bytes.
std::string two_steps() {
  json ev = json::array();
  ev.push_back(span("layers.0.attn fwd", "compute", 0, 0, 0, 300, {{"step", 1}}));
  ev.push_back(span("layers.0.moe fwd", "compute", 0, 0, 300, 600, {{"step", 1}}));
  ev.push_back(span("wait layers.0.experts.1", "stall", 0, 0, 320, 60, {{"step", 1}}));
  ev.push_back(span("layers.0.experts fwd", "experts", 0, 0, 400, 400,
                    {{"step", 1}, {"flops", 2e9}, {"experts", 2}, {"tokens", 10}}));
  ev.push_back(span("layers.0.experts.0 fwd", "expert", 0, 0, 400, 200,
                    {{"step", 1}, {"flops", 1e9}, {"timing", "flops share"}}));
  ev.push_back(span("layers.0.experts.1 fwd", "expert", 0, 0, 600, 200,
                    {{"step", 1}, {"flops", 1e9}, {"timing", "flops share"}}));
  ev.push_back(span("reduce_scatter grads", "collective", 0, 2, 850, 150,
                    {{"step", 1}, {"op", "reduce_scatter"}, {"bytes", 1000}}));
  ev.push_back(span("layers.0.attn fwd", "compute", 0, 0, 2000, 200, {{"step", 2}}));
  ev.push_back(span("layers.0.moe fwd", "compute", 0, 0, 2200, 300, {{"step", 2}}));
  ev.push_back(
      span("layers.0.experts fwd", "experts", 0, 0, 2250, 200, {{"step", 2}, {"flops", 1e9}}));
  ev.push_back(span("all_reduce world", "collective", 0, 0, 2450, 50,
                    {{"step", 2}, {"op", "all_reduce"}, {"bytes", 5e6}}));
  return json{{"traceEvents", ev}}.dump();
}

const BreakdownRow& row(const std::vector<BreakdownRow>& rows, const std::string& key) {
  for (const BreakdownRow& r : rows)
    if (r.key == key) return r;
  ADD_FAILURE() << "no row '" << key << "'";
  static const BreakdownRow none;
  return none;
}

TEST(StepBreakdown, KindsModulesSharesAndRates) {
  const StepBreakdown b = compute_step_breakdown(two_steps(), "t.json");
  EXPECT_EQ(b.rank_steps, 2);
  EXPECT_TRUE(b.has_step_args);
  EXPECT_DOUBLE_EQ(b.step_ms, (1.0 + 0.5) / 2);  // extents over every track
  const double total_us = 1500.0;
  const BreakdownRow& attn = row(b.by_kind, "attn fwd");
  EXPECT_DOUBLE_EQ(attn.count, 1.0);
  EXPECT_DOUBLE_EQ(attn.ms, (0.3 + 0.2) / 2);
  EXPECT_DOUBLE_EQ(attn.share, 500.0 / total_us);
  EXPECT_FALSE(attn.tflops);
  const BreakdownRow& ex = row(b.by_kind, "moe fwd > experts fwd");
  EXPECT_DOUBLE_EQ(ex.ms, (0.4 + 0.2) / 2);
  EXPECT_NEAR(*ex.tflops, 3e9 / 600e-6 / 1e12, 1e-12);  // derived expert spans left out
  const BreakdownRow& wait = row(b.by_kind, "moe fwd > wait gather");
  EXPECT_DOUBLE_EQ(wait.count, 0.5);
  const BreakdownRow& ar = row(b.by_kind, "moe fwd > all_reduce");
  EXPECT_NEAR(*ar.gbps, 5e6 / 50e-6 / 1e9, 1e-9);
  // Top-level compute covers 900 + 500 us of the 1500: the rest has no compute span.
  EXPECT_EQ(b.by_kind.back().key, "(no compute span)");
  EXPECT_NEAR(b.by_kind.back().share, 100.0 / total_us, 1e-12);
  EXPECT_NEAR(b.by_kind.back().ms, 0.05, 1e-12);
  for (const BreakdownRow& r : b.by_kind) EXPECT_EQ(r.key.find("experts.0"), std::string::npos);
  EXPECT_DOUBLE_EQ(row(b.by_module, "layers.0.moe fwd").ms, (0.6 + 0.3) / 2);
  EXPECT_DOUBLE_EQ(row(b.by_module, "layers.0.moe fwd > experts fwd").count, 1.0);
  // Rows by time, largest first (the idle row last).
  for (size_t i = 1; i + 1 < b.by_kind.size(); ++i) EXPECT_GE(b.by_kind[i - 1].ms, b.by_kind[i].ms);
  std::ostringstream os;
  write_step_breakdown(os, b);
  EXPECT_NE(os.str().find("Where the step goes"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("moe fwd > experts fwd"), std::string::npos) << os.str();
}

TEST(StepBreakdown, OlderTraceWithoutStepsIsOneGroupPerRank) {
  json ev = json::array();
  ev.push_back(span("embed fwd", "compute", 0, 0, 0, 10, json::object()));
  ev.push_back(span("embed fwd", "compute", 1, 0, 5, 10, json::object()));
  const StepBreakdown b = compute_step_breakdown(json{{"traceEvents", ev}}.dump(), "old.json");
  EXPECT_FALSE(b.has_step_args);
  EXPECT_EQ(b.rank_steps, 2);
  EXPECT_DOUBLE_EQ(row(b.by_kind, "embed fwd").share, 1.0);
}

TEST(StepBreakdown, BadInputNamesTheFileAndTheEvent) {
  EXPECT_THROW(compute_step_breakdown("[1, 2]", "a.json"), Error);
  try {
    compute_step_breakdown(R"({"traceEvents": [{"ph": "X", "ts": 1, "pid": 0, "tid": 0}]})",
                           "b.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("b.json: traceEvents[0]: 'dur'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(read_step_breakdown("/nonexistent/t.json"), Error);
}

}  // namespace
}  // namespace moezero::report
