// report/routing_report.h — `moezero report` of a routing trace (profile.routing_trace, README
// "MoE layers of today"), told apart from metrics and traces by its header line
// ({"format": "moezero routing trace", ...}). Per MoE layer:
//   load[s][e]        = the step's token assignments to expert e, summed over its micro-batches
//                       and ranks (= the metrics' tokens_per_expert of that step);
//   max_over_mean[s]  = max_e load / mean_e load, cv[s] = population std_e load / mean_e load
//                       (the metrics' load_max_over_mean and load_cv; absent when the step
//                       routed no token to the layer);
//   token_share[e]    = sum_s load[s][e] / sum_s,e' load[s][e'] (0 when the layer routed none);
//   mean / max over steps of max_over_mean and cv.
// Every error names the file, the line and the field.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace moezero::report {

struct RoutingStepBalance {
  int64_t step = 0;
  std::vector<int64_t> load;  // (E)
  std::optional<double> max_over_mean, cv;
  bool operator==(const RoutingStepBalance&) const = default;
};

struct RoutingLayer {
  int64_t layer = 0;  // model layer id
  int64_t tokens = 0;
  std::vector<double> token_share;  // (E)
  std::optional<double> max_over_mean_mean, max_over_mean_max, cv_mean, cv_max;
  std::vector<RoutingStepBalance> steps;  // in step order
  bool operator==(const RoutingLayer&) const = default;
};

struct RoutingReport {
  std::string source;
  int64_t world_size = 0, ep_size = 0, num_experts = 0, top_k = 0, grad_accum_steps = 0;
  int64_t steps = 0, first_step = 0, last_step = 0;
  std::vector<RoutingLayer> layers;  // in the header's moe_layers order
  bool operator==(const RoutingReport&) const = default;
};

// True when the file's first line is a routing trace header (false when it cannot be read).
bool is_routing_trace(const std::string& path);
// Reads and summarises a routing trace (throws UserError naming file, line and field).
RoutingReport read_routing_report(const std::string& path);
void write_routing_text(std::ostream& os, const RoutingReport& r);
// The HTML page (inline CSS and SVG): the balance table <table id="routing-balance-table">,
// layers x steps heatmaps <svg id="heatmap-routing-max-over-mean"> and
// <svg id="heatmap-routing-cv"> (steps binned to at most 80 columns), layers x experts
// <svg id="heatmap-routing-share"> (% of the layer's assignments) and per layer steps x experts
// <svg id="heatmap-routing-load-L{layer}"> (load / mean load of the step; at most 40 rows).
std::string render_routing_html(const RoutingReport& r);
std::string routing_report_to_json(const RoutingReport& r);

}  // namespace moezero::report
