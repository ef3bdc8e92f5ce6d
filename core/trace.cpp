// core/trace.cpp — the trace recorder and sink (see trace.h).
#include "core/trace.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "core/allocator.h"
#include "core/error.h"

#ifndef MOEZERO_VERSION
#define MOEZERO_VERSION "unknown"
#endif

namespace moezero {

using nlohmann::json;

int trace_tid_of(const Stream& stream) {
  const std::string& n = stream.name();
  if (n == "compute") return kTraceTidCompute;
  if (n == "gather") return kTraceTidGather;
  if (n == "reduce") return kTraceTidReduce;
  if (n == "a2a") return kTraceTidA2a;
  return kTraceTidOther;
}

// ---- TraceSink ---------------------------------------------------------------------------

TraceSink::TraceSink(std::string path, std::string other_data_json)
    : path_(std::move(path)), other_data_(std::move(other_data_json)) {
  if (path_.empty()) return;  // collects only
  std::ofstream probe(path_, std::ios::trunc);
  if (!probe) MOEZERO_THROW("profile.trace: cannot write the trace file '", path_, "'");
}

void TraceSink::append(std::vector<TraceEvent> events) {
  std::lock_guard lock(mu_);
  events_.insert(events_.end(), std::make_move_iterator(events.begin()),
                 std::make_move_iterator(events.end()));
}

size_t TraceSink::event_count() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

namespace {

std::string serialise(const TraceEvent& e) {
  using K = TraceEvent::Kind;
  if (e.kind == K::Raw) return e.raw;
  json j{{"name", e.name}, {"ts", e.ts}, {"pid", e.pid}, {"tid", e.tid}};
  switch (e.kind) {
    case K::Span:
    case K::Expert:
    case K::Experts:
    case K::Collective:
      j["ph"] = "X";
      j["dur"] = e.dur;
      j["cat"] = e.cat;
      break;
    case K::Cache:
      j["ph"] = "i";
      j["s"] = "t";
      j["cat"] = e.cat;
      break;
    case K::Counter:
    case K::Memory: j["ph"] = "C"; break;
    case K::Raw: break;
  }
  switch (e.kind) {
    case K::Span: j["args"] = {{"step", e.step}}; break;
    case K::Expert:
      j["args"] = {{"layer", e.layer},
                   {"expert", e.expert},
                   {"tokens", e.value},
                   {"pass", e.backward ? "bwd" : "fwd"},
                   {"step", e.step}};
      if (e.flops > 0) j["args"]["flops"] = e.flops;
      if (e.derived) j["args"]["timing"] = "flops share";
      break;
    case K::Experts:
      j["args"] = {{"layer", e.layer},
                   {"experts", e.expert},
                   {"tokens", e.value},
                   {"flops", e.flops},
                   {"pass", e.backward ? "bwd" : "fwd"},
                   {"step", e.step}};
      break;
    case K::Collective:
      // algbw: bytes over the span's duration (nccl-tests' size / time), GB/s = 1e9 B/s
      j["args"] = {{"op", collective_op_name(e.op)},
                   {"group", e.group},
                   {"group_size", e.group_size},
                   {"channel", e.channel},
                   {"bytes", e.value},
                   {"gbps", e.dur > 0.0 ? static_cast<double>(e.value) / (e.dur * 1e3) : 0.0},
                   {"step", e.step}};
      break;
    case K::Cache:
      j["args"] = {{"group", e.group},
                   {"layer", e.layer},
                   {"expert", e.expert},
                   {"bytes", e.value},
                   {"step", e.step}};
      break;
    case K::Counter: j["args"] = {{"bytes", e.value}}; break;
    case K::Memory: {
      json args = json::object();
      for (size_t t = 0; t < e.memory.size() && t < kMemTagCount; ++t)
        args[mem_tag_name(static_cast<MemTag>(t))] = e.memory[t];
      j["args"] = std::move(args);
      break;
    }
    default: break;
  }
  return j.dump();
}

}  // namespace

void TraceSink::write_events(std::ostream& os) const {
  bool first = true;
  for (const TraceEvent& e : events_)
    os << (std::exchange(first, false) ? "" : ",\n") << serialise(e);
  for (const std::string& text : foreign_) os << (std::exchange(first, false) ? "" : ",\n") << text;
}

std::string TraceSink::serialised_events() const {
  std::ostringstream os;
  std::lock_guard lock(mu_);
  write_events(os);
  return os.str();
}

void TraceSink::append_serialised(std::string events_json) {
  if (events_json.empty()) return;
  std::lock_guard lock(mu_);
  foreign_.push_back(std::move(events_json));
}

void TraceSink::write(const std::string& error) const {
  MOEZERO_CHECK(!path_.empty(), "TraceSink::write: this sink has no file (it only collects)");
  json other = other_data_.empty() ? json::object() : json::parse(other_data_);
  other["moezero_version"] = MOEZERO_VERSION;
  if (!error.empty()) other["error"] = error;
  std::ofstream f(path_, std::ios::trunc);
  if (!f) MOEZERO_THROW("profile.trace: cannot write the trace file '", path_, "'");
  f << "{\"traceEvents\": [\n";
  {
    std::lock_guard lock(mu_);
    write_events(f);
  }
  f << "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": " << other.dump() << "}\n";
  f.flush();
  if (!f) MOEZERO_THROW("profile.trace: writing the trace file '", path_, "' failed");
}

