// train/step_stats.cpp — a rank's step counters, per-expert step counters and communication
// timing (step_stats.h).
#include "train/step_stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "core/error.h"
#include "model/transformer.h"
#include "prefetch/frequency_model.h"

namespace moezero::train {

namespace {

// Word layout of one rank: [comm_ms, exposed_comm_ms], then per MoE layer, per Sum field of
// MOEZERO_EXPERT_STEP_COUNTERS (in list order), E values (a double as its bits).
#define MOEZERO_FIELD_Sum(name) k_##name,
#define MOEZERO_FIELD_Agreed(name)
#define MOEZERO_FIELD(name, type, combine, source) MOEZERO_FIELD_##combine(name)
enum Field : size_t { MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_FIELD) kFieldCount };
#undef MOEZERO_FIELD
#undef MOEZERO_FIELD_Agreed
#undef MOEZERO_FIELD_Sum
constexpr size_t kHeaderWords = 2;

// Words are summed over ranks by one integer all-reduce (RankSession::exchange_step_stats), so
// a double (milliseconds) is held as whole nanoseconds: exact sums, 1 ns resolution.
constexpr double kNsPerMs = 1e6;
uint64_t bits(double ms) { return static_cast<uint64_t>(std::llround(ms * kNsPerMs)); }
double from_bits(uint64_t w) { return static_cast<double>(static_cast<int64_t>(w)) / kNsPerMs; }

// Adds v to the word w holding a T (a double as nanoseconds), and reads a T back from a word.
template <typename T>
void add_to_word(uint64_t& w, T v) {
  if constexpr (std::is_floating_point_v<T>)
    w += bits(static_cast<double>(v));
  else
    w += static_cast<uint64_t>(v);
}
template <typename T>
T from_word(uint64_t w) {
  if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(from_bits(w));
  else
    return static_cast<T>(w);
}

}  // namespace

RankStepStats rank_step_stats(const EngineCounters& now, const EngineCounters& before,
                              const moe::MoeStats& moe, const MemStats& mem,
                              const StepTiming& timing, const comm::LinkBytes& link_now,
                              const comm::LinkBytes& link_before) {
  RankStepStats s;
#define MOEZERO_FROM_Engine(name) s.name = now.name - before.name;
#define MOEZERO_FROM_Link(name) s.name = link_now.name - link_before.name;
#define MOEZERO_FROM_Moe(name) s.name = moe.name;
#define MOEZERO_FROM_Timing(name) s.name = timing.name;
#define MOEZERO_SET(name, unit, source) MOEZERO_FROM_##source(name)
  MOEZERO_RANK_STEP_COUNTERS(MOEZERO_SET)
#undef MOEZERO_SET
#undef MOEZERO_FROM_Moe
#undef MOEZERO_FROM_Timing
#undef MOEZERO_FROM_Engine
#undef MOEZERO_FROM_Link
  s.peak_bytes = mem.peak_bytes;
  s.peak_total_bytes = mem.total_peak_bytes;
  s.peak_state_bytes = mem.state_peak_bytes;
  return s;
}

void to_words(const RankStepStats& s, int64_t* words) { std::memcpy(words, &s, sizeof s); }

RankStepStats from_words(const int64_t* words) {
  RankStepStats s;
  std::memcpy(static_cast<void*>(&s), words, sizeof s);
  return s;
}

nlohmann::json rank_step_json(const RankStepStats& s) {
  nlohmann::json j;
#define MOEZERO_PUT(name, unit, source) j[#name] = s.name;
  MOEZERO_RANK_STEP_COUNTERS(MOEZERO_PUT)
#undef MOEZERO_PUT
  nlohmann::json peak;
  for (size_t t = 0; t < kMemTagCount; ++t)
    peak[mem_tag_name(static_cast<MemTag>(t))] = s.peak_bytes[t];
  j["peak_bytes"] = peak;
  j["peak_total_bytes"] = s.peak_total_bytes;
  j["peak_state_bytes"] = s.peak_state_bytes;
  // Mean share of the layer-experts active per micro-batch (null: no MoE layer ran).
  j["active_fraction"] = s.layer_expert_slots == 0
                             ? nlohmann::json(nullptr)
                             : nlohmann::json(static_cast<double>(s.active_layer_experts) /
                                              static_cast<double>(s.layer_expert_slots));
  return j;
}

std::optional<double> CommStepStats::overlap_ratio() const {
  if (comm_ms <= 0.0) return std::nullopt;
  return 1.0 - exposed_comm_ms / comm_ms;
}

