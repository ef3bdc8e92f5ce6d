// The trace recorder through the trainer: the file is Chrome trace-event JSON with the required
// fields, spans nest per track, collective bytes add up to the engine's counters, profile.steps
// selects exactly its steps, a failed run still leaves valid JSON; and the per-expert counters
// of the metrics add up to the per-rank aggregates (world 2 / EP 2 and world 4 / EP 2, ZeRO-3,
// shard cache on and off).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/config.h"
#include "core/error.h"
#include "core/step_list.h"
#include "prefetch/frequency_model.h"
#include "train/trainer.h"

namespace moezero::moe {
namespace {

using nlohmann::json;

// A small MoE model. With a persistence threshold of 10000 elements every dense group stays
// replicated and only experts (3 x 128 x 32) are gathered, so the aggregate prefetch
// counters are the experts' alone).
Config tiny_moe(std::vector<std::string> overrides) {
  std::vector<std::string> o = {
      "model.vocab_size=256", "model.d_model=32", "model.n_layers=2", "model.n_heads=4",
      "model.n_kv_heads=2", "model.d_ff=128", "model.seq_len=16", "model.num_experts=4",
      "model.top_k=2", "moe.aux_loss_coef=0.01", "train.micro_batch_size=8", "train.steps=3",
      "train.warmup_steps=1", "train.lr=0.01", "zero.stage=3",
      "zero.param_persistence_threshold=64",
      // EP 2 at world 2 leaves each expert on one rank: gather it
      // anyway, so that traces show expert gathers and the cache.
      "zero.shard_single_rank=true", "zero.reduce_bucket_size=20000",
      "zero.prefetch_bucket_size=30000", "prefetch.policy=frequency", "comm.timeout_s=60"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return parse_config("{}", "tiny_moe", o);
}

json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);  // throws on invalid JSON: the test fails with the parser's message
}

std::string temp(const std::string& name) { return ::testing::TempDir() + "moezero_" + name; }

// Required fields of every event, per phase; returns the events by phase.
void check_format(const json& trace) {
  ASSERT_TRUE(trace.is_object());
  ASSERT_TRUE(trace.contains("traceEvents") && trace["traceEvents"].is_array());
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  ASSERT_TRUE(trace["otherData"].is_object());
  EXPECT_TRUE(trace["otherData"].contains("moezero_version"));
  EXPECT_TRUE(trace["otherData"]["config"].is_object());
  for (const json& e : trace["traceEvents"]) {
    for (const char* k : {"ph", "ts", "pid", "tid", "name"})
      ASSERT_TRUE(e.contains(k)) << "missing '" << k << "' in " << e.dump();
    ASSERT_TRUE(e["ts"].is_number()) << e.dump();
    ASSERT_TRUE(e["pid"].is_number_integer() && e["tid"].is_number_integer()) << e.dump();
    const std::string ph = e["ph"];
    ASSERT_TRUE(ph == "X" || ph == "i" || ph == "C" || ph == "M") << e.dump();
    if (ph == "X") {
      ASSERT_TRUE(e.contains("dur") && e["dur"].is_number()) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
      EXPECT_GE(e["ts"].get<double>(), 0.0) << e.dump();
      ASSERT_TRUE(e.contains("cat")) << e.dump();
    }
    if (ph == "C") {
      ASSERT_TRUE(e["args"].is_object()) << e.dump();
    }
  }
}

// On each (pid, tid), two spans are disjoint or one contains the other.
void check_nesting(const json& trace) {
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X") {
      const double ts = e["ts"], dur = e["dur"];
      tracks[{e["pid"].get<int>(), e["tid"].get<int>()}].emplace_back(ts, ts + dur);
    }
  ASSERT_FALSE(tracks.empty());
  constexpr double kEps = 1e-3;  // us: rounding of ts + dur in doubles
  for (auto& [track, spans] : tracks) {
    // Sort by start, longer first; a stack of open spans must contain each next one.
    std::sort(spans.begin(), spans.end(), [](auto& a, auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<std::pair<double, double>> open;
    for (const auto& s : spans) {
      while (!open.empty() && open.back().second <= s.first + kEps) open.pop_back();
      if (!open.empty()) {
        ASSERT_LE(s.second, open.back().second + kEps)
            << "pid " << track.first << " tid " << track.second << ": span [" << s.first << ", "
            << s.second << "] overlaps [" << open.back().first << ", " << open.back().second
            << "] partially";
      }
      open.push_back(s);
    }
  }
}

struct TracedRun {
  train::TrainResult result;
  json trace;
};

TracedRun traced(const Config& cfg, const std::string& name) {
  train::TrainOptions opt;
  opt.trace_path = temp(name + ".trace.json");
  TracedRun r;
  r.result = train::train(cfg, opt);
  r.trace = read_json(opt.trace_path);
  return r;
}

// Sum of args.bytes of collective spans, by (step, pid, op, channel).
std::map<std::tuple<int64_t, int, std::string, std::string>, uint64_t> collective_bytes(
    const json& trace, int world, int ep_size) {
  std::map<std::tuple<int64_t, int, std::string, std::string>, uint64_t> out;
  for (const json& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "collective") {
      const json& a = e["args"];
      for (const char* k : {"op", "group", "group_size", "channel", "bytes", "gbps", "step"})
        EXPECT_TRUE(a.contains(k)) << "collective without '" << k << "': " << e.dump();
      // The report's busbw needs the group's size: at least 1, at most every rank.
      const int n = a.value("group_size", 0);
      EXPECT_GE(n, 1) << e.dump();
      EXPECT_LE(n, world) << e.dump();
      if (a["op"] == "all_to_all_v") {
        EXPECT_EQ(n, ep_size) << "token a2a spans the EP group";
      }
      out[{a["step"].get<int64_t>(), e["pid"].get<int>(), a["op"].get<std::string>(),
           a["channel"].get<std::string>()}] += a["bytes"].get<uint64_t>();
    }
  return out;
}

TEST(Trace, ValidNestedAndBytesMatchTheCounters) {
  for (const char* cache : {"0", "200000"})
    for (int world : {2, 4}) {
      const std::string what = "world " + std::to_string(world) + " cache " + cache;
      SCOPED_TRACE(what);
      const TracedRun r =
          traced(tiny_moe({"parallel.world_size=" + std::to_string(world), "parallel.ep_size=2",
                           std::string("shard_cache.capacity_bytes=") + cache}),
                 "valid_w" + std::to_string(world) + "_c" + cache);
      check_format(r.trace);
      check_nesting(r.trace);
      // Every rank has a process and the stream tracks; every kind of event is there.
      std::set<int> pids;
      std::map<std::string, int> cats;
      for (const json& e : r.trace["traceEvents"]) {
        pids.insert(e["pid"].get<int>());
        if (e.contains("cat")) cats[e["cat"].get<std::string>()] += 1;
        if (e["ph"] == "C") cats["counter:" + e["name"].get<std::string>()] += 1;
      }
      EXPECT_EQ(pids.size(), static_cast<size_t>(world));
      for (const char* c : {"compute", "collective", "expert", "stall", "step", "counter:memory",
                            "counter:live_full_param_bytes"})
        EXPECT_GT(cats[c], 0) << "no '" << c << "' events";
      if (std::string(cache) != "0") {
        EXPECT_GT(cats["cache"], 0) << "cache on: no cache instants";
        EXPECT_GT(cats["counter:cache_bytes"], 0);
      }
      // Bytes of the collective spans equal the engine's counters of each step and rank.
      const auto bytes = collective_bytes(r.trace, world, 2);
      ASSERT_EQ(r.result.steps.size(), 3u);
      for (const train::StepLog& s : r.result.steps)
        for (int p = 0; p < world; ++p) {
          const train::RankStepStats& rs = s.ranks[static_cast<size_t>(p)];
          auto get = [&](const char* op, const char* channel) {
            auto it = bytes.find({s.step, p, op, channel});
            return it == bytes.end() ? uint64_t{0} : it->second;
          };
          EXPECT_EQ(get("all_gather", "gather"), rs.gathered_bytes)
              << "step " << s.step << " rank " << p;
          EXPECT_EQ(get("reduce_scatter", "reduce"), rs.reduce_scattered_bytes)
              << "step " << s.step << " rank " << p;
          EXPECT_EQ(get("all_reduce", "reduce"), rs.all_reduced_bytes)
              << "step " << s.step << " rank " << p;
          EXPECT_GT(get("all_to_all_v", "a2a"), 0u) << "step " << s.step << " rank " << p;
        }
      // The step_metrics instants carry the metrics lines.
      int metrics = 0;
      for (const json& e : r.trace["traceEvents"])
        if (e["name"] == "step_metrics") {
          ++metrics;
          EXPECT_EQ(e["pid"], 0);
          const int64_t step = e["args"]["step"];
          ASSERT_GE(step, 1);
          EXPECT_EQ(
              e["args"].dump(),
              json::parse(train::step_json(r.result.steps[static_cast<size_t>(step - 1)])).dump());
        }
      EXPECT_EQ(metrics, 3);
    }
}

TEST(Trace, StepsSelectsExactlyTheChosenSteps) {
  Config cfg = tiny_moe(
      {"parallel.world_size=2", "parallel.ep_size=2", "train.steps=6", "profile.steps=2, 4-5"});
  const TracedRun r = traced(cfg, "steps");
  check_format(r.trace);
  std::set<int64_t> metric_steps, span_steps;
  for (const json& e : r.trace["traceEvents"]) {
    if (e["name"] == "step_metrics") metric_steps.insert(e["args"]["step"].get<int64_t>());
    if (e["ph"] == "X" && e["cat"] == "collective")
      span_steps.insert(e["args"]["step"].get<int64_t>());
  }
  EXPECT_EQ(metric_steps, (std::set<int64_t>{2, 4, 5}));
  EXPECT_EQ(span_steps, (std::set<int64_t>{2, 4, 5}));
  // Compute spans: one "embed fwd" per traced step and rank (one micro-batch per step).
  int embed = 0;
  for (const json& e : r.trace["traceEvents"]) embed += e["name"] == "embed fwd";
  EXPECT_EQ(embed, 3 * 2);
}

TEST(Trace, StepListParsingNamesTheKeyAndTheBadPart) {
  const StepList l = StepList::parse(" 3-5, 10 ", "profile.steps");
  for (int64_t s : {3, 4, 5, 10}) EXPECT_TRUE(l.contains(s)) << s;
  for (int64_t s : {1, 2, 6, 9, 11}) EXPECT_FALSE(l.contains(s)) << s;
  EXPECT_TRUE(StepList::parse("", "profile.steps").contains(12345));
  for (const char* bad : {"3-x", "0", "5-3", "2,,4", "-1", "4-"}) {
    try {
      parse_config("{}", "cfg.json", {std::string("profile.steps=") + bad});
      ADD_FAILURE() << "accepted profile.steps=" << bad;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("profile.steps"), std::string::npos) << m;
      EXPECT_NE(m.find(std::string("'")), std::string::npos) << m;
    }
  }
  try {
    StepList::parse("1,3-x", "profile.steps");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'3-x'"), std::string::npos) << e.what();
  }
}

TEST(Trace, AFailedRunStillWritesValidJson) {
  const Config cfg = tiny_moe(
      {"parallel.world_size=2", "parallel.ep_size=2", "train.steps=4", "comm.timeout_s=5"});
  train::TrainOptions opt;
  opt.trace_path = temp("failed.trace.json");
  const int64_t rows = cfg.train.micro_batch_size / 2, T = cfg.model.seq_len;
  opt.data = [&](const train::BatchRequest& b, std::vector<int32_t>& tok,
                 std::vector<int32_t>& tgt) {
    if (b.micro_batch == 2 && b.rank == 1) throw Error("injected data failure", __FILE__, __LINE__);
    tok.assign(static_cast<size_t>(rows * T), 0);
    tgt.assign(static_cast<size_t>(rows * T), 0);
    for (size_t i = 0; i < tok.size(); ++i) {
      tok[i] = static_cast<int32_t>((i * 7 + b.row_begin + b.micro_batch) % 256);
      tgt[i] = static_cast<int32_t>((i * 7 + 1 + b.row_begin + b.micro_batch) % 256);
    }
  };
  EXPECT_THROW(train::train(cfg, opt), Error);
  const json trace = read_json(opt.trace_path);
  check_format(trace);
  EXPECT_NE(trace["otherData"]["error"].get<std::string>().find("injected data failure"),
            std::string::npos);
  std::set<int64_t> steps;
  for (const json& e : trace["traceEvents"])
    if (e["name"] == "step_metrics") steps.insert(e["args"]["step"].get<int64_t>());
  EXPECT_EQ(steps, (std::set<int64_t>{1, 2}));
}

// ---- per-expert counters --------------------------------------------------------------------

template <typename T>
T sum(const std::vector<T>& v) {
  T s{};
  for (const T& x : v) s += x;
  return s;
}

void check_expert_counters(const train::TrainResult& r, int world, const std::string& what,
                           bool only_experts_gathered, double ema_decay) {
  ASSERT_FALSE(r.steps.empty()) << what;
  const prefetch::FrequencyModel fresh(2, 4, ema_decay);
  uint64_t total_a2a = 0;
  for (const train::StepLog& s : r.steps) {
    SCOPED_TRACE(what + " step " + std::to_string(s.step));
    ASSERT_EQ(s.moe_layers.size(), 2u);
    ASSERT_EQ(s.ranks.size(), static_cast<size_t>(world));
    uint64_t gathered = 0, hits = 0, misses = 0, phits = 0, pmisses = 0, pwaste = 0;
    double stall = 0;
    for (const train::RankStepStats& rs : s.ranks) {
      gathered += rs.gathered_expert_bytes;
      hits += rs.cache_hits;
      misses += rs.cache_misses;
      phits += rs.prefetch_hits;
      pmisses += rs.prefetch_misses;
      pwaste += rs.wasted_bytes;
      stall += rs.stall_ms;
    }
    uint64_t e_gathered = 0, e_hits = 0, e_misses = 0, e_phits = 0, e_pmisses = 0, e_pwaste = 0;
    for (size_t m = 0; m < s.moe_layers.size(); ++m) {
      const train::MoeLayerStats& L = s.moe_layers[m];
      EXPECT_EQ(L.layer, static_cast<int>(m));  // moe_every 1: every layer is MoE
      EXPECT_EQ(L.tokens, s.tokens_per_expert[m]);
      EXPECT_EQ(sum(L.a2a_tokens_in), sum(L.a2a_tokens_out));
      EXPECT_GT(sum(L.a2a_tokens_out), 0) << "EP 2 sends tokens across ranks";
      total_a2a += static_cast<uint64_t>(sum(L.a2a_tokens_out));
      for (size_t e = 0; e < 4; ++e) {
        // Every expert's gathers move whole groups: bytes are a multiple of the count.
        if (L.gathers[e] > 0) {
          EXPECT_EQ(L.gathered_bytes[e] % L.gathers[e], 0u);
          EXPECT_GE(L.gather_ms[e], 0.0);
        } else {
          EXPECT_EQ(L.gathered_bytes[e], 0u);
          EXPECT_EQ(L.gather_ms[e], 0.0);
        }
        // A2A per expert: assignments routed to e from other EP ranks equal those its owners
        // received; they cannot exceed the tokens routed to e.
        EXPECT_EQ(L.a2a_tokens_in[e], L.a2a_tokens_out[e]) << "expert " << e;
        EXPECT_LE(L.a2a_tokens_in[e], L.tokens[e]) << "expert " << e;
        EXPECT_GE(L.predicted[e], 0.0);
        EXPECT_LE(L.predicted[e], 1.0);
        if (s.step == 1) {
          EXPECT_EQ(L.predicted[e], fresh.probability(static_cast<int>(m), static_cast<int>(e)));
        }
      }
      e_gathered += sum(L.gathered_bytes);
      e_hits += sum(L.cache_hits);
      e_misses += sum(L.cache_misses);
      e_phits += sum(L.prefetch_hits);
      e_pmisses += sum(L.prefetch_misses);
      e_pwaste += sum(L.wasted_bytes);
    }
    EXPECT_EQ(e_gathered, gathered);
    EXPECT_EQ(e_hits, hits);
    EXPECT_EQ(e_misses, misses);
    EXPECT_LE(e_phits, phits);
    EXPECT_LE(e_pmisses, pmisses);
    EXPECT_LE(e_pwaste, pwaste);
    if (only_experts_gathered) {
      EXPECT_EQ(e_phits, phits);
      EXPECT_EQ(e_pmisses, pmisses);
      EXPECT_EQ(e_pwaste, pwaste);
    }
    // Communication timing: measured, and consistent with its definition.
    // (exposed >= the engine's stall_ms held only on a quiet machine: the two are timed by
    // different event pairs, so only the bounds that hold by construction are asserted.)
    EXPECT_GT(s.comm.comm_ms, 0.0);
    EXPECT_GE(stall, 0.0);
    EXPECT_GE(s.comm.exposed_comm_ms, 0.0);
    EXPECT_LE(s.comm.exposed_comm_ms, s.comm.comm_ms + 1e-9);
    ASSERT_TRUE(s.comm.overlap_ratio().has_value());
    EXPECT_DOUBLE_EQ(*s.comm.overlap_ratio(), 1.0 - s.comm.exposed_comm_ms / s.comm.comm_ms);
    // The metrics line carries them under the schema's names.
    const json j = json::parse(train::step_json(s));
    ASSERT_EQ(j["moe_layers"].size(), 2u);
    for (const char* k : {"layer", "tokens", "gathers", "gathered_bytes", "gather_ms", "cache_hits",
                          "cache_misses", "prefetch_hits", "prefetch_misses", "wasted_bytes",
                          "a2a_tokens_in", "a2a_tokens_out", "predicted"})
      EXPECT_TRUE(j["moe_layers"][0].contains(k)) << k;
    EXPECT_EQ(j["moe_layers"][1]["gathered_bytes"].get<std::vector<uint64_t>>(),
              s.moe_layers[1].gathered_bytes);
    EXPECT_TRUE(j.contains("comm_ms") && j.contains("exposed_comm_ms") &&
                j["overlap_ratio"].is_number());
  }
  EXPECT_GT(total_a2a, 0u);
}

TEST(ExpertCounters, SumToTheRankAggregates) {
  for (const char* cache : {"0", "200000"})
    for (int world : {2, 4})
      for (bool experts_only : {false, true}) {
        const std::string what = "world " + std::to_string(world) + " cache " + cache +
                                 (experts_only ? " experts only" : " dense too");
        std::vector<std::string> o = {
            "parallel.world_size=" + std::to_string(world), "parallel.ep_size=2", "train.steps=3",
            "train.grad_accum_steps=2", std::string("shard_cache.capacity_bytes=") + cache};
        if (experts_only) o.push_back("zero.param_persistence_threshold=10000");
        const Config cfg = tiny_moe(o);
        const train::TrainResult r = train::train(cfg, train::TrainOptions{});
        check_expert_counters(r, world, what, experts_only, cfg.prefetch.ema_decay);
        uint64_t hits = 0, gathered = 0;
        for (const train::StepLog& s : r.steps)
          for (const train::MoeLayerStats& L : s.moe_layers) {
            hits += sum(L.cache_hits);
            gathered += sum(L.gathered_bytes);
          }
        EXPECT_GT(gathered, 0u) << what;
        if (std::string(cache) != "0")
          EXPECT_GT(hits, 0u) << what << ": the cache serves backward and the 2nd micro-batch";
        else
          EXPECT_EQ(hits, 0u) << what;
      }
}

}  // namespace
}  // namespace moezero::moe