// ---- TraceRecorder -----------------------------------------------------------------------

TraceRecorder::TraceRecorder(Device& device, Stream& compute, int rank, TraceSink* sink,
                             StepList steps)
    : device_(device),
      compute_(compute),
      rank_(rank),
      sink_(sink),
      steps_(std::move(steps)),
      events_(device) {
  run_base_ = device_.create_event();
  step_base_ = device_.create_event();
  run_base_->record(compute_);
  run_base_->synchronize();  // once per run: this rank's device clock on the run's clock
  rank_offset_us_ = host_now_us();
  if (sink_) {  // track names
    std::vector<TraceEvent> meta;
    auto raw = [](std::string text) {
      TraceEvent e;
      e.kind = TraceEvent::Kind::Raw;
      e.raw = std::move(text);
      return e;
    };
    auto name_event = [&](const char* what, int tid, const std::string& name) {
      meta.push_back(raw(json{
          {"name", what},
          {"ph", "M"},
          {"ts", 0},
          {"pid", rank_},
          {"tid", tid},
          {"args",
           {{"name", name}}}}.dump()));
    };
    name_event("process_name", 0, "rank " + std::to_string(rank_));
    meta.push_back(raw(json{{"name", "process_sort_index"},
                            {"ph", "M"},
                            {"ts", 0},
                            {"pid", rank_},
                            {"tid", 0},
                            {"args", {{"sort_index", rank_}}}}
                           .dump()));
    name_event("thread_name", kTraceTidCompute, "compute");
    name_event("thread_name", kTraceTidGather, "gather");
    name_event("thread_name", kTraceTidReduce, "reduce");
    name_event("thread_name", kTraceTidA2a, "a2a");
    name_event("thread_name", kTraceTidOther, "other streams");
    name_event("thread_name", kTraceTidHost, "host");
    sink_->append(std::move(meta));
  }
}

TraceRecorder::~TraceRecorder() = default;

double TraceRecorder::host_now_us() const {
  if (!sink_) return 0.0;
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                   sink_->run_start())
      .count();
}

void TraceRecorder::begin_step(int64_t step) {
  step_ = step;
  tracing_ = sink_ != nullptr && steps_.contains(step);
  step_base_->record(compute_);
}

