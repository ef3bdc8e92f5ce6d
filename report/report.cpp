// report/report.cpp — computes the report's numbers (definitions in report.h) and its JSON form.
#include "report/report.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.h"
#include "core/step_counters.h"

namespace moezero::report {

bool RankRow::has(const std::string& counter) const {
  return std::find(absent.begin(), absent.end(), counter) == absent.end();
}

const ExpertRow& Report::expert(size_t layer_pos, size_t e) const {
  size_t off = 0;
  for (size_t l = 0; l < layer_pos; ++l) off += static_cast<size_t>(layers[l].experts);
  return experts.at(off + e);
}

std::optional<double> busbw_factor(const std::string& op, int64_t n) {
  if (n < 1) return std::nullopt;
  const double nd = static_cast<double>(n);
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all" || op == "all_to_all_v")
    return (nd - 1.0) / nd;
  if (op == "all_reduce") return 2.0 * (nd - 1.0) / nd;
  if (op == "broadcast" || op == "reduce") return 1.0;
  return std::nullopt;
}

std::pair<int64_t, int64_t> size_bucket(int64_t bytes) {
  if (bytes <= 0) return {0, 1};
  const auto lo = static_cast<int64_t>(std::bit_floor(static_cast<uint64_t>(bytes)));
  return {lo, lo * 2};
}

std::string group_kind(const std::string& group) {
  size_t end = group.size();
  while (end > 0 && std::isdigit(static_cast<unsigned char>(group[end - 1]))) --end;
  return end == 0 ? group : group.substr(0, end);
}

namespace {

void add_experts(Report& r, const RunInput& in) {
  const StepRecord& first = in.steps.front();
  const double nsteps = static_cast<double>(in.steps.size());
  for (size_t l = 0; l < first.tokens_per_expert.size(); ++l) {
    LayerRow lr;
    lr.layer = first.has_moe_layers ? first.moe_layers[l].layer : static_cast<int64_t>(l);
    const size_t ne = first.tokens_per_expert[l].size();
    lr.experts = static_cast<int64_t>(ne);
    std::vector<ExpertRow> rows(ne);
    std::vector<double> predicted_sum(ne, 0.0);
    for (size_t e = 0; e < ne; ++e) {
      rows[e].layer = lr.layer;
      rows[e].expert = static_cast<int64_t>(e);
    }
    for (const StepRecord& s : in.steps) {
      for (size_t e = 0; e < ne; ++e) {
        ExpertRow& x = rows[e];
        const int64_t t = s.tokens_per_expert[l][e];
        x.tokens += t;
        lr.tokens += t;
        if (t > 0) ++x.active_steps;
        if (!s.has_moe_layers) continue;
        const LayerStepCounters& c = s.moe_layers[l];
#define MOEZERO_ADD_Sum(name) x.name += c.name[e];
#define MOEZERO_ADD_Agreed(name)
#define MOEZERO_ADD(name, type, combine, source) MOEZERO_ADD_##combine(name)
        MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_ADD)
#undef MOEZERO_ADD
#undef MOEZERO_ADD_Agreed
#undef MOEZERO_ADD_Sum
        predicted_sum[e] += c.predicted[e];
      }
    }
    for (size_t e = 0; e < ne; ++e) {
      ExpertRow& x = rows[e];
      x.token_share =
          lr.tokens > 0 ? static_cast<double>(x.tokens) / static_cast<double>(lr.tokens) : 0.0;
      x.active_fraction = static_cast<double>(x.active_steps) / nsteps;
      if (first.has_moe_layers) x.predicted = predicted_sum[e] / nsteps;
    }
    r.layers.push_back(lr);
    r.experts.insert(r.experts.end(), rows.begin(), rows.end());
  }
}

// Brier cells, per-layer Brier scores and the calibration table (definitions in report.h).
void add_prediction_quality(Report& r, const RunInput& in) {
  const StepRecord& first = in.steps.front();
  r.has_prediction_quality = first.has_moe_layers && !first.moe_layers.empty() &&
                             first.moe_layers.front().prediction.has_value();
  if (!r.has_prediction_quality) return;
  const size_t nl = first.moe_layers.size();
  const size_t nb = first.moe_layers.front().prediction->calibration_count.size();
  std::vector<double> layer_sum(nl, 0.0);
  // (layers + 1, buckets): row 0 all layers, row l + 1 layer l
  std::vector<std::vector<CalibrationRow>> cal(nl + 1, std::vector<CalibrationRow>(nb));
  for (const StepRecord& s : in.steps)
    for (size_t l = 0; l < nl; ++l) {
      const PredictionCounts& p = *s.moe_layers[l].prediction;
      BrierCell c{s.step, s.moe_layers[l].layer, p.brier_count, std::nullopt};
      if (p.brier_count > 0) c.brier = p.brier_sum / static_cast<double>(p.brier_count);
      r.brier_cells.push_back(c);
      layer_sum[l] += p.brier_sum;
      r.layers[l].brier_pairs += p.brier_count;
      for (size_t b = 0; b < nb && b < p.calibration_count.size(); ++b)
        for (CalibrationRow* row : {&cal[0][b], &cal[l + 1][b]}) {
          row->pairs += p.calibration_count[b];
          row->active += p.calibration_active[b];
        }
    }
  for (size_t l = 0; l < nl; ++l)
    if (r.layers[l].brier_pairs > 0)
      r.layers[l].brier = layer_sum[l] / static_cast<double>(r.layers[l].brier_pairs);
  for (size_t k = 0; k <= nl; ++k)
    for (size_t b = 0; b < nb; ++b) {
      CalibrationRow& row = cal[k][b];
      row.layer = k == 0 ? -1 : first.moe_layers[k - 1].layer;
      row.bucket = static_cast<int64_t>(b);
      row.lo = static_cast<double>(b) / static_cast<double>(nb);
      row.hi = static_cast<double>(b + 1) / static_cast<double>(nb);
      row.mean_predicted = (row.lo + row.hi) / 2.0;
      if (row.pairs > 0)
        row.observed_rate = static_cast<double>(row.active) / static_cast<double>(row.pairs);
      r.calibration.push_back(row);
    }
}

void add_steps(Report& r, const RunInput& in) {
  double comm = 0.0, exposed = 0.0;
  bool any = false;
  for (const StepRecord& s : in.steps) {
    StepRow row;
    row.step = s.step;
    row.loss = s.loss;
    row.val_loss = s.val_loss;
    for (const RankStepCounters& rk : s.ranks) row.stall_ms += rk.stall_ms;
    r.total_stall_ms += row.stall_ms;
    row.comm_ms = s.comm_ms;
    row.exposed_comm_ms = s.exposed_comm_ms;
    if (s.comm_ms && s.exposed_comm_ms) {
      any = true;
      row.overlapped_ms = *s.comm_ms - *s.exposed_comm_ms;
      if (*s.comm_ms > 0) row.overlap_ratio = 1.0 - *s.exposed_comm_ms / *s.comm_ms;
      comm += *s.comm_ms;
      exposed += *s.exposed_comm_ms;
    }
    r.step_rows.push_back(row);
  }
  r.has_overlap = any;
  if (any) {
    r.total_comm_ms = comm;
    r.total_exposed_comm_ms = exposed;
    if (comm > 0) r.total_overlap_ratio = 1.0 - exposed / comm;
  }
}

void add_comms(Report& r, const RunInput& in) {
  struct Acc {
    CommRow row;
    double bus_bytes = 0.0;
    bool bus_ok = true;
  };
  std::map<std::tuple<std::string, std::string, int64_t>, Acc> acc;
  bool all_sized = !in.collectives.empty();
  for (const CollectiveSpan& c : in.collectives) {
    const auto [lo, hi] = size_bucket(c.bytes);
    Acc& a = acc[{c.op, group_kind(c.group), lo}];
    a.row.op = c.op;
    a.row.group = group_kind(c.group);
    a.row.bucket_lo_bytes = lo;
    a.row.bucket_hi_bytes = hi;
    a.row.count += 1;
    a.row.total_bytes += c.bytes;
    a.row.total_ms += c.dur_us / 1000.0;
    std::optional<double> f;
    if (c.group_size) f = busbw_factor(c.op, *c.group_size);
    if (!c.group_size) all_sized = false;
    if (f)
      a.bus_bytes += static_cast<double>(c.bytes) * *f;
    else
      a.bus_ok = false;
  }
  for (auto& [key, a] : acc) {
    CommRow row = a.row;
    row.avg_ms = row.total_ms / static_cast<double>(row.count);
    if (row.total_ms > 0) {
      row.algbw_gbps = static_cast<double>(row.total_bytes) / (row.total_ms * 1e6);
      if (a.bus_ok) row.busbw_gbps = a.bus_bytes / (row.total_ms * 1e6);
    }
    r.comms.push_back(row);
  }
  r.has_collectives = !in.collectives.empty();
  r.has_group_size = all_sized;
}

void add_ranks(Report& r, const RunInput& in) {
  const size_t nr = in.steps.front().ranks.size();
  for (size_t k = 0; k < nr; ++k) {
    RankRow row;
    row.rank = static_cast<int64_t>(k);
    for (const StepRecord& s : in.steps) {
      const RankStepCounters& c = s.ranks[k];
      row.absent = c.absent;  // the same in every record (run_input.h)
#define MOEZERO_SUM(name, unit, source) row.name += c.name;
      MOEZERO_RANK_STEP_COUNTERS(MOEZERO_SUM)
#undef MOEZERO_SUM
      row.peak_total_bytes = std::max(row.peak_total_bytes, c.peak_total_bytes);
      for (const auto& [tag, bytes] : c.peak_bytes) {
        auto it = std::find_if(row.peak_bytes.begin(), row.peak_bytes.end(),
                               [&t = tag](const auto& p) { return p.first == t; });
        if (it == row.peak_bytes.end())
          row.peak_bytes.emplace_back(tag, bytes);
        else
          it->second = std::max(it->second, bytes);
      }
    }
    r.rank_rows.push_back(std::move(row));
  }
}

}  // namespace

