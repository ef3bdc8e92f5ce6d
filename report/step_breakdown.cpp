// report/step_breakdown.cpp — "where the step goes" from a trace's spans (step_breakdown.h).
#include "report/step_breakdown.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "core/error.h"

namespace moezero::report {

namespace {

using nlohmann::json;

constexpr int kComputeTid = 0;   // core/trace.h kTraceTidCompute
constexpr double kEpsUs = 1e-3;  // rounding of ts + dur in the file

struct Span {
  int64_t pid = 0, tid = 0, step = -1;
  double ts = 0.0, end = 0.0;  // microseconds
  std::string name, cat, op;
  std::optional<double> flops, bytes;
};

std::optional<double> number_arg(const json& args, const char* key) {
  if (!args.is_object() || !args.contains(key) || !args[key].is_number()) return std::nullopt;
  return args[key].get<double>();
}

// The X spans of the trace, without the derived per-expert ones.
std::vector<Span> read_spans(const json& trace, const std::string& where, bool& has_steps) {
  if (!trace.is_object() || !trace.contains("traceEvents") || !trace["traceEvents"].is_array())
    MOEZERO_USER_ERROR(where, ": not a trace (no traceEvents array)");
  std::vector<Span> spans;
  const json& ev = trace["traceEvents"];
  for (size_t i = 0; i < ev.size(); ++i) {
    const json& e = ev[i];
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    auto need = [&](const char* key, bool number) {
      if (!e.contains(key) || (number ? !e[key].is_number() : !e[key].is_string()))
        MOEZERO_USER_ERROR(where, ": traceEvents[", i, "]: '", key, "' missing or mistyped");
    };
    need("ts", true), need("dur", true), need("pid", true), need("tid", true), need("name", false);
    const json args = e.value("args", json::object());
    if (e.value("cat", "") == "expert" && args.is_object() && args.value("timing", "") != "")
      continue;  // derived from its "experts" span
    Span s;
    s.pid = e["pid"].get<int64_t>();
    s.tid = e["tid"].get<int64_t>();
    s.ts = e["ts"].get<double>();
    s.end = s.ts + e["dur"].get<double>();
    s.name = e["name"].get<std::string>();
    s.cat = e.value("cat", "");
    if (args.is_object() && args.contains("op") && args["op"].is_string()) s.op = args["op"];
    if (const auto st = number_arg(args, "step"))
      s.step = static_cast<int64_t>(*st);
    else
      has_steps = false;
    s.flops = number_arg(args, "flops");
    if (s.cat == "collective") s.bytes = number_arg(args, "bytes");
    spans.push_back(std::move(s));
  }
  return spans;
}

std::string without_layer(const std::string& name) {  // "layers.3.attn fwd" -> "attn fwd"
  if (name.rfind("layers.", 0) != 0) return name;
  const size_t dot = name.find('.', 7);
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

// The compute stream's waits with fixed names (zero/, train/: comm_wait); every other stall
// is "wait <parameter group>", a wait on that group's gather.
bool fixed_wait(const std::string& name) {
  for (const char* w : {"wait a2a", "wait replicated params", "wait reduce-scatter", "wait gathers",
                        "wait streams"})
    if (name == w) return true;
  return false;
}

std::string kind_of(const Span& s) {
  if (s.cat == "stall") return fixed_wait(s.name) ? s.name : "wait gather";
  if (s.cat == "collective" && !s.op.empty()) return s.op;
  return without_layer(s.name);
}

struct Acc {
  double count = 0.0, us = 0.0, flops = 0.0, bytes = 0.0;
  bool all_flops = true, all_bytes = true;
  void add(const Span& s) {
    count += 1.0;
    us += s.end - s.ts;
    all_flops = all_flops && s.flops.has_value();
    all_bytes = all_bytes && s.bytes.has_value();
    flops += s.flops.value_or(0.0);
    bytes += s.bytes.value_or(0.0);
  }
};

std::vector<BreakdownRow> rows_of(const std::map<std::string, Acc>& accs, double groups,
                                  double step_us) {
  std::vector<BreakdownRow> rows;
  for (const auto& [key, a] : accs) {
    BreakdownRow r;
    r.key = key;
    r.count = a.count / groups;
    r.ms = a.us / 1e3 / groups;
    r.share = step_us > 0.0 ? a.us / step_us : 0.0;
    if (a.all_flops && a.us > 0.0) r.tflops = a.flops / (a.us * 1e-6) / 1e12;
    if (a.all_bytes && a.us > 0.0) r.gbps = a.bytes / (a.us * 1e-6) / 1e9;
    rows.push_back(std::move(r));
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const BreakdownRow& a, const BreakdownRow& b) { return a.ms > b.ms; });
  return rows;
}

}  // namespace

StepBreakdown compute_step_breakdown(const std::string& trace_json, const std::string& where) {
  json trace = json::parse(trace_json, nullptr, false);
  if (trace.is_discarded()) MOEZERO_USER_ERROR(where, ": not valid JSON");
  StepBreakdown b;
  std::vector<Span> spans = read_spans(trace, where, b.has_step_args);
  std::map<std::pair<int64_t, int64_t>, std::vector<const Span*>> groups;  // (pid, step)
  for (const Span& s : spans) groups[{s.pid, b.has_step_args ? s.step : -1}].push_back(&s);
  std::map<std::string, Acc> kinds, modules;
  double step_us = 0.0, covered_us = 0.0;
  for (auto& [key, g] : groups) {
    double lo = g.front()->ts, hi = g.front()->end;
    for (const Span* s : g) lo = std::min(lo, s->ts), hi = std::max(hi, s->end);
    step_us += hi - lo;
    std::vector<const Span*> compute;
    for (const Span* s : g)
      if (s->tid == kComputeTid) compute.push_back(s);
    std::sort(compute.begin(), compute.end(), [](const Span* a, const Span* c) {
      return a->ts != c->ts ? a->ts < c->ts : a->end > c->end;
    });
    const Span* top = nullptr;  // the enclosing top-level span
    for (const Span* s : compute) {
      if (top == nullptr || s->ts >= top->end - kEpsUs) {
        top = s;
        covered_us += s->end - s->ts;
        kinds[kind_of(*s)].add(*s);
        modules[s->name].add(*s);
      } else {
        kinds[kind_of(*top) + " > " + kind_of(*s)].add(*s);
        modules[top->name + " > " + kind_of(*s)].add(*s);
      }
    }
  }
  b.rank_steps = static_cast<int64_t>(groups.size());
  if (groups.empty()) return b;
  const double n = static_cast<double>(groups.size());
  b.step_ms = step_us / 1e3 / n;
  b.by_kind = rows_of(kinds, n, step_us);
  b.by_module = rows_of(modules, n, step_us);
  BreakdownRow idle;
  idle.key = "(no compute span)";
  idle.ms = std::max(0.0, step_us - covered_us) / 1e3 / n;
  idle.share = step_us > 0.0 ? std::max(0.0, step_us - covered_us) / step_us : 0.0;
  b.by_kind.push_back(idle);
  b.by_module.push_back(idle);
  return b;
}

StepBreakdown read_step_breakdown(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) MOEZERO_USER_ERROR(path, ": cannot open for reading");
  std::stringstream ss;
  ss << f.rdbuf();
  return compute_step_breakdown(ss.str(), path);
}