int TraceRecorder::open(Stream& stream, Span span) {
  span.tid = trace_tid_of(stream);
  span.stream = &stream;
  span.start = &events_.take();
  span.start->record(stream);
  spans_.push_back(std::move(span));
  return static_cast<int>(spans_.size()) - 1;
}

int TraceRecorder::begin_span(Stream& stream, SpanKind kind, std::string name) {
  if (!tracing_) return -1;
  if (kind == SpanKind::Compute) sample_memory();
  Span s;
  s.cat = kind == SpanKind::Compute ? Cat::Compute : Cat::Stall;
  s.traced = true;
  s.name = std::move(name);
  return open(stream, std::move(s));
}

int TraceRecorder::begin_expert(Stream& stream, int layer, int expert, int64_t tokens,
                                TracePass pass) {
  const bool backward = pass == TracePass::Backward;
  if (!tracing_) return -1;
  Span s;
  s.cat = Cat::Expert;
  s.traced = true;
  s.name = "layers." + std::to_string(layer) + ".experts." + std::to_string(expert) +
           (backward ? " bwd" : " fwd");
  s.layer = layer;
  s.expert = expert;
  s.tokens = tokens;
  s.backward = backward;
  return open(stream, std::move(s));
}

int TraceRecorder::begin_experts(Stream& stream, int layer, TracePass pass,
                                 std::vector<ExpertShare> experts) {
  if (!tracing_) return -1;
  Span s;
  s.cat = Cat::Experts;
  s.traced = true;
  s.backward = pass == TracePass::Backward;
  s.name = "layers." + std::to_string(layer) + ".experts" + (s.backward ? " bwd" : " fwd");
  s.layer = layer;
  s.shares = std::move(experts);
  return open(stream, std::move(s));
}

void TraceRecorder::end_span(int span) {
  if (span < 0) return;
  Span& s = spans_.at(static_cast<size_t>(span));
  MOEZERO_CHECK(s.end == nullptr, "trace span '", s.name, "' ended twice");
  s.end = &events_.take();
  s.end->record(*s.stream);  // the stream the span began on
}

int TraceRecorder::begin_window(Stream& stream) {
  Span s;
  s.cat = Cat::Window;
  return open(stream, std::move(s));
}

void TraceRecorder::end_window(int window) { end_span(window); }

void TraceRecorder::a2a_wait(Stream& waiter, const Event& ready) {
  Span s;
  s.cat = Cat::Stall;
  s.traced = tracing_;
  s.a2a_wait = true;
  s.comm_wait = true;
  if (tracing_) s.name = "wait a2a";
  const int id = open(waiter, std::move(s));
  waiter.wait(ready);
  end_span(id);
}

void TraceRecorder::comm_wait(Stream& waiter, const Event& ready, const char* name) {
  Span s;
  s.cat = Cat::Stall;
  s.traced = tracing_ && name != nullptr && name[0] != '\0';
  s.comm_wait = true;
  if (s.traced) s.name = name;
  const int id = open(waiter, std::move(s));
  waiter.wait(ready);
  end_span(id);
}

uint64_t TraceRecorder::begin_collective(const Communicator& comm, CollectiveOp op, uint64_t bytes,
                                         Stream& stream) {
  Span s;
  s.cat = Cat::Collective;
  s.traced = tracing_;
  s.op = op;
  s.bytes = bytes;
  s.speculative = speculative_;
  if (tracing_) {
    s.group = comm.group().name;
    s.group_size = comm.size();
    s.channel = comm.channel();
    s.name =
        std::string(collective_op_name(op)) + " " + (next_label_.empty() ? s.group : next_label_);
  }
  next_label_.clear();
  return static_cast<uint64_t>(open(stream, std::move(s)));
}

void TraceRecorder::end_collective(uint64_t token, Stream&) { end_span(static_cast<int>(token)); }

TraceEvent TraceRecorder::host_event(TraceEvent::Kind kind, std::string name) const {
  TraceEvent e;
  e.kind = kind;
  e.pid = rank_;
  e.tid = kTraceTidHost;
  e.ts = host_now_us();
  e.step = step_;
  e.name = std::move(name);
  return e;
}

