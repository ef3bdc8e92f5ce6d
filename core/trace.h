// core/trace.h — the trace recorder: per rank, spans on the streams where work runs (kernel
// groups, collectives, expert compute, stalls), cache instants and counters, written as Chrome
// trace-event JSON that Perfetto and chrome://tracing open (docs/trace.md).
//
// Timing comes from device events, never host clocks: a span records a start and an end event
// on its stream (from a pool, reused across steps); nothing is resolved until the caller says
// the step's work is finished (finish_step, after the step's host sync), so tracing adds no
// host synchronisation. Timestamps are microseconds since the run's start: each rank records a
// base event once (and synchronises once, at construction) to place its device timeline on the
// shared host clock of the run; each step's events are resolved against a per-step base event,
// so float event timers keep sub-microsecond resolution however long the run.
//
// Two levels:
// - Timing, always on while a recorder is installed: every collective (CollectiveObserver) and
//   every wait of the compute stream on communication are timed, giving the step's comm_ms,
//   exposed_comm_ms and a2a_wait_ms (StepTiming); two pooled events per call.
// - Tracing, on the steps profile.steps selects (tracing() == true): spans, instants and
//   counters become trace events. Callers guard their work (string building) with tracing():
//   one branch when off.
//
// Threading: a recorder belongs to one rank; every call comes from that rank's host thread.
// A TraceSink is shared by the ranks of a run (thread-safe) and writes the file.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "core/device.h"
#include "core/event_pool.h"
#include "core/step_list.h"

namespace moezero {

// Track (Chrome "tid") of each stream, by Stream::name(); other names get kTraceTidOther.
constexpr int kTraceTidCompute = 0;
constexpr int kTraceTidGather = 1;
constexpr int kTraceTidReduce = 2;
constexpr int kTraceTidA2a = 3;
constexpr int kTraceTidOther = 4;
constexpr int kTraceTidHost = 9;  // host-side instants and counters
int trace_tid_of(const Stream& stream);

enum class TracePass : uint8_t { Forward, Backward };  // "fwd", "bwd"

enum class SpanKind : uint8_t {
  Compute,  // cat "compute": a kernel group (a module's forward or backward)
  Stall,    // cat "stall": the compute stream waiting on a gather or the token all-to-all
};

// One resolved trace event, kept typed until the file is written (serialising costs more than
// recording; it happens after the run, outside the steps).
struct TraceEvent {
  enum class Kind : uint8_t { Span, Expert, Experts, Collective, Cache, Counter, Memory, Raw };
  Kind kind = Kind::Span;
  const char* cat = "";  // static: "compute", "stall", ...
  int pid = 0, tid = 0;
  double ts = 0.0, dur = 0.0;  // microseconds since the run's start
  int64_t step = 0;
  std::string name;
  // Expert: layer, expert, value = tokens, backward, flops. Experts (a grouped call of several
  // experts): layer, value = tokens, backward, flops, expert = how many experts.
  // Cache: group, layer, expert, value = bytes.
  // Collective: op, group, group_size, channel, value = bytes. Counter: value.
  int layer = -1, expert = -1;
  uint64_t flops = 0;
  bool derived = false;  // Expert: timed as a share of its Experts span, not by its own events
  int group_size = 0;
  bool backward = false;
  CollectiveOp op = CollectiveOp::Barrier;
  std::string group, channel;
  uint64_t value = 0;
  std::vector<uint64_t> memory;  // Memory: current bytes per MemTag
  std::string raw;               // Raw: the whole event, serialised
};

// Collects the trace events of every rank of a run and writes the file. Thread-safe.
class TraceSink {
 public:
  // [in] path: the output file (checked writable now); empty: events are only collected, for
  // another process to write (MPI ranks other than 0). [in] other_data_json: a JSON object
  // written as "otherData" (version, config).
  TraceSink(std::string path, std::string other_data_json);
  const std::string& path() const { return path_; }
  std::chrono::steady_clock::time_point run_start() const { return run_start_; }
  // Moves the run's time origin to now (before any recorder exists): processes of an MPI job
  // call it right after a common collective, so their timelines line up.
  void restart_clock() { run_start_ = std::chrono::steady_clock::now(); }
  void append(std::vector<TraceEvent> events);
  // This sink's events as trace-event JSON objects separated by ",\n" (what write() puts in
  // "traceEvents"), for another process's sink; and such text from another process, written
  // after this sink's own events.
  std::string serialised_events() const;
  void append_serialised(std::string events_json);
  // Writes {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}; `error`, when
  // not empty, is added to otherData (a run that failed midway still leaves valid JSON with
  // every step recorded until then). Throws moezero::Error if the file cannot be written.
  void write(const std::string& error = "") const;
  size_t event_count() const;

