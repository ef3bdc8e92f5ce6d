// core/trace.cpp — the trace recorder and sink (see trace.h).
#include "core/trace.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

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
  std::ofstream probe(path_, std::ios::trunc);
  if (!probe) MOEZERO_THROW("profile.trace: cannot write the trace file '", path_, "'");
}

void TraceSink::append(std::vector<std::string> events) {
  std::lock_guard lock(mu_);
  events_.insert(events_.end(), std::make_move_iterator(events.begin()),
                 std::make_move_iterator(events.end()));
}

size_t TraceSink::event_count() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

void TraceSink::write(const std::string& error) const {
  json other = other_data_.empty() ? json::object() : json::parse(other_data_);
  other["moezero_version"] = MOEZERO_VERSION;
  if (!error.empty()) other["error"] = error;
  std::ofstream f(path_, std::ios::trunc);
  if (!f) MOEZERO_THROW("profile.trace: cannot write the trace file '", path_, "'");
  f << "{\"traceEvents\": [\n";
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < events_.size(); ++i) f << (i ? ",\n" : "") << events_[i];
  }
  f << "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": " << other.dump() << "}\n";
  f.flush();
  if (!f) MOEZERO_THROW("profile.trace: writing the trace file '", path_, "' failed");
}

// ---- TraceRecorder -----------------------------------------------------------------------

