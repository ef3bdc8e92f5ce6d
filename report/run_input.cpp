// report/run_input.cpp — metrics / trace readers (see run_input.h for the contract).
#include "report/run_input.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/step_counters.h"

namespace moezero::report {

const char* input_kind_name(InputKind k) { return k == InputKind::Trace ? "trace" : "metrics"; }

namespace {

using nlohmann::json;

// A location for messages: the record ("FILE:LINE") and the field path inside it.
struct At {
  const std::string& where;
  std::string path;  // "ranks[1].stall_ms"
  At field(const std::string& key) const { return {where, path.empty() ? key : path + "." + key}; }
  At index(size_t i) const { return {where, path + "[" + std::to_string(i) + "]"}; }
  [[noreturn]] void fail(const std::string& what) const {
    MOEZERO_USER_ERROR(where, ": ", path.empty() ? std::string("record") : path, ": ", what);
  }
};

std::string type_text(const json& v) {
  std::string d = v.dump();
  if (d.size() > 40) d = d.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + d;
}

const json& member(const json& obj, const std::string& key, const At& at) {
  auto it = obj.find(key);
  if (it == obj.end()) at.field(key).fail("missing field");
  return *it;
}

const json* optional_member(const json& obj, const std::string& key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int64_t as_int(const json& v, const At& at) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)
      return static_cast<int64_t>(d);
  }
  at.fail("expected an integer, got " + type_text(v));
}

double as_number(const json& v, const At& at) {
  if (v.is_number()) return v.get<double>();
  at.fail("expected a number, got " + type_text(v));
}

const std::string& as_string(const json& v, const At& at) {
  if (!v.is_string()) at.fail("expected a string, got " + type_text(v));
  return v.get_ref<const std::string&>();
}

const json& as_array(const json& v, const At& at) {
  if (!v.is_array()) at.fail("expected an array, got " + type_text(v));
  return v;
}

const json& as_object(const json& v, const At& at) {
  if (!v.is_object()) at.fail("expected an object, got " + type_text(v));
  return v;
}

int64_t int_field(const json& obj, const std::string& key, const At& at) {
  return as_int(member(obj, key, at), at.field(key));
}

double number_field(const json& obj, const std::string& key, const At& at) {
  return as_number(member(obj, key, at), at.field(key));
}

std::optional<double> optional_number(const json& obj, const std::string& key, const At& at) {
  const json* v = optional_member(obj, key);
  if (!v) return std::nullopt;
  return as_number(*v, at.field(key));
}

template <typename T>
std::vector<T> array_field(const json& obj, const std::string& key, const At& at,
                           size_t expected_len, const std::string& len_source) {
  const At f = at.field(key);
  const json& a = as_array(member(obj, key, at), f);
  if (a.size() != expected_len)
    f.fail("has " + std::to_string(a.size()) + " entries, expected " +
           std::to_string(expected_len) + " (" + len_source + ")");
  std::vector<T> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if constexpr (std::is_same_v<T, int64_t>)
      out.push_back(as_int(a[i], f.index(i)));
    else
      out.push_back(as_number(a[i], f.index(i)));
  }
  return out;
}

// The prediction-quality fields of a moe_layers entry: all four or none (older trainers).
std::optional<PredictionCounts> parse_prediction(const json& lj, const At& at) {
  static const char* kKeys[] = {"brier_sum", "brier_count", "calibration_count",
                                "calibration_active"};
  size_t present = 0;
  for (const char* k : kKeys) present += optional_member(lj, k) != nullptr;
  if (present == 0) return std::nullopt;
  PredictionCounts p;
  p.brier_sum = number_field(lj, "brier_sum", at);
  p.brier_count = int_field(lj, "brier_count", at);
  if (p.brier_sum < 0) at.field("brier_sum").fail("negative");
  if (p.brier_count < 0) at.field("brier_count").fail("negative");
  const At cat = at.field("calibration_count");
  const size_t n = as_array(member(lj, "calibration_count", at), cat).size();
  if (n == 0) cat.fail("is empty: at least one probability bucket");
  p.calibration_count = array_field<int64_t>(lj, "calibration_count", at, n, "calibration_count");
  p.calibration_active = array_field<int64_t>(lj, "calibration_active", at, n, "calibration_count");
  int64_t pairs = 0;
  for (size_t b = 0; b < n; ++b) {
    if (p.calibration_count[b] < 0) cat.index(b).fail("negative");
    if (p.calibration_active[b] < 0 || p.calibration_active[b] > p.calibration_count[b])
      at.field("calibration_active")
          .index(b)
          .fail("is " + std::to_string(p.calibration_active[b]) + ", outside [0, " +
                std::to_string(p.calibration_count[b]) + "] (calibration_count)");
    pairs += p.calibration_count[b];
  }
  if (pairs != p.brier_count)
    cat.fail("sums to " + std::to_string(pairs) + " pairs, brier_count is " +
             std::to_string(p.brier_count));
  return p;
}