// The per-(step, layer) balance cells, when some step has them.
void add_balance(Report& r, const RunInput& in) {
  for (const StepRecord& s : in.steps)
    for (const LayerStepCounters& c : s.moe_layers)
      r.has_balance = r.has_balance || c.load_max_over_mean || c.load_cv;
  if (!r.has_balance) return;
  for (const StepRecord& s : in.steps)
    for (const LayerStepCounters& c : s.moe_layers)
      r.balance_cells.push_back(BalanceCell{s.step, c.layer, c.load_max_over_mean, c.load_cv});
}

Report compute_report(const RunInput& in) {
  MOEZERO_REQUIRE(!in.steps.empty(), in.path, ": no steps");
  Report r;
  r.source = in.path;
  r.kind = input_kind_name(in.kind);
  r.steps = static_cast<int64_t>(in.steps.size());
  r.ranks = static_cast<int64_t>(in.steps.front().ranks.size());
  r.first_step = in.steps.front().step;
  r.last_step = in.steps.back().step;
  r.has_expert_counters = in.steps.front().has_moe_layers;
  add_experts(r, in);
  add_prediction_quality(r, in);
  add_balance(r, in);
  add_steps(r, in);
  add_comms(r, in);
  add_ranks(r, in);
  return r;
}

// ---- JSON ---------------------------------------------------------------------------------
// One field list per struct, visited by a writer and by a reader, so the two cannot drift.