StepStatsCollector::StepStatsCollector(const ModelConfig& model, const ZeroEngine& engine)
    : experts_(static_cast<int>(model.num_experts)) {
  moe_index_.assign(static_cast<size_t>(model.n_layers), -1);
  for (int l = 0; l < static_cast<int>(model.n_layers); ++l)
    if (model::is_moe_layer(model, l)) {
      moe_index_[static_cast<size_t>(l)] = static_cast<int>(moe_layers_.size());
      moe_layers_.push_back(l);
    }
  for (int g = 0; g < engine.group_count(); ++g) last_.push_back(engine.group_counters(g));
}

std::vector<std::vector<double>> StepStatsCollector::predicted(
    const prefetch::FrequencyModel* frequency) const {
  std::vector<std::vector<double>> p;
  if (!frequency) return p;
  for (size_t m = 0; m < moe_layers_.size(); ++m) {
    auto& row = p.emplace_back(static_cast<size_t>(experts_));
    for (int e = 0; e < experts_; ++e)
      row[static_cast<size_t>(e)] = frequency->probability(static_cast<int>(m), e);
  }
  return p;
}

std::vector<uint64_t> StepStatsCollector::rank_words(const ZeroEngine& engine,
                                                     const moe::MoeStats& stats,
                                                     const StepTiming& timing) {
  const size_t E = static_cast<size_t>(experts_);
  std::vector<uint64_t> w(kHeaderWords + moe_layers_.size() * kFieldCount * E, 0);
  w[0] = bits(timing.comm_ms);
  w[1] = bits(timing.exposed_comm_ms);
  auto at = [&](size_t m, Field f, size_t e) -> uint64_t& {
    return w[kHeaderWords + (m * kFieldCount + f) * E + e];
  };
  for (int g = 0; g < engine.group_count(); ++g) {
    const GroupCounters now = engine.group_counters(g);
    GroupCounters& was = last_[static_cast<size_t>(g)];
    const GroupSpec& spec = engine.layout(g).spec();
    if (spec.kind == GroupKind::Expert && spec.layer >= 0 &&
        spec.layer < static_cast<int>(moe_index_.size()) &&
        moe_index_[static_cast<size_t>(spec.layer)] >= 0) {
      const size_t m = static_cast<size_t>(moe_index_[static_cast<size_t>(spec.layer)]);
      const size_t e = static_cast<size_t>(spec.expert);
      MOEZERO_CHECK(spec.expert >= 0 && e < E, "expert group '", spec.name, "' has expert id ",
                    spec.expert, " outside [0, ", E, ")");
#define MOEZERO_DELTA_Group(name, type) add_to_word<type>(at(m, k_##name, e), now.name - was.name);
#define MOEZERO_DELTA_Moe(name, type)
#define MOEZERO_DELTA_Routing(name, type)
#define MOEZERO_DELTA_Plan(name, type)
#define MOEZERO_DELTA(name, type, combine, source) MOEZERO_DELTA_##source(name, type)
      MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_DELTA)
#undef MOEZERO_DELTA
#undef MOEZERO_DELTA_Plan
#undef MOEZERO_DELTA_Routing
#undef MOEZERO_DELTA_Moe
#undef MOEZERO_DELTA_Group
    }
    was = now;
  }
  for (size_t m = 0; m < moe_layers_.size(); ++m)
    for (size_t e = 0; e < E; ++e) {
#define MOEZERO_STEP_Group(name, type)
#define MOEZERO_STEP_Moe(name, type)                     \
  if (m < stats.name.size() && e < stats.name[m].size()) \
    add_to_word<type>(at(m, k_##name, e), stats.name[m][e]);
#define MOEZERO_STEP_Routing(name, type)
#define MOEZERO_STEP_Plan(name, type)
#define MOEZERO_STEP(name, type, combine, source) MOEZERO_STEP_##source(name, type)
      MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_STEP)
#undef MOEZERO_STEP
#undef MOEZERO_STEP_Plan
#undef MOEZERO_STEP_Routing
#undef MOEZERO_STEP_Moe
#undef MOEZERO_STEP_Group
    }
  return w;
}