namespace {

void write_table(std::ostream& os, const char* first, const std::vector<BreakdownRow>& rows) {
  size_t w = std::string(first).size();
  for (const BreakdownRow& r : rows) w = std::max(w, r.key.size());
  auto opt = [](const std::optional<double>& v, const char* f) {
    char buf[32];
    if (!v) return std::string("-");
    std::snprintf(buf, sizeof buf, f, *v);
    return std::string(buf);
  };
  char line[512];
  std::snprintf(line, sizeof line, "%-*s  %8s  %10s  %7s  %8s  %8s\n", static_cast<int>(w), first,
                "count", "ms/step", "share", "TFLOP/s", "GB/s");
  os << line << std::string(w + 52, '-') << "\n";
  for (const BreakdownRow& r : rows) {
    std::snprintf(line, sizeof line, "%-*s  %8.1f  %10.3f  %6.1f%%  %8s  %8s\n",
                  static_cast<int>(w), r.key.c_str(), r.count, r.ms, 100.0 * r.share,
                  opt(r.tflops, "%.3f").c_str(), opt(r.gbps, "%.2f").c_str());
    os << line;
  }
}

}  // namespace

void write_step_breakdown(std::ostream& os, const StepBreakdown& b) {
  char head[160];
  std::snprintf(head, sizeof head,
                "\n== Where the step goes: compute stream, mean per step over %lld rank-steps "
                "(step %.3f ms) ==\n",
                static_cast<long long>(b.rank_steps), b.step_ms);
  os << head;
  if (b.rank_steps == 0) {
    os << "(the trace has no spans)\n";
    return;
  }
  if (!b.has_step_args)
    os << "(spans without args.step: an older trace; each rank's spans form one group)\n";
  os << "Nested spans are listed as 'outer > inner' (their time is inside the outer's).\n";
  write_table(os, "kind", b.by_kind);
  os << "\n";
  write_table(os, "module", b.by_module);
}

}  // namespace moezero::report