void TraceRecorder::cache_event(const char* kind, const std::string& group, int layer, int expert,
                                uint64_t bytes) {
  if (!tracing_) return;
  TraceEvent e = host_event(TraceEvent::Kind::Cache, kind);
  e.cat = "cache";
  e.group = group;
  e.layer = layer;
  e.expert = expert;
  e.value = bytes;
  host_events_.push_back(std::move(e));
}

void TraceRecorder::counter(const char* name, uint64_t value) {
  if (!tracing_) return;
  TraceEvent e = host_event(TraceEvent::Kind::Counter, name);
  e.value = value;
  host_events_.push_back(std::move(e));
}

void TraceRecorder::sample_memory() {
  if (!tracing_) return;
  const MemStats m = device_.allocator().stats();
  TraceEvent e = host_event(TraceEvent::Kind::Memory, "memory");
  e.memory.assign(m.current_bytes.begin(), m.current_bytes.end());
  host_events_.push_back(std::move(e));
}

void TraceRecorder::step_metrics(const std::string& metrics_json) {
  if (!sink_) return;
  TraceEvent e;
  e.kind = TraceEvent::Kind::Raw;
  e.raw = json{{"name", "step_metrics"}, {"cat", "step"}, {"ph", "i"},           {"s", "g"},
               {"ts", host_now_us()},    {"pid", 0},      {"tid", kTraceTidHost}}
              .dump();
  e.raw.pop_back();  // '}': splice the metrics object in as args without re-parsing it
  e.raw += ",\"args\":" + metrics_json + "}";
  sink_->append({std::move(e)});
}

std::vector<Interval> merged(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.lo < b.lo; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (i.hi <= i.lo) continue;
    if (!out.empty() && i.lo <= out.back().hi)
      out.back().hi = std::max(out.back().hi, i.hi);
    else
      out.push_back(i);
  }
  return out;
}

double measure(const std::vector<Interval>& v) {
  double total = 0.0;
  for (const Interval& i : v) total += i.hi - i.lo;
  return total;
}

double measure_intersection(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  double total = 0.0;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    total += std::max(0.0, std::min(a[i].hi, b[j].hi) - std::max(a[i].lo, b[j].lo));
    (a[i].hi < b[j].hi ? i : j) += 1;
  }
  return total;
}

double TraceRecorder::resolve(const Span& s, double step_offset_us,
                              std::vector<TraceEvent>& out) const {
  s.start->synchronize();  // complete by contract (finish_step); returns at once
  s.end->synchronize();
  const double t0 = s.start->elapsed_ms_since(*step_base_);
  const double t1 = s.end->elapsed_ms_since(*step_base_);
  if (s.traced) {
    TraceEvent e;
    e.pid = rank_;
    e.tid = s.tid;
    e.ts = step_offset_us + t0 * 1000.0;
    e.dur = std::max(0.0, (step_offset_us + t1 * 1000.0) - e.ts);
    e.step = step_;
    e.name = s.name;
    switch (s.cat) {
      case Cat::Compute: e.cat = "compute"; break;
      case Cat::Stall: e.cat = "stall"; break;
      case Cat::Expert:
        e.kind = TraceEvent::Kind::Expert;
        e.cat = "expert";
        e.layer = s.layer;
        e.expert = s.expert;
        e.value = static_cast<uint64_t>(s.tokens);
        e.backward = s.backward;
        break;
      case Cat::Experts:
        e.kind = TraceEvent::Kind::Experts;
        e.cat = "experts";
        e.layer = s.layer;
        e.backward = s.backward;
        e.expert = static_cast<int>(s.shares.size());
        for (const ExpertShare& x : s.shares) {
          e.value += static_cast<uint64_t>(x.tokens);
          e.flops += x.flops;
        }
        break;
      case Cat::Collective:
        e.kind = TraceEvent::Kind::Collective;
        e.cat = "collective";
        e.op = s.op;
        e.group = s.group;
        e.group_size = s.group_size;
        e.channel = s.channel;
        e.value = s.bytes;
        break;
      case Cat::Window: break;  // never traced (begin_window)
    }
    out.push_back(e);
    if (s.cat == Cat::Experts) share_out(s, e, out);
  }
  return std::max(0.0, t1 - t0);
}

