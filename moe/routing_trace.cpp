// moe/routing_trace.cpp — gathering and writing the routing trace (routing_trace.h).
#include "moe/routing_trace.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/communicator.h"
#include "core/error.h"
#include "core/host_exchange.h"

namespace moezero::moe {

RoutingTrace::RoutingTrace(const Config& cfg, std::vector<int> moe_layers, bool writer, bool append)
    : accum_(cfg.train.grad_accum_steps),
      experts_(cfg.model.num_experts),
      world_(static_cast<int>(cfg.parallel.world_size)),
      layers_(std::move(moe_layers)),
      path_(cfg.profile.routing_trace) {
  if (!writer) return;
  out_.open(path_, append ? std::ios::app : std::ios::trunc);
  MOEZERO_REQUIRE(out_.good(), "profile.routing_trace: cannot write '", path_, "'");
  if (append) return;
  nlohmann::ordered_json h;
  h["format"] = "moezero routing trace";
  h["version"] = 1;
  h["world_size"] = cfg.parallel.world_size;
  h["ep_size"] = cfg.parallel.ep_size;
  h["num_experts"] = cfg.model.num_experts;
  h["top_k"] = cfg.model.top_k;
  h["grad_accum_steps"] = cfg.train.grad_accum_steps;
  h["moe_layers"] = layers_;
  out_ << h.dump() << "\n" << std::flush;
}

void RoutingTrace::record_step(int64_t step, const MoeStats& stats, Device& device, Stream& stream,
                               Communicator& world) {
  const size_t L = layers_.size(), E = static_cast<size_t>(experts_);
  const size_t entries = static_cast<size_t>(accum_) * L;
  MOEZERO_CHECK(stats.local_counts.size() == entries, "routing trace: step ", step, " recorded ",
                stats.local_counts.size(), " (micro-batch, layer) entries, expected ", entries);
  std::vector<int64_t> mine(entries * E);
  for (size_t i = 0; i < entries; ++i) {
    MOEZERO_CHECK(stats.local_counts[i].size() == E,
                  "routing trace: ", stats.local_counts[i].size(), " counts for ", E, " experts");
    for (size_t e = 0; e < E; ++e) mine[i * E + e] = stats.local_counts[i][e];
  }
  const std::vector<int64_t> all =
      world.size() > 1 ? all_gather_words(device, stream, world, mine) : mine;
  if (!out_.is_open()) return;
  for (size_t a = 0; a < static_cast<size_t>(accum_); ++a)
    for (size_t m = 0; m < L; ++m)
      for (int r = 0; r < world_; ++r) {
        const int64_t* c = all.data() + static_cast<size_t>(r) * mine.size() + (a * L + m) * E;
        nlohmann::ordered_json j;
        j["step"] = step;
        j["micro_batch"] = (step - 1) * accum_ + static_cast<int64_t>(a);
        j["layer"] = layers_[m];
        j["rank"] = r;
        j["counts"] = std::vector<int64_t>(c, c + E);
        out_ << j.dump() << "\n";
      }
  out_.flush();
  MOEZERO_REQUIRE(out_.good(), "profile.routing_trace: writing '", path_, "' failed");
}

}  // namespace moezero::moe

