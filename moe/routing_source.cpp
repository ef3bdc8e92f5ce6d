// moe/routing_source.cpp — routing counts without data (routing_source.h).
#include "moe/routing_source.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.h"

namespace moezero::moe {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t key(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x6a09e667f3bcc909ull;
  for (uint64_t p : parts) h = mix(h ^ p);
  return h;
}

double uniform01(uint64_t h) { return (double(h >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

double normal(uint64_t h) {  // Box-Muller from two uniforms of one key
  const double u1 = uniform01(mix(h)), u2 = uniform01(mix(h ^ 0x5bd1e995ull));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

void shuffle(std::vector<int>& v, uint64_t seed) {  // Fisher-Yates on a counter-based stream
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(mix(seed + i) % i);
    std::swap(v[i - 1], v[j]);
  }
}

void check_shape(const RoutingShape& s, const char* who) {
  MOEZERO_REQUIRE(s.num_experts >= 1 && s.top_k >= 1 && s.top_k <= s.num_experts &&
                      s.tokens_per_rank >= 0 && s.moe_layers >= 1,
                  who, ": bad routing shape (experts ", s.num_experts, ", top_k ", s.top_k,
                  ", tokens per rank ", s.tokens_per_rank, ", MoE layers ", s.moe_layers, ")");
}

}  // namespace

namespace {
constexpr size_t kMaxTotals = size_t{1} << 16;  // (micro-batch, layer) totals kept, ~32 MiB at E 64
}  // namespace

std::vector<int64_t> RoutingSource::total(int64_t micro_batch, int moe_index,
                                          int world_size) const {
  const std::tuple<int64_t, int, int> key{micro_batch, moe_index, world_size};
  // The present ranks reach a layer together: one computes its total, the others wait for it.
  std::lock_guard computing(computing_mu_);
  {
    std::lock_guard lock(totals_mu_);
    const auto hit = totals_.find(key);
    if (hit != totals_.end()) return hit->second;
  }
  std::vector<int64_t> sum;
  for (int r = 0; r < world_size; ++r) {
    const std::vector<int64_t> c = counts(micro_batch, moe_index, r);
    if (sum.empty()) sum.assign(c.size(), 0);
    for (size_t e = 0; e < c.size(); ++e) sum[e] += c[e];
  }
  std::lock_guard lock(totals_mu_);
  if (totals_.size() >= kMaxTotals) totals_.clear();  // a long run: start again
  totals_.emplace(key, sum);
  return sum;
}

std::vector<int64_t> apportion(std::span<const double> weights, int64_t tokens, int top_k) {
  const size_t E = weights.size();
  MOEZERO_CHECK(E > 0 && top_k >= 1 && static_cast<size_t>(top_k) <= E && tokens >= 0,
                "apportion: ", top_k, " of ", E, " experts for ", tokens, " tokens");
  std::vector<int64_t> out(E, 0);
  std::vector<double> w(weights.begin(), weights.end());
  for (double x : w) MOEZERO_CHECK(std::isfinite(x) && x >= 0.0, "apportion: weight ", x);
  std::vector<char> capped(E, 0);
  int64_t left = tokens * top_k;
  std::vector<double> quota(E, 0.0);
  for (;;) {  // cap the experts whose share exceeds `tokens`, re-share the rest
    double sum = 0.0;
    for (size_t e = 0; e < E; ++e)
      if (!capped[e]) sum += w[e];
    if (sum <= 0.0) {  // only zero weights are left: share evenly among them
      for (size_t e = 0; e < E; ++e)
        if (!capped[e]) w[e] = 1.0;
      continue;
    }
    bool any = false;
    for (size_t e = 0; e < E; ++e) {
      if (capped[e]) continue;
      quota[e] = double(left) * w[e] / sum;
      if (quota[e] > double(tokens)) {
        capped[e] = 1;
        out[e] = tokens;
        left -= tokens;
        any = true;
      }
    }
    if (!any) break;
  }
  int64_t given = 0;
  std::vector<std::pair<double, size_t>> rem;
  for (size_t e = 0; e < E; ++e) {
    if (capped[e]) continue;
    out[e] = std::min<int64_t>(tokens, static_cast<int64_t>(std::floor(quota[e])));
    given += out[e];
    rem.emplace_back(quota[e] - double(out[e]), e);
  }
  std::stable_sort(rem.begin(), rem.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < left; i = (i + 1) % rem.size()) {  // at most one pass in practice
    const size_t e = rem[i].second;
    if (out[e] < tokens) {
      ++out[e];
      ++given;
    }
  }
  return out;
}

SyntheticRoutingSource::SyntheticRoutingSource(RoutingShape shape, SyntheticRouting params)
    : shape_(shape), p_(params) {
  check_shape(shape_, "synthetic routing");
  MOEZERO_REQUIRE(std::isfinite(p_.zipf_s) && p_.zipf_s >= 0.0, "synthetic routing: zipf ",
                  p_.zipf_s, " must be >= 0");
  MOEZERO_REQUIRE(std::isfinite(p_.drift) && p_.drift >= 0.0, "synthetic routing: drift ", p_.drift,
                  " must be >= 0");
  MOEZERO_REQUIRE(p_.coactivation >= 0.0 && p_.coactivation <= 1.0,
                  "synthetic routing: coactivation ", p_.coactivation, " must be in [0, 1]");
  MOEZERO_REQUIRE(std::isfinite(p_.rank_noise) && p_.rank_noise >= 0.0,
                  "synthetic routing: rank noise ", p_.rank_noise, " must be >= 0");
  MOEZERO_REQUIRE(p_.grad_accum_steps >= 1, "synthetic routing: grad_accum_steps ",
                  p_.grad_accum_steps);
  const int E = static_cast<int>(shape_.num_experts);
  std::vector<int> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  shuffle(order, key({p_.seed, 1}));
  for (int l = 0; l < shape_.moe_layers; ++l) {
    if (l > 0) {  // keep a fraction `coactivation` of the previous layer's positions
      std::vector<size_t> moved;
      for (size_t i = 0; i < order.size(); ++i)
        if (uniform01(key({p_.seed, 2, uint64_t(l), i})) >= p_.coactivation) moved.push_back(i);
      std::vector<int> experts;
      for (size_t i : moved) experts.push_back(order[i]);
      shuffle(experts, key({p_.seed, 3, uint64_t(l)}));
      for (size_t i = 0; i < moved.size(); ++i) order[moved[i]] = experts[i];
    }
    order_.push_back(order);
  }
}

std::vector<double> SyntheticRoutingSource::weights(int64_t micro_batch, int moe_index) const {
  MOEZERO_CHECK(moe_index >= 0 && moe_index < shape_.moe_layers, "synthetic routing: MoE layer ",
                moe_index, " of ", shape_.moe_layers);
  const size_t E = static_cast<size_t>(shape_.num_experts);
  const int64_t step = micro_batch / p_.grad_accum_steps;
  const size_t shift = static_cast<size_t>(std::floor(p_.drift * double(step))) % E;
  const std::vector<int>& order = order_[static_cast<size_t>(moe_index)];
  std::vector<double> w(E, 0.0);
  for (size_t i = 0; i < E; ++i)
    w[static_cast<size_t>(order[(i + shift) % E])] = std::pow(double(i + 1), -p_.zipf_s);
  return w;
}

std::vector<int64_t> SyntheticRoutingSource::counts(int64_t micro_batch, int moe_index,
                                                    int rank) const {
  std::vector<double> w = weights(micro_batch, moe_index);
  if (p_.rank_noise > 0.0)
    for (size_t e = 0; e < w.size(); ++e)
      w[e] *= std::exp(p_.rank_noise * normal(key({p_.seed, 4, uint64_t(micro_batch),
                                                   uint64_t(moe_index), uint64_t(rank), e})));
  return apportion(w, shape_.tokens_per_rank, shape_.top_k);
}

namespace {

int64_t int_at(const nlohmann::json& j, const char* field, const std::string& where) {
  MOEZERO_REQUIRE(j.is_object() && j.contains(field) && j[field].is_number_integer(), where,
                  ": field '", field, "' is missing or not an integer");
  return j[field].get<int64_t>();
}

}  // namespace

TraceRoutingSource::TraceRoutingSource(const std::string& path, RoutingShape shape)
    : shape_(shape) {
  check_shape(shape_, "routing trace source");
  std::ifstream in(path);
  MOEZERO_REQUIRE(in.good(), "routing trace '", path, "': cannot read the file");
  std::string line;
  MOEZERO_REQUIRE(static_cast<bool>(std::getline(in, line)), "routing trace '", path,
                  "': the file is empty");
  const std::string head = "routing trace '" + path + "' line 1";
  nlohmann::json h = nlohmann::json::parse(line, nullptr, false);
  MOEZERO_REQUIRE(
      !h.is_discarded() && h.is_object() && h.value("format", "") == "moezero routing trace", head,
      ": not a moezero routing trace header");
  MOEZERO_REQUIRE(int_at(h, "version", head) == 1, head, ": version ", h["version"].dump(),
                  " is not 1");
  world_ = static_cast<int>(int_at(h, "world_size", head));
  const int64_t E = int_at(h, "num_experts", head);
  top_k_ = static_cast<int>(int_at(h, "top_k", head));
  MOEZERO_REQUIRE(world_ >= 1 && world_ <= (1 << 20), head, ": world_size ", world_);
  MOEZERO_REQUIRE(E == shape_.num_experts, head, ": num_experts ", E, " differs from the run's ",
                  shape_.num_experts,
                  " (a trace maps ranks, layers and micro-batches, not experts)");
  MOEZERO_REQUIRE(
      h.contains("moe_layers") && h["moe_layers"].is_array() && !h["moe_layers"].empty(), head,
      ": field 'moe_layers' is missing or empty");
  std::map<int64_t, int> layer_index;
  for (const auto& v : h["moe_layers"]) {
    MOEZERO_REQUIRE(v.is_number_integer(), head, ": 'moe_layers' holds a non-integer");
    layer_index.emplace(v.get<int64_t>(), static_cast<int>(layer_index.size()));
  }
  layers_ = static_cast<int>(layer_index.size());
  const size_t per_mb =
      static_cast<size_t>(layers_) * static_cast<size_t>(world_) * static_cast<size_t>(E);
  std::map<int64_t, std::pair<std::vector<int64_t>, std::vector<char>>> mbs;
  for (int64_t n = 2; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = "routing trace '" + path + "' line " + std::to_string(n);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    MOEZERO_REQUIRE(!j.is_discarded(), where, ": not JSON");
    const int64_t mb = int_at(j, "micro_batch", where), layer = int_at(j, "layer", where),
                  r = int_at(j, "rank", where);
    MOEZERO_REQUIRE(mb >= 0 && mb < (int64_t(1) << 40), where, ": micro_batch ", mb);
    MOEZERO_REQUIRE(r >= 0 && r < world_, where, ": rank ", r, " outside the world of ", world_);
    const auto li = layer_index.find(layer);
    MOEZERO_REQUIRE(li != layer_index.end(), where, ": layer ", layer,
                    " is not among the header's moe_layers");
    MOEZERO_REQUIRE(j.contains("counts") && j["counts"].is_array() &&
                        static_cast<int64_t>(j["counts"].size()) == E,
                    where, ": field 'counts' must hold ", E, " integers");
    auto& [c, seen] = mbs[mb];
    if (c.empty()) {
      c.assign(per_mb, 0);
      seen.assign(per_mb / static_cast<size_t>(E), 0);
    }
    const size_t slot =
        static_cast<size_t>(li->second) * static_cast<size_t>(world_) + static_cast<size_t>(r);
    int64_t sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      const auto& v = j["counts"][static_cast<size_t>(e)];
      MOEZERO_REQUIRE(
          v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (int64_t(1) << 40),
          where, ": counts[", e, "] is not a non-negative integer");
      c[slot * static_cast<size_t>(E) + static_cast<size_t>(e)] = v.get<int64_t>();
      sum += v.get<int64_t>();
    }
    MOEZERO_REQUIRE(sum > 0, where, ": the counts are all zero");
    seen[slot] = 1;  // a step recorded twice keeps its last lines
  }
  for (auto& [mb, cs] : mbs) {  // the complete micro-batches 0, 1, 2, ... in order
    if (mb != micro_batches_ || std::find(cs.second.begin(), cs.second.end(), 0) != cs.second.end())
      break;
    counts_.insert(counts_.end(), cs.first.begin(), cs.first.end());
    ++micro_batches_;
  }
  MOEZERO_REQUIRE(micro_batches_ > 0, "routing trace '", path,
                  "': no micro-batch is recorded completely (every MoE layer and rank), starting "
                  "at micro-batch 0");
}

std::vector<int64_t> TraceRoutingSource::counts(int64_t micro_batch, int moe_index,
                                                int rank) const {
  MOEZERO_CHECK(micro_batch >= 0 && moe_index >= 0 && rank >= 0, "routing trace source: (",
                micro_batch, ", ", moe_index, ", ", rank, ")");
  const size_t E = static_cast<size_t>(shape_.num_experts);
  const size_t b = static_cast<size_t>(micro_batch % micro_batches_),
               m = static_cast<size_t>(moe_index % layers_), r = static_cast<size_t>(rank % world_);
  const size_t at = ((b * static_cast<size_t>(layers_) + m) * static_cast<size_t>(world_) + r) * E;
  const std::span<const int64_t> rec(counts_.data() + at, E);
  const int64_t sum = std::accumulate(rec.begin(), rec.end(), int64_t{0});
  const int64_t max = *std::max_element(rec.begin(), rec.end());
  if (sum == shape_.tokens_per_rank * shape_.top_k && max <= shape_.tokens_per_rank)
    return {rec.begin(), rec.end()};
  std::vector<double> w(rec.begin(), rec.end());
  return apportion(w, shape_.tokens_per_rank, shape_.top_k);
}

}  // namespace moezero::moe
