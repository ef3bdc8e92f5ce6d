// The trace recorder on its own (CPU device): only the chosen steps produce events; spans are
// timed on their stream by events (a span around host work of known length measures at least
// that long); the a2a wait is timed whether or not the step is traced; the sink's file parses.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "core/trace.h"
#include "kernels/backend.h"

namespace moezero {
namespace {

void sleep_on(Stream& s, int ms) {
  s.enqueue_host([ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
}

TEST(TraceRecorder, RecordsOnlyChosenStepsAndTimesSpansByEvents) {
  auto dev = make_cpu_device(0);
  Stream& compute = dev->create_stream("compute");
  Stream& a2a = dev->create_stream("a2a");
  const std::string path = ::testing::TempDir() + "moezero_recorder.trace.json";
  TraceSink sink(path, R"({"config": {}})");
  TraceRecorder rec(*dev, compute, 0, &sink, StepList::parse("2", "profile.steps"));
  const size_t meta = sink.event_count();
  EXPECT_GT(meta, 0u);  // process and track names

  for (int64_t step = 1; step <= 3; ++step) {
    rec.begin_step(step);
    EXPECT_EQ(rec.tracing(), step == 2);
    const int span = rec.begin_span(compute, SpanKind::Compute, "work fwd");
    EXPECT_EQ(span >= 0, step == 2);
    sleep_on(compute, 20);
    const int inner = rec.begin_expert(compute, 1, 3, 17, TracePass::Backward);
    sleep_on(compute, 5);
    rec.end_span(inner);
    rec.end_span(span);
    // The compute stream waits on the a2a stream, which finishes 10 ms after compute arrived:
    // timed in every step, traced or not.
    auto arrived = std::make_shared<std::atomic<bool>>(false);
    compute.enqueue_host([arrived] { arrived->store(true); });
    a2a.enqueue_host([arrived] {
      while (!arrived->load()) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    });
    auto done = dev->create_event();
    done->record(a2a);
    rec.a2a_wait(compute, *done);
    rec.cache_event("hit", "layers.1.experts.3", 1, 3, 4096);
    rec.counter("cache_bytes", 4096);
    compute.synchronize();
    const StepTiming t = rec.finish_step();
    EXPECT_GE(t.a2a_wait_ms, 5.0) << "step " << step;  // a lower bound: 10 ms of sleep
    EXPECT_EQ(t.comm_ms, 0.0);
    EXPECT_EQ(rec.last_step_traced(), step == 2);
    if (step == 2) rec.step_metrics(R"({"step": 2})");
    if (step == 1) {
      EXPECT_EQ(sink.event_count(), meta) << "an untraced step added events";
    }
  }
  sink.write();
  std::ifstream f(path);
  const nlohmann::json j = nlohmann::json::parse(f);
  int spans = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      ++spans;
      if (e["name"] == "work fwd") {
        EXPECT_GE(e["dur"].get<double>(), 25000.0 * 0.95);  // lower bound: 25 ms of sleep
      }
      if (e["cat"] == "expert") {
        EXPECT_EQ(e["args"]["expert"], 3);
        EXPECT_EQ(e["args"]["tokens"], 17);
        EXPECT_EQ(e["args"]["pass"], "bwd");
        EXPECT_GE(e["dur"].get<double>(), 5000.0 * 0.95);
      }
    }
    if (e["name"] == "step_metrics") {
      EXPECT_EQ(e["args"]["step"], 2);
    }
    if (e["ph"] == "i" && e["cat"] == "cache") {
      EXPECT_EQ(e["args"]["bytes"], 4096);
    }
  }
  EXPECT_EQ(spans, 3);  // work fwd, the expert, the a2a wait: step 2 only
}

TEST(TraceRecorder, OpenSpanAtStepEndIsAnError) {
  auto dev = make_cpu_device(0);
  Stream& compute = dev->create_stream("compute");
  const std::string path = ::testing::TempDir() + "moezero_recorder_open.trace.json";
  TraceSink sink(path, "");
  TraceRecorder rec(*dev, compute, 0, &sink, StepList());
  rec.begin_step(1);
  rec.begin_span(compute, SpanKind::Compute, "never ended");
  compute.synchronize();
  EXPECT_THROW(rec.finish_step(), Error);
}

TEST(TraceRecorder, UnwritableFileIsReportedWithItsPath) {
  try {
    TraceSink sink("/nonexistent/dir/t.json", "");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'/nonexistent/dir/t.json'"), std::string::npos)
        << e.what();
  }
}

// The interval arithmetic of StepTiming: union and intersection measures, exact on dyadic
// values.
TEST(TraceRecorder, IntervalUnionAndIntersection) {
  const std::vector<Interval> comm = merged({{4, 6}, {0, 2}, {1, 3}, {5, 5}, {8, 9}});
  ASSERT_EQ(comm.size(), 3u);
  EXPECT_EQ(measure(comm), 3.0 + 2.0 + 1.0);
  const std::vector<Interval> waits = merged({{2.5, 4.5}, {8.5, 10}});
  EXPECT_EQ(measure_intersection(waits, comm), 0.5 + 0.5 + 0.5);
  EXPECT_EQ(measure_intersection(comm, comm), measure(comm));
  EXPECT_EQ(measure_intersection({}, comm), 0.0);
}

}  // namespace
}  // namespace moezero