 private:
  std::string path_;
  std::string other_data_;
  std::chrono::steady_clock::time_point run_start_ = std::chrono::steady_clock::now();
  mutable std::mutex mu_;
  std::vector<TraceEvent> events_;
  std::vector<std::string> foreign_;          // append_serialised
  void write_events(std::ostream& os) const;  // events_, then foreign_; caller holds mu_
};

// The timed communication of one step on one rank (resolved by finish_step).
// comm_ms: wall time during which at least one collective of the rank is in flight, on any
// stream (the union of their intervals, not the sum). exposed_comm_ms: wall time during which
// the compute stream waits on communication of any kind (its own collectives, e.g. the
// router's agreement all-reduce, and its timed waits on other streams: token all-to-all,
// gathers, reduce-scatters, optimizer exchanges) while a collective is in flight: the measure
// of (waits) intersected with (collectives). So 0 <= exposed_comm_ms <= comm_ms.
// idle_link_ms: over the step's speculation windows (begin_window/end_window: a MoE layer's
// plan to its router's output, on the compute stream), the time inside them with no collective
// of the rank in flight other than speculative ones (speculative_collectives), summed: link
// time a speculative gather could have had for free (prefetch/link_idle.h).
// 0 <= idle_link_ms <= the windows' total length.
struct StepTiming {
  double comm_ms = 0.0;
  double exposed_comm_ms = 0.0;
  double a2a_wait_ms = 0.0;   // the compute stream waiting on the token all-to-all (summed)
  double idle_link_ms = 0.0;  // inside the speculation windows, no non-speculative collective
};

// A time interval [lo, hi) in ms, and the interval arithmetic of StepTiming.
struct Interval {
  double lo = 0.0, hi = 0.0;
};
// Sorted, disjoint, non-empty intervals covering the same time as `v`.
std::vector<Interval> merged(std::vector<Interval> v);
// Total length of merged intervals; length of the intersection of two merged lists.
double measure(const std::vector<Interval>& v);
double measure_intersection(const std::vector<Interval>& a, const std::vector<Interval>& b);

class TraceRecorder final : public CollectiveObserver {
 public:
  // [in] compute: the stream base events are recorded on. [in] sink: where traced steps go
  // (null: timing only, nothing is ever traced). [in] steps: the 1-based steps to trace.
  // Synchronises `compute` once (placing this rank's device clock on the run's clock).
  TraceRecorder(Device& device, Stream& compute, int rank, TraceSink* sink, StepList steps);
  ~TraceRecorder() override;
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  int rank() const { return rank_; }
  // Starts 1-based step `step`: records the step's base event; tracing() says whether the
  // step is traced.
  void begin_step(int64_t step);
  bool tracing() const { return tracing_; }
  // Every event recorded since begin_step has completed (the caller synchronised): resolves
  // them, hands a traced step's events to the sink, and returns the step's timing. Events
  // recorded after this call count towards the next step.
  StepTiming finish_step();

  // Spans (only while tracing(); otherwise they return -1 and end_span(-1) does nothing).
  // begin records the start event on `stream` now; end_span records the end on the same
  // stream. Spans on one stream must nest (end in reverse order of begin).
  int begin_span(Stream& stream, SpanKind kind, std::string name);
  int begin_expert(Stream& stream, int layer, int expert, int64_t tokens, TracePass pass);
  // Several experts computed together (grouped GEMMs: moe/local_experts.cpp): the span times
  // the whole call ("layers.L.experts fwd", cat "experts"); each expert of `experts` also gets
  // an "expert" span inside it, back to back in list order, whose duration is the call's times
  // that expert's share of the flops (derived, args.timing "flops share": one expert's slice
  // of a grouped GEMM has no events of its own).
  struct ExpertShare {
    int expert = 0;
    int64_t tokens = 0;
    uint64_t flops = 0;
  };
  int begin_experts(Stream& stream, int layer, TracePass pass, std::vector<ExpertShare> experts);
  void end_span(int span);

