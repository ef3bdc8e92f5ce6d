// moe/routing_trace.cpp — gathering and writing the routing trace (routing_trace.h).
#include "moe/routing_trace.h"

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