TraceRecorder::TraceRecorder(Device& device, Stream& compute, int rank, TraceSink* sink,
                             StepList steps)
    : device_(device), compute_(compute), rank_(rank), sink_(sink), steps_(std::move(steps)) {
  run_base_ = device_.create_event();
  step_base_ = device_.create_event();
  run_base_->record(compute_);
  run_base_->synchronize();  // once per run: this rank's device clock on the run's clock
  rank_offset_us_ = host_now_us();
  if (sink_) {  // track names
    std::vector<std::string> meta;
    auto name_event = [&](const char* what, int tid, const std::string& name) {
      meta.push_back(json{{"name", what},
                          {"ph", "M"},
                          {"ts", 0},
                          {"pid", rank_},
                          {"tid", tid},
                          {"args", {{"name", name}}}}
                         .dump());
    };
    name_event("process_name", 0, "rank " + std::to_string(rank_));
    meta.push_back(json{{"name", "process_sort_index"},
                        {"ph", "M"},
                        {"ts", 0},
                        {"pid", rank_},
                        {"tid", 0},
                        {"args", {{"sort_index", rank_}}}}
                       .dump());
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

Event* TraceRecorder::take_event() {
  if (free_.empty()) {
    events_.push_back(device_.create_event());
    return events_.back().get();
  }
  Event* e = free_.back();
  free_.pop_back();
  return e;
}

void TraceRecorder::begin_step(int64_t step) {
  step_ = step;
  tracing_ = sink_ != nullptr && steps_.contains(step);
  step_base_->record(compute_);
}

int TraceRecorder::open(Stream& stream, Span span) {
  span.tid = trace_tid_of(stream);
  span.stream = &stream;
  span.start = take_event();
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

void TraceRecorder::end_span(int span) {
  if (span < 0) return;
  Span& s = spans_.at(static_cast<size_t>(span));
  MOEZERO_CHECK(s.end == nullptr, "trace span '", s.name, "' ended twice");
  s.end = take_event();
  s.end->record(*s.stream);  // the stream the span began on
}

void TraceRecorder::a2a_wait(Stream& waiter, const Event& ready) {
  Span s;
  s.cat = Cat::Stall;
  s.traced = tracing_;
  s.a2a_wait = true;
  if (tracing_) s.name = "wait a2a";
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
  if (tracing_) {
    s.group = comm.group().name;
    s.channel = comm.channel();
    s.name =
        std::string(collective_op_name(op)) + " " + (next_label_.empty() ? s.group : next_label_);
  }
  next_label_.clear();
  return static_cast<uint64_t>(open(stream, std::move(s)));
}

void TraceRecorder::end_collective(uint64_t token, Stream&) { end_span(static_cast<int>(token)); }

void TraceRecorder::cache_event(const char* kind, const std::string& group, int layer, int expert,
                                uint64_t bytes) {
  if (!tracing_) return;
  host_events_.push_back(json{
      {"name", kind},
      {"cat", "cache"},
      {"ph", "i"},
      {"s", "t"},
      {"ts", host_now_us()},
      {"pid", rank_},
      {"tid", kTraceTidHost},
      {"args",
       {{"group", group}, {"layer", layer}, {"expert", expert}, {"bytes", bytes}, {"step", step_}}}}
                             .dump());
}

void TraceRecorder::counter(const char* name, uint64_t value) {
  if (!tracing_) return;
  host_events_.push_back(json{
      {"name", name},
      {"ph", "C"},
      {"ts", host_now_us()},
      {"pid", rank_},
      {"tid", kTraceTidHost},
      {"args",
       {{"bytes", value}}}}.dump());
}

void TraceRecorder::sample_memory() {
  if (!tracing_) return;
  const MemStats m = device_.allocator().stats();
  json args = json::object();
  for (size_t t = 0; t < kMemTagCount; ++t)
    args[mem_tag_name(static_cast<MemTag>(t))] = m.current_bytes[t];
  host_events_.push_back(json{
      {"name", "memory"},
      {"ph", "C"},
      {"ts", host_now_us()},
      {"pid", rank_},
      {"tid", kTraceTidHost},
      {"args", args}}.dump());
}

void TraceRecorder::step_metrics(const std::string& metrics_json) {
  if (!sink_) return;
  std::string e = json{{"name", "step_metrics"}, {"cat", "step"}, {"ph", "i"},           {"s", "g"},
                       {"ts", host_now_us()},    {"pid", 0},      {"tid", kTraceTidHost}}
                      .dump();
  e.pop_back();  // '}': splice the metrics object in as args without re-parsing it
  e += ",\"args\":" + metrics_json + "}";
  sink_->append({std::move(e)});
}

std::string TraceRecorder::resolve(const Span& s, double step_offset_us, double& dur_ms) const {
  s.start->synchronize();  // complete by contract (finish_step); returns at once
  s.end->synchronize();
  const double t0 = s.start->elapsed_ms_since(*step_base_);
  const double t1 = s.end->elapsed_ms_since(*step_base_);
  dur_ms = std::max(0.0, t1 - t0);
  if (!s.traced) return {};
  const double ts = step_offset_us + t0 * 1000.0;
  const double dur = std::max(0.0, (step_offset_us + t1 * 1000.0) - ts);
  json e{{"name", s.name}, {"ph", "X"}, {"ts", ts}, {"dur", dur}, {"pid", rank_}, {"tid", s.tid}};
  switch (s.cat) {
    case Cat::Compute: e["cat"] = "compute"; break;
    case Cat::Stall: e["cat"] = "stall"; break;
    case Cat::Expert:
      e["cat"] = "expert";
      e["args"] = {{"layer", s.layer},
                   {"expert", s.expert},
                   {"tokens", s.tokens},
                   {"pass", s.backward ? "bwd" : "fwd"}};
      break;
    case Cat::Collective:
      e["cat"] = "collective";
      // algbw: bytes over the span's duration (nccl-tests' size / time), GB/s = 1e9 B/s
      e["args"] = {{"op", collective_op_name(s.op)},
                   {"group", s.group},
                   {"channel", s.channel},
                   {"bytes", s.bytes},
                   {"gbps", dur > 0.0 ? static_cast<double>(s.bytes) / (dur * 1e3) : 0.0},
                   {"step", step_}};
      break;
  }
  return e.dump();
}

StepTiming TraceRecorder::finish_step() {
  StepTiming t;
  step_base_->synchronize();
  const double step_offset_us =
      rank_offset_us_ + 1000.0 * static_cast<double>(step_base_->elapsed_ms_since(*run_base_));
  std::vector<std::string> out;
  for (const Span& s : spans_)
    MOEZERO_CHECK(s.end != nullptr, "trace span '", s.name, "' is still open at the end of step ",
                  step_);
  for (Span& s : spans_) {
    double dur_ms = 0.0;
    std::string e = resolve(s, step_offset_us, dur_ms);
    if (s.cat == Cat::Collective && s.stream != &compute_) t.comm_ms += dur_ms;
    if (s.a2a_wait) t.a2a_wait_ms += dur_ms;
    if (!e.empty()) out.push_back(std::move(e));
    free_.push_back(s.start);
    free_.push_back(s.end);
  }
  spans_.clear();
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
