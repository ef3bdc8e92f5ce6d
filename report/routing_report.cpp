// report/routing_report.cpp — reading and summarising a routing trace (routing_report.h).
#include "report/routing_report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace moezero::report {

namespace {

using nlohmann::json;

int64_t routing_int(const json& j, const char* key, const std::string& where) {
  MOEZERO_REQUIRE(j.is_object() && j.contains(key) && j[key].is_number_integer(), where,
                  ": field '", key, "' is missing or not an integer");
  return j[key].get<int64_t>();
}

json parse_line(const std::string& line, const std::string& where) {
  json j = json::parse(line, nullptr, false);
  MOEZERO_REQUIRE(!j.is_discarded() && j.is_object(), where, ": not a JSON object");
  return j;
}

bool is_header(const json& j) {
  return j.is_object() && j.contains("format") && j["format"] == "moezero routing trace";
}

void balance(RoutingStepBalance& b) {
  const double n = static_cast<double>(b.load.size());
  int64_t total = 0, most = 0;
  for (int64_t t : b.load) {
    total += t;
    most = std::max(most, t);
  }
  const double mean = n > 0 ? static_cast<double>(total) / n : 0.0;
  if (mean <= 0.0) return;
  double var = 0.0;
  for (int64_t t : b.load) var += (static_cast<double>(t) - mean) * (static_cast<double>(t) - mean);
  b.max_over_mean = static_cast<double>(most) / mean;
  b.cv = std::sqrt(var / n) / mean;
}

json json_or_null(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

std::string text_or_na(const std::optional<double>& v) {
  if (!v) return "n/a";
  std::ostringstream s;
  s << std::fixed << std::setprecision(3) << *v;
  return s.str();
}

}  // namespace

bool is_routing_trace(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return false;
  return is_header(json::parse(line, nullptr, false));
}

RoutingReport read_routing_report(const std::string& path) {
  std::ifstream in(path);
  MOEZERO_REQUIRE(in.good(), path, ": cannot open for reading");
  RoutingReport r;
  r.source = path;
  std::string line;
  MOEZERO_REQUIRE(static_cast<bool>(std::getline(in, line)), path, ":1: empty file");
  const json h = parse_line(line, path + ":1");
  MOEZERO_REQUIRE(is_header(h), path, ":1: not a routing trace header");
  MOEZERO_REQUIRE(routing_int(h, "version", path + ":1") == 1, path, ":1: version ",
                  h["version"].dump(), " is not supported (1)");
  r.world_size = routing_int(h, "world_size", path + ":1");
  r.ep_size = routing_int(h, "ep_size", path + ":1");
  r.num_experts = routing_int(h, "num_experts", path + ":1");
  r.top_k = routing_int(h, "top_k", path + ":1");
  r.grad_accum_steps = routing_int(h, "grad_accum_steps", path + ":1");
  MOEZERO_REQUIRE(r.num_experts >= 1, path, ":1: num_experts must be >= 1");
  MOEZERO_REQUIRE(h.contains("moe_layers") && h["moe_layers"].is_array(), path,
                  ":1: field 'moe_layers' is missing or not a list");
  std::map<int64_t, size_t> layer_pos;
  for (const auto& v : h["moe_layers"]) {
    MOEZERO_REQUIRE(v.is_number_integer(), path, ":1: moe_layers holds a non-integer");
    layer_pos[v.get<int64_t>()] = r.layers.size();
    r.layers.emplace_back();
    r.layers.back().layer = v.get<int64_t>();
  }
  const size_t E = static_cast<size_t>(r.num_experts);
  // (layer position) -> step -> load
  std::vector<std::map<int64_t, std::vector<int64_t>>> load(r.layers.size());
  for (int64_t n = 2; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(n);
    const json j = parse_line(line, where);
    const int64_t step = routing_int(j, "step", where), layer = routing_int(j, "layer", where);
    routing_int(j, "micro_batch", where);
    const int64_t rank = routing_int(j, "rank", where);
    MOEZERO_REQUIRE(step >= 1, where, ": step ", step, " must be >= 1");
    MOEZERO_REQUIRE(rank >= 0 && rank < r.world_size, where, ": rank ", rank,
                    " is outside world_size ", r.world_size);
    const auto it = layer_pos.find(layer);
    MOEZERO_REQUIRE(it != layer_pos.end(), where, ": layer ", layer, " is not in moe_layers");
    MOEZERO_REQUIRE(j.contains("counts") && j["counts"].is_array() && j["counts"].size() == E,
                    where, ": counts must be a list of ", E, " integers (num_experts)");
    auto& l = load[it->second][step];
    l.resize(E, 0);
    for (size_t e = 0; e < E; ++e) {
      const auto& v = j["counts"][e];
      MOEZERO_REQUIRE(v.is_number_integer() && v.get<int64_t>() >= 0, where, ": counts[", e,
                      "] = ", v.dump(), " is not a non-negative integer");
      l[e] += v.get<int64_t>();
    }
  }
  std::map<int64_t, bool> steps;
  for (size_t m = 0; m < r.layers.size(); ++m) {
    RoutingLayer& L = r.layers[m];
    std::vector<int64_t> sum(E, 0);
    std::vector<double> mom, cvs;
    for (auto& [step, l] : load[m]) {
      steps[step] = true;
      RoutingStepBalance b;
      b.step = step;
      b.load = l;
      balance(b);
      for (size_t e = 0; e < E; ++e) sum[e] += l[e];
      if (b.max_over_mean) mom.push_back(*b.max_over_mean);
      if (b.cv) cvs.push_back(*b.cv);
      L.steps.push_back(std::move(b));
    }
    for (int64_t t : sum) L.tokens += t;
    L.token_share.assign(E, 0.0);
    if (L.tokens > 0)
      for (size_t e = 0; e < E; ++e)
        L.token_share[e] = static_cast<double>(sum[e]) / static_cast<double>(L.tokens);
    auto mean_max = [](const std::vector<double>& v, std::optional<double>& mean,
                       std::optional<double>& most) {
      if (v.empty()) return;
      double s = 0.0;
      for (double x : v) s += x;
      mean = s / static_cast<double>(v.size());
      most = *std::max_element(v.begin(), v.end());
    };
    mean_max(mom, L.max_over_mean_mean, L.max_over_mean_max);
    mean_max(cvs, L.cv_mean, L.cv_max);
  }
  r.steps = static_cast<int64_t>(steps.size());
  if (!steps.empty()) {
    r.first_step = steps.begin()->first;
    r.last_step = steps.rbegin()->first;
  }
  return r;
}

void write_routing_text(std::ostream& os, const RoutingReport& r) {
  os << "routing trace " << r.source << ": " << r.steps << " steps";
  if (r.steps > 0) os << " (" << r.first_step << "-" << r.last_step << ")";
  os << ", world " << r.world_size << ", EP " << r.ep_size << ", " << r.num_experts
     << " experts, top-" << r.top_k << ", " << r.grad_accum_steps << " micro-batch(es) per step\n";
  os << "\nload balance per MoE layer over steps (max/mean, CV of tokens per expert)\n";
  os << "  layer     tokens  max/mean (mean)  max/mean (max)  CV (mean)  CV (max)\n";
  for (const RoutingLayer& L : r.layers)
    os << "  " << std::setw(5) << L.layer << " " << std::setw(10) << L.tokens << "  "
       << std::setw(15) << text_or_na(L.max_over_mean_mean) << "  " << std::setw(14)
       << text_or_na(L.max_over_mean_max) << "  " << std::setw(9) << text_or_na(L.cv_mean) << "  "
       << std::setw(8) << text_or_na(L.cv_max) << "\n";
  os << "\nper-step balance (layer: max/mean / CV per step)\n";
  for (const RoutingLayer& L : r.layers) {
    os << "  layer " << L.layer << ":";
    for (const auto& b : L.steps)
      os << "  " << b.step << ": " << text_or_na(b.max_over_mean) << " / " << text_or_na(b.cv);
    os << "\n";
  }
  os << "\ntoken share per expert (% of the layer's assignments)\n";
  for (const RoutingLayer& L : r.layers) {
    os << "  layer " << std::setw(3) << L.layer << ":";
    for (double s : L.token_share)
      os << " " << std::fixed << std::setprecision(1) << std::setw(5) << 100.0 * s;
    os << std::defaultfloat << "\n";
  }
}

std::string routing_report_to_json(const RoutingReport& r) {
  nlohmann::ordered_json o;
  o["kind"] = "routing_trace";
  o["source"] = r.source;
  o["world_size"] = r.world_size;
  o["ep_size"] = r.ep_size;
  o["num_experts"] = r.num_experts;
  o["top_k"] = r.top_k;
  o["grad_accum_steps"] = r.grad_accum_steps;
  o["steps"] = r.steps;
  o["first_step"] = r.first_step;
  o["last_step"] = r.last_step;
  o["layers"] = json::array();
  for (const RoutingLayer& L : r.layers) {
    nlohmann::ordered_json l;
    l["layer"] = L.layer;
    l["tokens"] = L.tokens;
    l["token_share"] = L.token_share;
    l["load_max_over_mean_mean"] = json_or_null(L.max_over_mean_mean);
    l["load_max_over_mean_max"] = json_or_null(L.max_over_mean_max);
    l["load_cv_mean"] = json_or_null(L.cv_mean);
    l["load_cv_max"] = json_or_null(L.cv_max);
    l["steps"] = json::array();
    for (const auto& b : L.steps) {
      nlohmann::ordered_json s;
      s["step"] = b.step;
      s["tokens_per_expert"] = b.load;
      s["load_max_over_mean"] = json_or_null(b.max_over_mean);
      s["load_cv"] = json_or_null(b.cv);
      l["steps"].push_back(s);
    }
    o["layers"].push_back(l);
  }
  return o.dump(2);
}

}  // namespace moezero::report