void StepStatsCollector::sum(const std::vector<uint64_t>& words, const moe::MoeStats& stats,
                             const std::vector<std::vector<double>>& predicted,
                             std::vector<MoeLayerStats>& layers, CommStepStats& comm) const {
  const size_t E = static_cast<size_t>(experts_);
  const size_t per_rank = kHeaderWords + moe_layers_.size() * kFieldCount * E;
  MOEZERO_CHECK(words.size() == per_rank, "step statistics: got ", words.size(),
                " summed words, expected ", per_rank);
  comm = CommStepStats{};
  layers.assign(moe_layers_.size(), MoeLayerStats{});
  for (size_t m = 0; m < moe_layers_.size(); ++m) {
    MoeLayerStats& L = layers[m];
    L.layer = moe_layers_[m];
#define MOEZERO_AGREED_Routing(name, type)                                 \
  L.name = m < stats.tokens_per_expert.size() ? stats.tokens_per_expert[m] \
                                              : std::vector<type>(E, type{});
#define MOEZERO_AGREED_Plan(name, type) \
  L.name = m < predicted.size() ? predicted[m] : std::vector<type>(E, type{});
#define MOEZERO_INIT_Sum(name, type, source) L.name.assign(E, type{});
#define MOEZERO_INIT_Agreed(name, type, source) MOEZERO_AGREED_##source(name, type)
#define MOEZERO_INIT(name, type, combine, source) MOEZERO_INIT_##combine(name, type, source)
    MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_INIT)
#undef MOEZERO_INIT
#undef MOEZERO_INIT_Agreed
#undef MOEZERO_INIT_Sum
#undef MOEZERO_AGREED_Plan
#undef MOEZERO_AGREED_Routing
    if (m < stats.selected_per_expert.size()) {
      L.selected = stats.selected_per_expert[m];
      L.expert_bias = stats.expert_bias[m];
    }
    if (m < stats.brier_sum.size()) {
      L.brier_sum = stats.brier_sum[m];
      L.brier_count = stats.brier_count[m];
      L.calibration_count = stats.calibration_count[m];
      L.calibration_active = stats.calibration_active[m];
    }
  }
  {  // the words are already summed over the ranks
    const uint64_t* w = words.data();
    comm.comm_ms += from_bits(w[0]);
    comm.exposed_comm_ms += from_bits(w[1]);
    for (size_t m = 0; m < moe_layers_.size(); ++m) {
      MoeLayerStats& L = layers[m];
      auto f = [&](Field field, size_t e) {
        return w[kHeaderWords + (m * kFieldCount + field) * E + e];
      };
      for (size_t e = 0; e < E; ++e) {
#define MOEZERO_SUM_Sum(name, type) L.name[e] += from_word<type>(f(k_##name, e));
#define MOEZERO_SUM_Agreed(name, type)
#define MOEZERO_SUM(name, type, combine, source) MOEZERO_SUM_##combine(name, type)
        MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_SUM)
#undef MOEZERO_SUM
#undef MOEZERO_SUM_Agreed
#undef MOEZERO_SUM_Sum
      }
    }
  }
}

namespace {
// A layer's balance fields (MoeLayerStats): selected, dropped, load_max_over_mean, load_cv,
// expert_bias.
void add_balance_json(const MoeLayerStats& L, nlohmann::json& o) {
  o["selected"] = L.selected;
  int64_t dropped = 0, total = 0, most = 0;
  for (size_t e = 0; e < L.tokens.size(); ++e) {
    if (e < L.selected.size()) dropped += L.selected[e] - L.tokens[e];
    total += L.tokens[e];
    most = std::max(most, L.tokens[e]);
  }
  o["dropped"] = dropped;
  const double n = static_cast<double>(L.tokens.size());
  const double mean = n > 0 ? static_cast<double>(total) / n : 0.0;
  if (mean > 0.0) {
    double var = 0.0;
    for (int64_t t : L.tokens)
      var += (static_cast<double>(t) - mean) * (static_cast<double>(t) - mean);
    o["load_max_over_mean"] = static_cast<double>(most) / mean;
    o["load_cv"] = std::sqrt(var / n) / mean;
  } else {
    o["load_max_over_mean"] = nullptr;
    o["load_cv"] = nullptr;
  }
  o["expert_bias"] = L.expert_bias;
}
}  // namespace

void add_step_stats_json(nlohmann::json& j, const std::vector<MoeLayerStats>& layers,
                         const CommStepStats& comm) {
  auto arr = nlohmann::json::array();
  for (const MoeLayerStats& L : layers) {
    nlohmann::json o;
    o["layer"] = L.layer;
#define MOEZERO_PUT(name, type, combine, source) o[#name] = L.name;
    MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_PUT)
#undef MOEZERO_PUT
    o["brier_sum"] = L.brier_sum;
    o["brier_count"] = L.brier_count;
    o["calibration_count"] = L.calibration_count;
    o["calibration_active"] = L.calibration_active;
    add_balance_json(L, o);
    arr.push_back(std::move(o));
  }
  j["moe_layers"] = std::move(arr);
  j["comm_ms"] = comm.comm_ms;
  j["exposed_comm_ms"] = comm.exposed_comm_ms;
  const auto ratio = comm.overlap_ratio();
  j["overlap_ratio"] = ratio ? nlohmann::json(*ratio) : nlohmann::json(nullptr);
}

void join_streams(Stream& compute, const std::vector<Stream*>& others, TraceRecorder* timing) {
  for (Stream* s : others) {
    if (!s || s == &compute) continue;
    auto done = compute.device().create_event();
    done->record(*s);
    if (timing)  // the wait holds what it needs; the event may go
      timing->comm_wait(compute, *done, "wait streams");
    else
      compute.wait(*done);
  }
}

}  // namespace moezero::train