LayerStepCounters parse_layer(const json& lj, const At& at, const std::vector<int64_t>& tokens,
                              size_t l) {
  as_object(lj, at);
  LayerStepCounters c;
  c.layer = int_field(lj, "layer", at);
  const size_t e = tokens.size();
  const std::string src = "tokens_per_expert[" + std::to_string(l) + "]";
#define MOEZERO_READ(name, type, combine, source) \
  c.name = array_field<ExpertCounterType<type>>(lj, #name, at, e, src);
  MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_READ)
#undef MOEZERO_READ
  for (size_t i = 0; i < e; ++i)
    if (!(c.predicted[i] >= 0.0 && c.predicted[i] <= 1.0))
      at.field("predicted")
          .index(i)
          .fail("a probability must be in [0, 1], got " + std::to_string(c.predicted[i]));
  c.prediction = parse_prediction(lj, at);
  for (auto [key, out] :
       {std::pair{"load_max_over_mean", &c.load_max_over_mean}, std::pair{"load_cv", &c.load_cv}})
    if (const json* v = optional_member(lj, key)) {
      const double d = as_number(*v, at.field(key));
      if (!(d >= 0.0)) at.field(key).fail("must be >= 0, got " + std::to_string(d));
      *out = d;
    }
  return c;
}

RankStepCounters parse_rank(const json& rj, const At& at) {
  as_object(rj, at);
  RankStepCounters r;
  // A counter a file lacks is listed in `absent` (check_consistent: the same in every record).
#define MOEZERO_READ_Count(name) r.name = as_int(*v, at.field(#name));
#define MOEZERO_READ_Ms(name) r.name = as_number(*v, at.field(#name));
#define MOEZERO_READ(name, unit, source)            \
  if (const json* v = optional_member(rj, #name)) { \
    MOEZERO_READ_##unit(name)                       \
  } else {                                          \
    r.absent.push_back(#name);                      \
  }
  MOEZERO_RANK_STEP_COUNTERS(MOEZERO_READ)
#undef MOEZERO_READ
#undef MOEZERO_READ_Ms
#undef MOEZERO_READ_Count
  const At pat = at.field("peak_bytes");
  const json& peak = as_object(member(rj, "peak_bytes", at), pat);
  for (const auto& [tag, v] : peak.items())
    r.peak_bytes.emplace_back(tag, as_int(v, pat.field(tag)));
  r.peak_total_bytes = int_field(rj, "peak_total_bytes", at);
  return r;
}

StepRecord parse_step(const json& sj, const std::string& where) {
  const At at{where, ""};
  as_object(sj, at);
  StepRecord s;
  s.where = where;
  s.step = int_field(sj, "step", at);
  s.loss = optional_number(sj, "loss", at);
  s.val_loss = optional_number(sj, "val_loss", at);
  const At tat = at.field("tokens_per_expert");
  const json& tpe = as_array(member(sj, "tokens_per_expert", at), tat);
  for (size_t l = 0; l < tpe.size(); ++l) {
    const json& row = as_array(tpe[l], tat.index(l));
    std::vector<int64_t> counts;
    for (size_t e = 0; e < row.size(); ++e) counts.push_back(as_int(row[e], tat.index(l).index(e)));
    s.tokens_per_expert.push_back(std::move(counts));
  }
  if (const json* ml = optional_member(sj, "moe_layers")) {
    const At mat = at.field("moe_layers");
    as_array(*ml, mat);
    if (ml->size() != tpe.size())
      mat.fail("has " + std::to_string(ml->size()) + " layers, tokens_per_expert has " +
               std::to_string(tpe.size()));
    s.has_moe_layers = true;
    for (size_t l = 0; l < ml->size(); ++l)
      s.moe_layers.push_back(parse_layer((*ml)[l], mat.index(l), s.tokens_per_expert[l], l));
  }
  s.comm_ms = optional_number(sj, "comm_ms", at);
  s.exposed_comm_ms = optional_number(sj, "exposed_comm_ms", at);
  if (s.comm_ms && *s.comm_ms < 0) at.field("comm_ms").fail("negative");
  if (s.exposed_comm_ms && *s.exposed_comm_ms < 0) at.field("exposed_comm_ms").fail("negative");
  const At rat = at.field("ranks");
  const json& ranks = as_array(member(sj, "ranks", at), rat);
  if (ranks.empty()) rat.fail("is empty: a step has at least one rank");
  for (size_t r = 0; r < ranks.size(); ++r) s.ranks.push_back(parse_rank(ranks[r], rat.index(r)));
  return s;
}

// `rank` lacks a counter that `first`'s rank 0 has, or has one that it lacks: fails naming it.
[[noreturn]] void check_same_counters(const RankStepCounters& rank, const StepRecord& first,
                                      const At& at) {
  const auto& ref = first.ranks[0].absent;
  for (const std::string& name : rank.absent)
    if (std::find(ref.begin(), ref.end(), name) == ref.end())
      at.field(name).fail("missing field (present at " + first.where + " ranks[0])");
  for (const std::string& name : ref)
    if (std::find(rank.absent.begin(), rank.absent.end(), name) == rank.absent.end())
      at.field(name).fail("present here but missing at " + first.where +
                          " ranks[0] (a counter is in every record or in none)");
  at.fail("counters differ from " + first.where + " ranks[0]");
}

// A step that appears more than once (a run resumed from a checkpoint older than its last
// logged step, appending to the same file) counts once: its last record, the one the run went
// on from. Returns how many records were dropped.
size_t keep_last_of_repeated(std::vector<StepRecord>& steps) {
  std::map<int64_t, size_t> last;
  for (size_t i = 0; i < steps.size(); ++i) last[steps[i].step] = i;
  if (last.size() == steps.size()) return 0;
  std::vector<StepRecord> kept;
  kept.reserve(last.size());
  for (size_t i = 0; i < steps.size(); ++i)
    if (last.at(steps[i].step) == i) kept.push_back(std::move(steps[i]));
  const size_t dropped = steps.size() - kept.size();
  steps = std::move(kept);
  return dropped;
}

// Shapes that must not change between steps of one run; of a repeated step the last record
// is kept (keep_last_of_repeated).
void check_consistent(std::vector<StepRecord>& steps, const std::string& path) {
  if (steps.empty())
    MOEZERO_USER_ERROR(path,
                       ": no steps found (a metrics file needs one JSON object per line, a trace ",
                       "its \"step_metrics\" events)");
  const StepRecord& first = steps.front();
  for (const StepRecord& s : steps) {
    const At at{s.where, ""};
    if (s.ranks.size() != first.ranks.size())
      at.field("ranks").fail("has " + std::to_string(s.ranks.size()) + " ranks, " + first.where +
                             " has " + std::to_string(first.ranks.size()));
    if (s.tokens_per_expert.size() != first.tokens_per_expert.size())
      at.field("tokens_per_expert")
          .fail("has " + std::to_string(s.tokens_per_expert.size()) + " MoE layers, " +
                first.where + " has " + std::to_string(first.tokens_per_expert.size()));
    for (size_t l = 0; l < s.tokens_per_expert.size(); ++l)
      if (s.tokens_per_expert[l].size() != first.tokens_per_expert[l].size())
        at.field("tokens_per_expert")
            .index(l)
            .fail("has " + std::to_string(s.tokens_per_expert[l].size()) + " experts, " +
                  first.where + " has " + std::to_string(first.tokens_per_expert[l].size()));
    if (s.has_moe_layers != first.has_moe_layers)
      at.field("moe_layers")
          .fail(std::string(s.has_moe_layers ? "present" : "absent") + " here but not at " +
                first.where);
    for (size_t l = 0; l < s.moe_layers.size(); ++l) {
      const LayerStepCounters &c = s.moe_layers[l], &f = first.moe_layers[l];
      const At lat = at.field("moe_layers").index(l);
      if (c.layer != f.layer)
        lat.field("layer").fail("is " + std::to_string(c.layer) + ", " + first.where + " has " +
                                std::to_string(f.layer));
      if (c.prediction.has_value() != f.prediction.has_value())
        lat.field("brier_sum")
            .fail(std::string(c.prediction ? "present" : "absent") + " here but not at " +
                  first.where);
      if (c.prediction &&
          c.prediction->calibration_count.size() != f.prediction->calibration_count.size())
        lat.field("calibration_count")
            .fail("has " + std::to_string(c.prediction->calibration_count.size()) + " buckets, " +
                  first.where + " has " + std::to_string(f.prediction->calibration_count.size()));
    }
    for (size_t r = 0; r < s.ranks.size(); ++r)
      if (s.ranks[r].absent != first.ranks[0].absent)
        check_same_counters(s.ranks[r], first, at.field("ranks").index(r));
  }
  std::stable_sort(steps.begin(), steps.end(),
                   [](const StepRecord& a, const StepRecord& b) { return a.step < b.step; });
}

RunInput parse_trace(const json& doc, const std::string& path) {
  RunInput in;
  in.path = path;
  in.kind = InputKind::Trace;
  const std::string top = path;
  const json& events = as_array(doc["traceEvents"], At{top, "traceEvents"});
  for (size_t i = 0; i < events.size(); ++i) {
    const std::string where = path + ": traceEvents[" + std::to_string(i) + "]";
    const At at{where, ""};
    const json& ev = as_object(events[i], at);
    const std::string ph = as_string(member(ev, "ph", at), at.field("ph"));
    const json* cat = optional_member(ev, "cat");
    const std::string category = cat ? as_string(*cat, at.field("cat")) : std::string();
    const json* name = optional_member(ev, "name");
    const std::string nm = name ? as_string(*name, at.field("name")) : std::string();
    if (ph == "X" && category == "collective") {
      CollectiveSpan c;
      c.rank = int_field(ev, "pid", at);
      c.ts_us = number_field(ev, "ts", at);
      c.dur_us = number_field(ev, "dur", at);
      if (c.dur_us < 0) at.field("dur").fail("negative duration");
      const At aat = at.field("args");
      const json& args = as_object(member(ev, "args", at), aat);
      c.op = as_string(member(args, "op", aat), aat.field("op"));
      c.group = as_string(member(args, "group", aat), aat.field("group"));
      c.bytes = int_field(args, "bytes", aat);
      if (c.bytes < 0) aat.field("bytes").fail("negative");
      if (const json* gs = optional_member(args, "group_size")) {
        c.group_size = as_int(*gs, aat.field("group_size"));
        if (*c.group_size < 1) aat.field("group_size").fail("must be >= 1");
      }
      in.collectives.push_back(std::move(c));
    } else if (ph == "i" && nm == "step_metrics") {
      in.steps.push_back(parse_step(member(ev, "args", at), where + " (step_metrics)"));
    }
  }
  in.repeated_steps_dropped = keep_last_of_repeated(in.steps);
  check_consistent(in.steps, path);
  return in;
}

}  // namespace

RunInput parse_run(const std::string& text, const std::string& path) {
  // A trace (or any single JSON document) parses whole; a metrics file of more than one line
  // does not, and is read line by line. json::exception, not only parse_error: a number beyond
  // double's range ("1E400") is nlohmann's out_of_range (found by fuzz/report_fuzz.cpp).
  std::string whole_error;
  json whole;
  try {
    whole = json::parse(text);
  } catch (const json::exception& e) {
    whole_error = e.what();
  }
  if (whole_error.empty()) {
    if (whole.is_object() && whole.contains("traceEvents")) return parse_trace(whole, path);
    if (!whole.is_object())
      MOEZERO_USER_ERROR(
          path, ": neither a metrics file (JSON lines, one object per step) nor a trace ",
          "(an object with \"traceEvents\"): the file is one JSON ", whole.type_name());
  }
  RunInput in;
  in.path = path;
  in.kind = InputKind::Metrics;
  std::istringstream is(text);
  std::string line;
  size_t line_no = 0;
  bool first = true;
  while (std::getline(is, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      if (first && !whole_error.empty())
        MOEZERO_USER_ERROR(path, ": neither JSON lines (line ", line_no, ": ", e.what(),
                           ") nor one JSON document (", whole_error, ")");
      MOEZERO_USER_ERROR(where, ": bad JSON: ", e.what());
    }
    first = false;
    in.steps.push_back(parse_step(j, where));
  }
  in.repeated_steps_dropped = keep_last_of_repeated(in.steps);
  check_consistent(in.steps, path);
  return in;
}

RunInput read_run(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) MOEZERO_USER_ERROR(path, ": cannot open for reading");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) MOEZERO_USER_ERROR(path, ": read error");
  return parse_run(ss.str(), path);
}

}  // namespace moezero::report
