// train/step_stats.cpp — a rank's step counters, per-expert step counters and communication
// timing (step_stats.h).
#include "train/step_stats.h"

#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/transformer.h"
#include "prefetch/frequency_model.h"

namespace moezero::moe {

namespace {

// Word layout of one rank: [comm_ms, exposed_comm_ms], then per MoE layer, per field, E values.
enum Field : size_t {
  kGathers,
  kGatheredBytes,
  kGatherMs,  // double bits
  kCacheHits,
  kCacheMisses,
  kPrefetchHits,
  kPrefetchMisses,
  kWastedBytes,
  kA2aIn,
  kA2aOut,
  kFieldCount
};
constexpr size_t kHeaderWords = 2;

uint64_t bits(double v) { return std::bit_cast<uint64_t>(v); }
double from_bits(uint64_t w) { return std::bit_cast<double>(w); }

}  // namespace

RankStepStats rank_step_stats(const EngineCounters& now, const EngineCounters& before,
                              const MoeStats& moe, const MemStats& mem, const StepTiming& timing) {
  RankStepStats s;
#define MOEZERO_FROM_Engine(name) s.name = now.name - before.name;
#define MOEZERO_FROM_Moe(name) s.name = moe.name;
#define MOEZERO_FROM_Timing(name) s.name = timing.name;
#define MOEZERO_SET(name, unit, source) MOEZERO_FROM_##source(name)
  MOEZERO_RANK_STEP_COUNTERS(MOEZERO_SET)
#undef MOEZERO_SET
#undef MOEZERO_FROM_Moe
#undef MOEZERO_FROM_Timing
#undef MOEZERO_FROM_Engine
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
    if (is_moe_layer(model, l)) {
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
                                                     const MoeStats& stats,
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
      at(m, kGathers, e) += now.gathers - was.gathers;
      at(m, kGatheredBytes, e) += now.gathered_bytes - was.gathered_bytes;
      at(m, kGatherMs, e) = bits(from_bits(at(m, kGatherMs, e)) + (now.gather_ms - was.gather_ms));
      at(m, kCacheHits, e) += now.cache_hits - was.cache_hits;
      at(m, kCacheMisses, e) += now.cache_misses - was.cache_misses;
      at(m, kPrefetchHits, e) += now.prefetch_hits - was.prefetch_hits;
      at(m, kPrefetchMisses, e) += now.prefetch_misses - was.prefetch_misses;
      at(m, kWastedBytes, e) += now.wasted_bytes - was.wasted_bytes;
    }
    was = now;
  }
  for (size_t m = 0; m < moe_layers_.size(); ++m)
    for (size_t e = 0; e < E; ++e) {
      if (m < stats.a2a_tokens_in.size() && e < stats.a2a_tokens_in[m].size())
        at(m, kA2aIn, e) = static_cast<uint64_t>(stats.a2a_tokens_in[m][e]);
      if (m < stats.a2a_tokens_out.size() && e < stats.a2a_tokens_out[m].size())
        at(m, kA2aOut, e) = static_cast<uint64_t>(stats.a2a_tokens_out[m][e]);
    }
  return w;
}

void StepStatsCollector::sum(const std::vector<uint64_t>& all_words, int world,
                             const MoeStats& stats,
                             const std::vector<std::vector<double>>& predicted,
                             std::vector<MoeLayerStats>& layers, CommStepStats& comm) const {
  const size_t E = static_cast<size_t>(experts_);
  const size_t per_rank = kHeaderWords + moe_layers_.size() * kFieldCount * E;
  MOEZERO_CHECK(all_words.size() == per_rank * static_cast<size_t>(world), "step statistics: got ",
                all_words.size(), " words for ", world, " ranks of ", per_rank);
  comm = CommStepStats{};
  layers.assign(moe_layers_.size(), MoeLayerStats{});
  for (size_t m = 0; m < moe_layers_.size(); ++m) {
    MoeLayerStats& L = layers[m];
    L.layer = moe_layers_[m];
    L.tokens = m < stats.tokens_per_expert.size() ? stats.tokens_per_expert[m]
                                                  : std::vector<int64_t>(E, 0);
    L.predicted = m < predicted.size() ? predicted[m] : std::vector<double>(E, 0.0);
    if (m < stats.brier_sum.size()) {
      L.brier_sum = stats.brier_sum[m];
      L.brier_count = stats.brier_count[m];
      L.calibration_count = stats.calibration_count[m];
      L.calibration_active = stats.calibration_active[m];
    }
    for (auto* v : {&L.gathers, &L.gathered_bytes, &L.cache_hits, &L.cache_misses, &L.prefetch_hits,
                    &L.prefetch_misses, &L.wasted_bytes})
      v->assign(E, 0);
    L.gather_ms.assign(E, 0.0);
    L.a2a_tokens_in.assign(E, 0);
    L.a2a_tokens_out.assign(E, 0);
  }
  for (int r = 0; r < world; ++r) {
    const uint64_t* w = all_words.data() + static_cast<size_t>(r) * per_rank;
    comm.comm_ms += from_bits(w[0]);
    comm.exposed_comm_ms += from_bits(w[1]);
    for (size_t m = 0; m < moe_layers_.size(); ++m) {
      MoeLayerStats& L = layers[m];
      auto f = [&](Field field, size_t e) {
        return w[kHeaderWords + (m * kFieldCount + field) * E + e];
      };
      for (size_t e = 0; e < E; ++e) {
        L.gathers[e] += f(kGathers, e);
        L.gathered_bytes[e] += f(kGatheredBytes, e);
        L.gather_ms[e] += from_bits(f(kGatherMs, e));
        L.cache_hits[e] += f(kCacheHits, e);
        L.cache_misses[e] += f(kCacheMisses, e);
        L.prefetch_hits[e] += f(kPrefetchHits, e);
        L.prefetch_misses[e] += f(kPrefetchMisses, e);
        L.wasted_bytes[e] += f(kWastedBytes, e);
        L.a2a_tokens_in[e] += static_cast<int64_t>(f(kA2aIn, e));
        L.a2a_tokens_out[e] += static_cast<int64_t>(f(kA2aOut, e));
      }
    }
  }
}

void add_step_stats_json(nlohmann::json& j, const std::vector<MoeLayerStats>& layers,
                         const CommStepStats& comm) {
  auto arr = nlohmann::json::array();
  for (const MoeLayerStats& L : layers)
    arr.push_back({{"layer", L.layer},
                   {"tokens", L.tokens},
                   {"gathers", L.gathers},
                   {"gathered_bytes", L.gathered_bytes},
                   {"gather_ms", L.gather_ms},
                   {"cache_hits", L.cache_hits},
                   {"cache_misses", L.cache_misses},
                   {"prefetch_hits", L.prefetch_hits},
                   {"prefetch_misses", L.prefetch_misses},
                   {"wasted_bytes", L.wasted_bytes},
                   {"a2a_tokens_in", L.a2a_tokens_in},
                   {"a2a_tokens_out", L.a2a_tokens_out},
                   {"predicted", L.predicted},
                   {"brier_sum", L.brier_sum},
                   {"brier_count", L.brier_count},
                   {"calibration_count", L.calibration_count},
                   {"calibration_active", L.calibration_active}});
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

}  // namespace moezero::moe