namespace {

using nlohmann::json;

template <typename V>
void fields(V& v, ExpertRow& x) {
  v("layer", x.layer), v("expert", x.expert), v("tokens", x.tokens);
#define MOEZERO_VISIT_Sum(name) v(#name, x.name);
#define MOEZERO_VISIT_Agreed(name)
#define MOEZERO_VISIT(name, type, combine, source) MOEZERO_VISIT_##combine(name)
  MOEZERO_EXPERT_STEP_COUNTERS(MOEZERO_VISIT)
#undef MOEZERO_VISIT
#undef MOEZERO_VISIT_Agreed
#undef MOEZERO_VISIT_Sum
  v("token_share", x.token_share), v("active_steps", x.active_steps);
  v("active_fraction", x.active_fraction), v("predicted", x.predicted);
}
template <typename V>
void fields(V& v, LayerRow& x) {
  v("layer", x.layer), v("experts", x.experts), v("tokens", x.tokens);
  v("brier_pairs", x.brier_pairs), v("brier", x.brier);
}
template <typename V>
void fields(V& v, BrierCell& x) {
  v("step", x.step), v("layer", x.layer), v("pairs", x.pairs), v("brier", x.brier);
}
template <typename V>
void fields(V& v, BalanceCell& x) {
  v("step", x.step), v("layer", x.layer), v("max_over_mean", x.max_over_mean), v("cv", x.cv);
}
template <typename V>
void fields(V& v, CalibrationRow& x) {
  v("layer", x.layer), v("bucket", x.bucket), v("lo", x.lo), v("hi", x.hi);
  v("mean_predicted", x.mean_predicted), v("pairs", x.pairs), v("active", x.active);
  v("observed_rate", x.observed_rate);
}
template <typename V>
void fields(V& v, StepRow& x) {
  v("step", x.step), v("loss", x.loss), v("val_loss", x.val_loss), v("stall_ms", x.stall_ms);
  v("comm_ms", x.comm_ms);
  v("exposed_comm_ms", x.exposed_comm_ms), v("overlapped_ms", x.overlapped_ms);
  v("overlap_ratio", x.overlap_ratio);
}
template <typename V>
void fields(V& v, CommRow& x) {
  v("op", x.op), v("group", x.group), v("bucket_lo_bytes", x.bucket_lo_bytes);
  v("bucket_hi_bytes", x.bucket_hi_bytes), v("count", x.count), v("total_bytes", x.total_bytes);
  v("total_ms", x.total_ms), v("avg_ms", x.avg_ms), v("algbw_gbps", x.algbw_gbps);
  v("busbw_gbps", x.busbw_gbps);
}
template <typename V>
void fields(V& v, RankRow& x) {
  v("rank", x.rank);
#define MOEZERO_VISIT(name, unit, source) v(#name, x.name);
  MOEZERO_RANK_STEP_COUNTERS(MOEZERO_VISIT)
#undef MOEZERO_VISIT
  v("peak_bytes", x.peak_bytes);
  v("peak_total_bytes", x.peak_total_bytes);
  v("absent", x.absent);
}
template <typename V>
void fields(V& v, Report& x) {
  v("source", x.source), v("kind", x.kind), v("steps", x.steps), v("ranks", x.ranks);
  v("first_step", x.first_step), v("last_step", x.last_step);
  v("has_expert_counters", x.has_expert_counters), v("has_overlap", x.has_overlap);
  v("has_collectives", x.has_collectives), v("has_group_size", x.has_group_size);
  v("has_prediction_quality", x.has_prediction_quality);
  v("layers", x.layers), v("experts", x.experts), v("step_rows", x.step_rows);
  v("brier_cells", x.brier_cells), v("calibration", x.calibration);
  v("balance_cells", x.balance_cells), v("has_balance", x.has_balance);
  v("total_stall_ms", x.total_stall_ms), v("total_comm_ms", x.total_comm_ms);
  v("total_exposed_comm_ms", x.total_exposed_comm_ms);
  v("total_overlap_ratio", x.total_overlap_ratio), v("comms", x.comms);
  v("rank_rows", x.rank_rows);
}

struct Writer {
  json& out;
  template <typename T>
  void operator()(const char* key, T& value) {
    out[key] = to_json_value(value);
  }
  template <typename T>
  static json to_json_value(T& v) {
    if constexpr (std::is_same_v<T, std::optional<double>>) {
      return v ? json(*v) : json(nullptr);
    } else if constexpr (std::is_same_v<T, std::vector<std::pair<std::string, int64_t>>>) {
      json a = json::array();
      for (auto& [k, b] : v) a.push_back(json::array({k, b}));
      return a;
    } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
                         std::is_same_v<T, bool> || std::is_same_v<T, std::string> ||
                         std::is_same_v<T, std::vector<std::string>>) {
      return json(v);
    } else {  // vector of rows
      json a = json::array();
      for (auto& row : v) {
        json o = json::object();
        Writer w{o};
        fields(w, row);
        a.push_back(std::move(o));
      }
      return a;
    }
  }
};