namespace moezero::moe {

namespace {

// The integer field `key` of a trace line (throws naming the file, line and key).
int64_t int_field(const nlohmann::json& j, const char* key, const std::string& where) {
  MOEZERO_REQUIRE(j.is_object() && j.contains(key) && j[key].is_number_integer(), where,
                  ": field '", key, "' is missing or not an integer");
  return j[key].get<int64_t>();
}

}  // namespace

RoutingReplay::RoutingReplay(const Config& cfg, const std::vector<int>& moe_layers,
                             int64_t tokens_per_rank, int rank)
    : path_(cfg.moe.routing_replay),
      experts_(cfg.model.num_experts),
      layers_(static_cast<int64_t>(moe_layers.size())) {
  const std::string what = "moe.routing_replay '" + path_ + "'";
  MOEZERO_REQUIRE(cfg.moe.capacity_factor == 0.0, what,
                  ": needs moe.capacity_factor = 0 (the replayed assignments are all kept), got ",
                  cfg.moe.capacity_factor);
  MOEZERO_REQUIRE(layers_ > 0, what, ": the model has no MoE layer to replay");
  std::ifstream in(path_);
  MOEZERO_REQUIRE(in.good(), what, ": cannot read the file");
  const int64_t world = cfg.parallel.world_size, accum = cfg.train.grad_accum_steps;
  const int64_t k = cfg.model.top_k;
  std::string line;
  int64_t n = 0;
  auto parse = [&](const std::string& where) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    MOEZERO_REQUIRE(!j.is_discarded() && j.is_object(), where, ": not a JSON object");
    return j;
  };
  MOEZERO_REQUIRE(static_cast<bool>(std::getline(in, line)), what, ": empty file");
  ++n;
  {
    const std::string where = what + " line 1";
    const nlohmann::json h = parse(where);
    MOEZERO_REQUIRE(h.value("format", std::string()) == "moezero routing trace", where,
                    ": not a routing trace header (format must be \"moezero routing trace\")");
    MOEZERO_REQUIRE(int_field(h, "version", where) == 1, where, ": version ", h["version"].dump(),
                    " is not supported (1)");
    auto same = [&](const char* key, int64_t run, const char* run_key) {
      const int64_t v = int_field(h, key, where);
      MOEZERO_REQUIRE(v == run, where, ": ", key, " is ", v, " but this run has ", run_key, " = ",
                      run);
    };
    same("world_size", world, "parallel.world_size");
    same("ep_size", cfg.parallel.ep_size, "parallel.ep_size");
    same("num_experts", experts_, "model.num_experts");
    same("top_k", k, "model.top_k");
    same("grad_accum_steps", accum, "train.grad_accum_steps");
    MOEZERO_REQUIRE(h.contains("moe_layers") && h["moe_layers"].is_array(), where,
                    ": field 'moe_layers' is missing or not a list");
    std::vector<int> recorded;
    for (const auto& v : h["moe_layers"]) {
      MOEZERO_REQUIRE(v.is_number_integer(), where, ": moe_layers holds a non-integer");
      recorded.push_back(v.get<int>());
    }
    MOEZERO_REQUIRE(recorded == moe_layers, where, ": moe_layers is ", h["moe_layers"].dump(),
                    " but this run's MoE layers are ", nlohmann::json(moe_layers).dump());
  }
  const int64_t want_mb = cfg.train.steps * accum;
  micro_batches_ = want_mb;
  const size_t E = static_cast<size_t>(experts_);
  counts_.assign(static_cast<size_t>(want_mb * layers_) * E, 0);
  std::vector<char> seen(static_cast<size_t>(want_mb * layers_ * world), 0);
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    const std::string where = what + " line " + std::to_string(n);
    const nlohmann::json j = parse(where);
    const int64_t step = int_field(j, "step", where), mb = int_field(j, "micro_batch", where);
    const int64_t layer = int_field(j, "layer", where), r = int_field(j, "rank", where);
    MOEZERO_REQUIRE(step >= 1 && mb >= (step - 1) * accum && mb < step * accum, where,
                    ": micro_batch ", mb, " is not in step ", step, " (grad_accum_steps ", accum,
                    ")");
    MOEZERO_REQUIRE(r >= 0 && r < world, where, ": rank ", r, " is outside the world of ", world);
    const auto it = std::find(moe_layers.begin(), moe_layers.end(), static_cast<int>(layer));
    MOEZERO_REQUIRE(it != moe_layers.end(), where, ": layer ", layer, " is not a MoE layer");
    MOEZERO_REQUIRE(j.contains("counts") && j["counts"].is_array() && j["counts"].size() == E,
                    where, ": counts must be a list of ", E, " integers (model.num_experts)");
    std::vector<int64_t> c(E);
    int64_t sum = 0;
    for (size_t e = 0; e < E; ++e) {
      const auto& v = j["counts"][e];
      MOEZERO_REQUIRE(
          v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= tokens_per_rank,
          where, ": counts[", e, "] = ", v.dump(), " is not a token count in [0, ", tokens_per_rank,
          "] (this run's tokens per rank)");
      c[e] = v.get<int64_t>();
      sum += c[e];
    }
    MOEZERO_REQUIRE(sum == tokens_per_rank * k, where, ": token counts sum to ", sum,
                    " but this run routes ", tokens_per_rank * k, " assignments per rank (",
                    tokens_per_rank, " tokens x top_k ", k,
                    "; a trace with capacity drops cannot be replayed)");
    if (mb >= want_mb) continue;
    const size_t m = static_cast<size_t>(it - moe_layers.begin());
    seen[(static_cast<size_t>(mb) * static_cast<size_t>(layers_) + m) * static_cast<size_t>(world) +
         static_cast<size_t>(r)] = 1;
    if (r == rank)
      std::copy(
          c.begin(), c.end(),
          counts_.begin() + static_cast<std::ptrdiff_t>(
                                (static_cast<size_t>(mb) * static_cast<size_t>(layers_) + m) * E));
  }
  // The steps recorded completely, from the first.
  for (int64_t mb = 0; mb < want_mb; ++mb) {
    bool all = true;
    for (size_t i = 0; i < static_cast<size_t>(layers_ * world); ++i)
      all = all && seen[static_cast<size_t>(mb * layers_ * world) + i];
    if (!all) break;
    if ((mb + 1) % accum == 0) steps_ = (mb + 1) / accum;
  }
  MOEZERO_REQUIRE(steps_ >= cfg.train.steps, what, ": records ", steps_,
                  " complete steps (every micro-batch, MoE layer and rank) but train.steps is ",
                  cfg.train.steps, " (a replay does not wrap around)");
}

std::span<const int64_t> RoutingReplay::counts(int64_t micro_batch, int moe_index) const {
  MOEZERO_REQUIRE(micro_batch >= 0 && micro_batch < micro_batches_, "moe.routing_replay '", path_,
                  "': micro-batch ", micro_batch, " is beyond the recording (", micro_batches_,
                  " micro-batches)");
  MOEZERO_CHECK(moe_index >= 0 && moe_index < layers_, "routing replay: MoE layer index ",
                moe_index);
  const size_t E = static_cast<size_t>(experts_);
  return std::span<const int64_t>(counts_).subspan(
      (static_cast<size_t>(micro_batch) * static_cast<size_t>(layers_) +
       static_cast<size_t>(moe_index)) *
          E,
      E);
}

}  // namespace moezero::moe