  // `waiter` waits for `ready` (the token all-to-all's completion): timed always (a2a_wait_ms),
  // a stall span when tracing.
  void a2a_wait(Stream& waiter, const Event& ready);
  // A speculation window (timing only, never traced): from now on `stream` until end_window
  // records its end on the same stream; finish_step sums the time inside the windows with no
  // collective but speculative ones in flight (StepTiming::idle_link_ms). Returns its id.
  int begin_window(Stream& stream);
  void end_window(int window);
  // While on, the collectives begun are speculative (expert gathers planned before routing):
  // timed as any other, but not counted as busy time of the windows (idle_link_ms).
  void speculative_collectives(bool on) { speculative_ = on; }

  // `waiter` (the compute stream) waits for `ready`, the completion of communication on
  // another stream (gathers, reduce-scatters, optimizer exchanges): timed always (towards
  // exposed_comm_ms); a stall span named `name` when tracing and `name` is not empty.
  void comm_wait(Stream& waiter, const Event& ready, const char* name);

  // Host-side instants and counters (only while tracing(); host clock).
  // kind: "hit", "miss" or "evict" (the shard cache); "secondary_keep" or "secondary_gather"
  // (hpZ, zero/fetch_secondary.cpp).
  void cache_event(const char* kind, const std::string& group, int layer, int expert,
                   uint64_t bytes);
  void counter(const char* name, uint64_t value);
  void sample_memory();  // a "memory" counter: the allocator's current bytes by tag
  // The metrics line of the last finished step, as an instant "step_metrics" on pid 0 (call
  // on rank 0 when last_step_traced()).
  void step_metrics(const std::string& metrics_json);
  bool last_step_traced() const { return last_traced_; }

  // The next collective's span is named "<op> <label>" instead of "<op> <group>" (what it
  // moves, e.g. the parameter group); call just before issuing it, while tracing.
  void label_next_collective(std::string label) { next_label_ = std::move(label); }

  // CollectiveObserver: times every collective (always); a span when tracing.
  uint64_t begin_collective(const Communicator& comm, CollectiveOp op, uint64_t bytes,
                            Stream& stream) override;
  void end_collective(uint64_t token, Stream& stream) override;

 private:
  enum class Cat : uint8_t { Compute, Stall, Expert, Experts, Collective, Window };
  struct Span {
    Cat cat = Cat::Compute;
    int tid = 0;
    bool traced = false;       // false: timing only (collectives, a2a waits)
    bool a2a_wait = false;     // counts towards StepTiming::a2a_wait_ms
    bool comm_wait = false;    // a wait of the compute stream on communication (exposed_comm_ms)
    bool speculative = false;  // a collective begun under speculative_collectives(true)
    Stream* stream = nullptr;
    std::string name;
    Event* start = nullptr;
    Event* end = nullptr;
    // Expert spans (Experts: the experts and their shares).
    int layer = -1, expert = -1;
    int64_t tokens = 0;
    bool backward = false;
    std::vector<ExpertShare> shares;
    // Collective spans.
    CollectiveOp op = CollectiveOp::Barrier;
    std::string group, channel;
    int group_size = 0;
    uint64_t bytes = 0;
  };
  int open(Stream& stream, Span span);
  double host_now_us() const;
  // Resolves a completed span: its duration (ms) and, when traced, its event into `out`.
  double resolve(const Span& s, double step_offset_us, std::vector<TraceEvent>& out) const;
  // The derived "expert" events of a resolved Experts span `call` (begin_experts).
  static void share_out(const Span& s, const TraceEvent& call, std::vector<TraceEvent>& out);
  TraceEvent host_event(TraceEvent::Kind kind, std::string name) const;

  Device& device_;
  Stream& compute_;
  int rank_;
  TraceSink* sink_;
  StepList steps_;
  std::unique_ptr<Event> run_base_, step_base_;
  double rank_offset_us_ = 0.0;  // run clock at this rank's run_base_
  bool tracing_ = false, last_traced_ = false;
  bool speculative_ = false;  // speculative_collectives
  int64_t step_ = 0;
  std::string next_label_;
  EventPool events_;                     // span starts and ends; recycled at finish_step
  std::vector<Span> spans_;              // of the current step, in begin order
  std::vector<TraceEvent> host_events_;  // of the current step
};

}  // namespace moezero