struct Reader {
  const json& in;
  std::string where;  // "FILE: experts[3]"
  template <typename T>
  void operator()(const char* key, T& value) {
    const std::string at = where + "." + key;
    auto it = in.find(key);
    if (it == in.end()) MOEZERO_THROW(at, ": missing field");
    read(*it, value, at);
  }
  template <typename T>
  static void read(const json& j, T& v, const std::string& at) {
    try {
      if constexpr (std::is_same_v<T, std::optional<double>>) {
        if (j.is_null())
          v.reset();
        else
          v = j.get<double>();
      } else if constexpr (std::is_same_v<T, std::vector<std::pair<std::string, int64_t>>>) {
        if (!j.is_array()) MOEZERO_THROW(at, ": expected an array of [tag, bytes]");
        v.clear();
        for (const json& p : j) v.emplace_back(p.at(0).get<std::string>(), p.at(1).get<int64_t>());
      } else if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double> ||
                           std::is_same_v<T, bool> || std::is_same_v<T, std::string> ||
                           std::is_same_v<T, std::vector<std::string>>) {
        v = j.get<T>();
      } else {
        if (!j.is_array()) MOEZERO_THROW(at, ": expected an array");
        v.clear();
        for (size_t i = 0; i < j.size(); ++i) {
          typename T::value_type row;
          if (!j[i].is_object()) MOEZERO_THROW(at, "[", i, "]: expected an object");
          Reader r{j[i], at + "[" + std::to_string(i) + "]"};
          fields(r, row);
          v.push_back(std::move(row));
        }
      }
    } catch (const json::exception& e) {
      MOEZERO_THROW(at, ": ", e.what());
    }
  }
};

}  // namespace

std::string report_to_json(const Report& r) {
  json out = json::object();
  Writer w{out};
  fields(w, const_cast<Report&>(r));  // the writer only reads
  out["format"] = "moezero.report/2";
  return out.dump(1);
}

Report report_from_json(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    MOEZERO_THROW(where, ": bad JSON: ", e.what());
  }
  if (!j.is_object()) MOEZERO_THROW(where, ": expected a JSON object");
  if (j.value("format", std::string()) != "moezero.report/2")
    MOEZERO_THROW(where, ": format: expected \"moezero.report/2\"");
  Report r;
  Reader rd{j, where + ": report"};
  fields(rd, r);
  return r;
}

}  // namespace moezero::report