void TraceRecorder::share_out(const Span& s, const TraceEvent& call, std::vector<TraceEvent>& out) {
  // Weights: flops; all zero: tokens; all zero too: equal shares.
  auto weight = [&](const ExpertShare& x, int basis) {
    return basis == 0   ? static_cast<double>(x.flops)
           : basis == 1 ? static_cast<double>(x.tokens)
                        : 1.0;
  };
  int basis = 0;
  double total = 0.0;
  for (; basis < 3; ++basis) {
    total = 0.0;
    for (const ExpertShare& x : s.shares) total += weight(x, basis);
    if (total > 0.0) break;
  }
  double before = 0.0;
  for (const ExpertShare& x : s.shares) {
    TraceEvent e = call;
    e.kind = TraceEvent::Kind::Expert;
    e.cat = "expert";
    e.name = "layers." + std::to_string(s.layer) + ".experts." + std::to_string(x.expert) +
             (s.backward ? " bwd" : " fwd");
    e.expert = x.expert;
    e.value = static_cast<uint64_t>(x.tokens);
    e.flops = x.flops;
    e.derived = true;
    const double after = before + weight(x, basis);
    e.ts = call.ts + call.dur * (before / total);
    e.dur = std::max(0.0, call.ts + call.dur * (after / total) - e.ts);
    before = after;
    out.push_back(std::move(e));
  }
}

StepTiming TraceRecorder::finish_step() {
  StepTiming t;
  step_base_->synchronize();
  const double step_offset_us =
      rank_offset_us_ + 1000.0 * static_cast<double>(step_base_->elapsed_ms_since(*run_base_));
  for (const Span& s : spans_)
    MOEZERO_CHECK(s.end != nullptr, "trace span '", s.name, "' is still open at the end of step ",
                  step_);
  std::vector<TraceEvent> out;
  std::vector<Interval> comm, waits, windows, busy;  // ms since the step's base event
  for (Span& s : spans_) {
    const double dur_ms = resolve(s, step_offset_us, out);
    const double t0 = s.start->elapsed_ms_since(*step_base_), t1 = t0 + dur_ms;
    if (s.cat == Cat::Collective) comm.push_back({t0, t1});
    if (s.cat == Cat::Collective && !s.speculative) busy.push_back({t0, t1});
    if (s.cat == Cat::Window) windows.push_back({t0, t1});
    if ((s.cat == Cat::Collective && s.stream == &compute_) || s.comm_wait)
      waits.push_back({t0, t1});
    if (s.a2a_wait) t.a2a_wait_ms += dur_ms;
  }
  comm = merged(std::move(comm));
  t.comm_ms = measure(comm);
  t.exposed_comm_ms = std::min(t.comm_ms, measure_intersection(merged(std::move(waits)), comm));
  busy = merged(std::move(busy));
  for (const Interval& w : windows)  // each window alone: windows of one step do not overlap
    t.idle_link_ms += std::max(0.0, (w.hi - w.lo) - measure_intersection({w}, busy));
  spans_.clear();
  events_.recycle();  // every span's events are read
  if (tracing_ && sink_) {
    out.insert(out.end(), std::make_move_iterator(host_events_.begin()),
               std::make_move_iterator(host_events_.end()));
    sink_->append(std::move(out));
  }
  host_events_.clear();
  last_traced_ = tracing_;
  tracing_ = false;
  return t;
}

}  // namespace moezero
