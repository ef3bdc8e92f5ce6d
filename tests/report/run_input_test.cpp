// Bad input to `moezero report`: every error names the file, the line (metrics) or event
// (trace) and the field that is wrong.
#include "report/run_input.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "report/report.h"
#include "report/report_render.h"

namespace moezero::report {
namespace {

using nlohmann::json;

json good_step(int step, int experts = 4) {
  json rank = {{"gathered_bytes", 10},
               {"reduce_scattered_bytes", 1},
               {"reduce_wire_bytes", 1},
               {"all_reduced_bytes", 2},
               {"a2a_bytes", 3},
               {"intra_node_bytes", 11},
               {"inter_node_bytes", 12},
               {"gathered_dense_bytes", 4},
               {"gathered_expert_bytes", 6},
               {"prefetch_hits", 1},
               {"prefetch_misses", 0},
               {"miss_bytes", 0},
               {"exact_prefetches", 2},
               {"wasted_bytes", 0},
               {"needed_expert_bytes", 6},
               {"active_layer_experts", 3},
               {"layer_expert_slots", 4},
               {"cache_hits", 0},
               {"cache_misses", 1},
               {"cache_evictions", 0},
               {"speculation_gated", 2},
               {"stall_ms", 0.5},
               {"comm_ms", 1.5},
               {"exposed_comm_ms", 0.5},
               {"idle_link_ms", 0.25},
               {"peak_bytes", {{"grad", 100}, {"activation", 50}}},
               {"peak_total_bytes", 150}};
  std::vector<int64_t> t(size_t(experts), 5);
  std::vector<double> p(size_t(experts), 0.5);
  json layer = {{"layer", 1},          {"tokens", t},        {"gathers", t},
                {"gathered_bytes", t}, {"gather_ms", p},     {"cache_hits", t},
                {"cache_misses", t},   {"prefetch_hits", t}, {"prefetch_misses", t},
                {"wasted_bytes", t},   {"a2a_tokens_in", t}, {"a2a_tokens_out", t},
                {"predicted", p}};
  return {{"step", step},          {"loss", 2.5},    {"tokens_per_expert", {t}},
          {"moe_layers", {layer}}, {"comm_ms", 3.0}, {"exposed_comm_ms", 1.0},
          {"ranks", {rank, rank}}};
}

std::string lines(const std::vector<json>& steps) {
  std::string s;
  for (const json& j : steps) s += j.dump() + "\n";
  return s;
}

// Parses `text` and returns the error message (fails the test when no error is thrown).
std::string error_of(const std::string& text, const std::string& path = "m.jsonl") {
  try {
    parse_run(text, path);
  } catch (const Error& e) {
    return e.message();
  }
  ADD_FAILURE() << "no error for:\n" << text.substr(0, 400);
  return "";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

TEST(RunInput, GoodMetricsParse) {
  const RunInput in = parse_run(lines({good_step(1), good_step(2)}), "m.jsonl");
  EXPECT_EQ(in.kind, InputKind::Metrics);
  ASSERT_EQ(in.steps.size(), 2u);
  EXPECT_TRUE(in.steps[0].has_moe_layers);
  EXPECT_EQ(in.steps[1].ranks.size(), 2u);
  EXPECT_EQ(in.steps[0].where, "m.jsonl:1");
  // Blank lines are allowed (and counted for line numbers).
  const RunInput in2 = parse_run("\n" + lines({good_step(1)}), "m.jsonl");
  EXPECT_EQ(in2.steps[0].where, "m.jsonl:2");
}

TEST(RunInput, BadJsonNamesTheLine) {
  std::string text = lines({good_step(1), good_step(2)}) + "{\"step\": 3, \"loss\": \n";
  EXPECT_HAS(error_of(text), "m.jsonl:3: bad JSON");
}

TEST(RunInput, NeitherLinesNorDocument) {
  const std::string msg = error_of("this is not json\n");
  EXPECT_HAS(msg, "m.jsonl: neither JSON lines (line 1");
  EXPECT_HAS(error_of("[1, 2, 3]"), "the file is one JSON array");
  EXPECT_HAS(error_of(""), "m.jsonl: no steps found");
  try {
    read_run("/nonexistent/metrics.jsonl");
    ADD_FAILURE() << "no error for a missing file";
  } catch (const Error& e) {
    EXPECT_HAS(e.message(), "/nonexistent/metrics.jsonl: cannot open for reading");
  }
}

TEST(RunInput, MissingFieldNamesLineAndPath) {
  json s2 = good_step(2);
  s2["ranks"][1].erase("stall_ms");
  EXPECT_HAS(error_of(lines({good_step(1), s2})), "m.jsonl:2: ranks[1].stall_ms: missing field");
  json s1 = good_step(1);
  s1.erase("step");
  EXPECT_HAS(error_of(lines({s1})), "m.jsonl:1: step: missing field");
  json s3 = good_step(1);
  s3["moe_layers"][0].erase("predicted");
  EXPECT_HAS(error_of(lines({s3})), "m.jsonl:1: moe_layers[0].predicted: missing field");
}

TEST(RunInput, WrongTypesAndValues) {
  json s = good_step(1);
  s["ranks"][0]["gathered_bytes"] = "ten";
  EXPECT_HAS(error_of(lines({s})),
             "m.jsonl:1: ranks[0].gathered_bytes: expected an integer, got string \"ten\"");
  json p = good_step(1);
  p["moe_layers"][0]["predicted"][2] = 1.5;
  EXPECT_HAS(error_of(lines({p})), "moe_layers[0].predicted[2]: a probability must be in [0, 1]");
  json n = good_step(1);
  n["comm_ms"] = -1.0;
  EXPECT_HAS(error_of(lines({n})), "m.jsonl:1: comm_ms: negative");
}

TEST(RunInput, InconsistentLengthsAreNamed) {
  json s = good_step(1);
  s["moe_layers"][0]["gathers"] = {1, 2, 3};
  EXPECT_HAS(error_of(lines({s})),
             "m.jsonl:1: moe_layers[0].gathers: has 3 entries, expected 4 (tokens_per_expert[0])");
  json two = good_step(1);
  two["moe_layers"].push_back(two["moe_layers"][0]);
  EXPECT_HAS(error_of(lines({two})), "moe_layers: has 2 layers, tokens_per_expert has 1");
  // Shapes that change between steps.
  EXPECT_HAS(error_of(lines({good_step(1), good_step(2, 6)})),
             "m.jsonl:2: tokens_per_expert[0]: has 6 experts, m.jsonl:1 has 4");
  json fewer = good_step(2);
  fewer["ranks"].erase(1);
  EXPECT_HAS(error_of(lines({good_step(1), fewer})),
             "m.jsonl:2: ranks: has 1 ranks, m.jsonl:1 has 2");
  json old = good_step(2);
  old.erase("moe_layers");
  EXPECT_HAS(error_of(lines({good_step(1), old})), "m.jsonl:2: moe_layers: absent here");
}

// A resumed run appending to the same metrics file repeats the steps after its checkpoint:
// each counts once, its last record.
TEST(RunInput, RepeatedStepKeepsTheLastRecord) {
  json again = good_step(2);
  again["loss"] = 1.25;
  const RunInput in =
      parse_run(lines({good_step(1), good_step(2), good_step(3), again}), "m.jsonl");
  ASSERT_EQ(in.steps.size(), 3u);
  EXPECT_EQ(in.repeated_steps_dropped, 1u);
  EXPECT_EQ(in.steps[1].step, 2);
  EXPECT_EQ(in.steps[1].where, "m.jsonl:4");
}

TEST(RunInput, TraceErrorsNameTheEvent) {
  json ev = json::array();
  ev.push_back({{"ph", "i"},
                {"cat", "step"},
                {"name", "step_metrics"},
                {"pid", 0},
                {"ts", 0.0},
                {"args", good_step(1)}});
  ev.push_back({{"ph", "X"},
                {"cat", "collective"},
                {"pid", 0},
                {"ts", 1.0},
                {"dur", 2.0},
                {"args", {{"group", "world"}, {"bytes", 16}}}});
  const json trace = {{"traceEvents", ev}};
  EXPECT_HAS(error_of(trace.dump(), "t.json"), "t.json: traceEvents[1]: args.op: missing field");

  json ev2 = json::array();
  json bad = good_step(1);
  bad["tokens_per_expert"] = "many";
  ev2.push_back({{"ph", "i"}, {"name", "step_metrics"}, {"pid", 0}, {"ts", 0.0}, {"args", bad}});
  EXPECT_HAS(error_of(json({{"traceEvents", ev2}}).dump(), "t.json"),
             "t.json: traceEvents[0] (step_metrics): tokens_per_expert: expected an array");

  json ev3 = json::array();
  ev3.push_back({{"ph", "X"},
                 {"cat", "collective"},
                 {"pid", 0},
                 {"ts", 1.0},
                 {"dur", 2.0},
                 {"args", {{"op", "all_gather"}, {"group", "world"}, {"bytes", 16}}}});
  EXPECT_HAS(error_of(json({{"traceEvents", ev3}}).dump(), "t.json"), "t.json: no steps found");

  EXPECT_HAS(error_of(R"({"traceEvents": {"a": 1}})", "t.json"),
             "t.json: traceEvents: expected an array");
  EXPECT_HAS(error_of("{\"traceEvents\": [\n{\"ph\": \"X\",\n", "t.json"),
             "t.json: neither JSON lines");
}

TEST(RunInput, TraceKindIsDetectedByContent) {
  json ev = json::array();
  ev.push_back(
      {{"ph", "i"}, {"name", "step_metrics"}, {"pid", 0}, {"ts", 0.0}, {"args", good_step(4)}});
  // Pretty-printed over many lines, with a name that looks like a metrics file.
  const RunInput in = parse_run(json({{"traceEvents", ev}}).dump(2), "looks_like.jsonl");
  EXPECT_EQ(in.kind, InputKind::Trace);
  ASSERT_EQ(in.steps.size(), 1u);
  EXPECT_EQ(in.steps[0].step, 4);
  EXPECT_TRUE(in.collectives.empty());
}

}  // namespace
}  // namespace moezero::report

namespace moezero::report {
namespace {

// A line as trainers wrote it before the prediction-quality fields and the newer counters:
// prefetch_wasted_bytes (since renamed), no miss_bytes ... exposed_comm_ms, no link tier bytes
// (intra_node_bytes, inter_node_bytes), no brier_*.
json old_style_step(int64_t step) {
  json j = good_step(step);
  j.erase("comm_ms");
  j.erase("exposed_comm_ms");
  for (json& r : j["ranks"]) {
    for (const char* k :
         {"reduce_wire_bytes", "intra_node_bytes", "inter_node_bytes", "miss_bytes",
          "exact_prefetches", "wasted_bytes", "needed_expert_bytes", "active_layer_experts",
          "layer_expert_slots", "speculation_gated", "comm_ms", "exposed_comm_ms", "idle_link_ms"})
      r.erase(k);
    r["prefetch_wasted_bytes"] = 7;
  }
  return j;
}

TEST(RunInput, OldStyleMetricsStillReport) {
  const RunInput in = parse_run(lines({old_style_step(1), old_style_step(2)}), "old.jsonl");
  ASSERT_EQ(in.steps.size(), 2u);
  const std::vector<std::string> absent = {"reduce_wire_bytes",
                                           "intra_node_bytes",
                                           "inter_node_bytes",
                                           "gathered_wire_bytes",
                                           "miss_bytes",
                                           "exact_prefetches",
                                           "wasted_bytes",
                                           "needed_expert_bytes",
                                           "active_layer_experts",
                                           "layer_expert_slots",
                                           "speculation_gated",
                                           "hpz_gathers",
                                           "hpz_gathered_bytes",
                                           "pregate_predicted",
                                           "pregate_hits",
                                           "pregate_active",
                                           "comm_ms",
                                           "exposed_comm_ms",
                                           "idle_link_ms"};
  EXPECT_EQ(in.steps[0].ranks[1].absent, absent);
  EXPECT_FALSE(in.steps[0].moe_layers[0].prediction);
  const Report r = compute_report(in);
  EXPECT_FALSE(r.has_prediction_quality);
  EXPECT_FALSE(r.has_overlap);
  EXPECT_EQ(r.rank_rows[0].absent, absent);
  EXPECT_FALSE(r.rank_rows[0].has("wasted_bytes"));
  EXPECT_TRUE(r.rank_rows[0].has("stall_ms"));
  EXPECT_EQ(r.rank_rows[0].stall_ms, 1.0);
  std::ostringstream text;
  write_text(text, r);
  EXPECT_HAS(text.str(), "(this file has no brier_sum / calibration counts");
  const std::string html = render_html(r);
  EXPECT_HAS(html, "This file has no brier_sum / calibration counts");
  EXPECT_EQ(report_from_json(report_to_json(r), "r.json"), r);
}

TEST(RunInput, CountersMustBeInEveryRecordOrInNone) {
  json s2 = old_style_step(2);
  s2["ranks"][1]["wasted_bytes"] = 3;
  EXPECT_HAS(error_of(lines({old_style_step(1), s2})),
             "m.jsonl:2: ranks[1].wasted_bytes: present here but missing at m.jsonl:1 ranks[0]");
  json s3 = good_step(2);
  s3["ranks"][0].erase("needed_expert_bytes");
  EXPECT_HAS(error_of(lines({good_step(1), s3})),
             "m.jsonl:2: ranks[0].needed_expert_bytes: missing field (present at m.jsonl:1");
}

TEST(RunInput, PredictionFieldsAreCheckedWhenPresent) {
  auto with = [](int64_t step) {
    json j = good_step(step);
    std::vector<int64_t> cc(10, 0), ca(10, 0);
    cc[9] = 3, ca[9] = 2;
    json& l = j["moe_layers"][0];
    l["brier_sum"] = 0.5, l["brier_count"] = 3, l["calibration_count"] = cc;
    l["calibration_active"] = ca;
    return j;
  };
  const RunInput in = parse_run(lines({with(1)}), "m.jsonl");
  ASSERT_TRUE(in.steps[0].moe_layers[0].prediction);
  EXPECT_EQ(in.steps[0].moe_layers[0].prediction->brier_count, 3);
  EXPECT_EQ(in.steps[0].moe_layers[0].prediction->calibration_active[9], 2);
  json part = with(1);
  part["moe_layers"][0].erase("calibration_active");
  EXPECT_HAS(error_of(lines({part})), "moe_layers[0].calibration_active: missing field");
  json over = with(1);
  over["moe_layers"][0]["calibration_active"][9] = 4;
  EXPECT_HAS(error_of(lines({over})), "moe_layers[0].calibration_active[9]: is 4, outside [0, 3]");
  json sum = with(1);
  sum["moe_layers"][0]["brier_count"] = 5;
  EXPECT_HAS(error_of(lines({sum})), "calibration_count: sums to 3 pairs, brier_count is 5");
  json shorter = with(1);
  shorter["moe_layers"][0]["calibration_active"] = std::vector<int64_t>(9, 0);
  EXPECT_HAS(error_of(lines({shorter})), "calibration_active: has 9 entries, expected 10");
  EXPECT_HAS(error_of(lines({with(1), good_step(2)})),
             "m.jsonl:2: moe_layers[0].brier_sum: absent here but not at m.jsonl:1");
}

}  // namespace
}  // namespace moezero::report
