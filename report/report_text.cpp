// report/report_text.cpp — the plain-text form of the report (stdout of `moezero report`).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "report/html_format.h"
#include "report/report_render.h"

namespace moezero::report {

std::string format_bytes(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%.0f B", v);
  else
    std::snprintf(buf, sizeof buf,
                  std::fabs(v) < 10    ? "%.2f %s"
                  : std::fabs(v) < 100 ? "%.1f %s"
                                       : "%.0f %s",
                  v, kUnits[u]);
  return buf;
}

namespace {

using html::fmt;  // printf-formatting of one double, and "n/a" for an absent one (html_format.h)
using html::opt;
std::string num(int64_t v) { return std::to_string(v); }  // no thousands separators in text

// A table printed with right-aligned columns (the first left-aligned).
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& os) const {
    std::vector<size_t> w(rows_[0].size(), 0);
    for (const auto& r : rows_)
      for (size_t c = 0; c < r.size() && c < w.size(); ++c) w[c] = std::max(w[c], r[c].size());
    for (size_t i = 0; i < rows_.size(); ++i) {
      std::string line;
      for (size_t c = 0; c < w.size(); ++c) {
        const std::string& cell = c < rows_[i].size() ? rows_[i][c] : std::string();
        const std::string pad(w[c] - cell.size(), ' ');
        line += c == 0 ? cell + pad : "  " + pad + cell;
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      os << line << "\n";
      if (i == 0) {
        size_t total = 0;
        for (size_t c = 0; c < w.size(); ++c) total += w[c] + (c ? 2 : 0);
        os << std::string(total, '-') << "\n";
      }
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

void section(std::ostream& os, const std::string& title) { os << "\n== " << title << " ==\n"; }

void write_title(std::ostream& os, const Report& r) {
  os << "moezero report: " << r.source << " (" << r.kind << ", " << r.steps << " steps "
     << r.first_step << "-" << r.last_step << ", " << r.ranks << " ranks, " << r.layers.size()
     << " MoE layers)\n";
}

void write_experts(std::ostream& os, const Report& r) {
  section(os,
          "Experts: sums over the steps; share = of the layer's routed tokens, active = "
          "fraction of steps");
  if (!r.has_expert_counters)
    os << "(this file has no per-expert counters (moe_layers): only tokens, share and active "
          "are known)\n";
  Table t({"layer", "expert", "tokens", "share", "active", "mean P", "gathers", "gathered",
           "gather ms", "cache hit", "cache miss", "pf hit", "pf miss", "pf waste", "a2a in",
           "a2a out"});
  for (const ExpertRow& x : r.experts) {
    const bool c = r.has_expert_counters;
    auto n = [&](int64_t v) { return c ? num(v) : std::string("n/a"); };
    t.add({num(x.layer), num(x.expert), num(x.tokens), fmt("%.4f", x.token_share),
           fmt("%.3f", x.active_fraction), opt(x.predicted, "%.3f"), n(x.gathers),
           c ? format_bytes(static_cast<double>(x.gathered_bytes)) : "n/a",
           c ? fmt("%.3f", x.gather_ms) : "n/a", n(x.cache_hits), n(x.cache_misses),
           n(x.prefetch_hits), n(x.prefetch_misses),
           c ? format_bytes(static_cast<double>(x.wasted_bytes)) : "n/a", n(x.a2a_tokens_in),
           n(x.a2a_tokens_out)});
  }
  t.print(os);
}

std::string bucket_range(const CalibrationRow& c, size_t buckets) {
  return fmt("%.1f", c.lo) + (size_t(c.bucket) + 1 == buckets ? " - " : " - <") + fmt("%.1f", c.hi);
}

void write_prediction_quality(std::ostream& os, const Report& r) {
  section(os,
          "Prediction quality: plans before routing, p vs active (Brier = mean (p - y)^2, 0 is "
          "perfect)");
  if (!r.has_prediction_quality) {
    os << "(this file has no brier_sum / calibration counts: recorded by newer trainers)\n";
    return;
  }
  Table lt({"layer", "experts", "pairs", "brier"});
  for (const LayerRow& l : r.layers)
    lt.add({num(l.layer), num(l.experts), num(l.brier_pairs), opt(l.brier, "%.4f")});
  lt.print(os);
  os << "\nBrier per step (rows) and layer (columns); n/a: no plan before routing\n";
  std::vector<std::string> head = {"step"};
  for (const LayerRow& l : r.layers) head.push_back("L" + num(l.layer));
  Table bt(head);
  const size_t nl = r.layers.size();
  for (size_t i = 0; i + nl <= r.brier_cells.size(); i += nl) {
    std::vector<std::string> row = {num(r.brier_cells[i].step)};
    for (size_t l = 0; l < nl; ++l) row.push_back(opt(r.brier_cells[i + l].brier, "%.4f"));
    bt.add(row);
  }
  bt.print(os);
  os << "\nCalibration, all layers (mean p: bucket centre; well calibrated: observed near it)\n";
  size_t buckets = 0;
  for (const CalibrationRow& c : r.calibration) buckets += c.layer == -1;
  Table ct({"p bucket", "pairs", "mean p", "observed"});
  for (const CalibrationRow& c : r.calibration)
    if (c.layer == -1)
      ct.add({bucket_range(c, buckets), num(c.pairs), fmt("%.2f", c.mean_predicted),
              opt(c.observed_rate, "%.3f")});
  ct.print(os);
}

void write_steps(std::ostream& os, const Report& r) {
  section(os, "Steps: communication and overlap (ms summed over ranks)");
  if (!r.has_overlap)
    os << "(this file has no comm_ms / exposed_comm_ms: only stall time is known)\n";
  Table st({"step", "loss", "val loss", "comm ms", "exposed ms", "overlapped ms", "overlap",
            "stall ms"});
  for (const StepRow& s : r.step_rows)
    st.add({num(s.step), opt(s.loss, "%.4f"), opt(s.val_loss, "%.4f"), opt(s.comm_ms, "%.3f"),
            opt(s.exposed_comm_ms, "%.3f"), opt(s.overlapped_ms, "%.3f"),
            opt(s.overlap_ratio, "%.3f"), fmt("%.3f", s.stall_ms)});
  st.add({"total", "", "", opt(r.total_comm_ms, "%.3f"), opt(r.total_exposed_comm_ms, "%.3f"),
          r.total_comm_ms ? fmt("%.3f", *r.total_comm_ms - *r.total_exposed_comm_ms) : "n/a",
          opt(r.total_overlap_ratio, "%.3f"), fmt("%.3f", r.total_stall_ms)});
  st.print(os);
}

void write_comms(std::ostream& os, const Report& r) {
  section(os, "Comms summary (collective spans of the trace)");
  if (!r.has_collectives) {
    os << (r.kind == "trace" ? "(the trace has no collective spans)\n"
                             : "(latencies and bandwidths need a trace: run with profile.trace "
                               "or `moezero train --trace FILE`, then report the trace)\n");
  } else {
    if (!r.has_group_size)
      os << "(some collective spans lack args.group_size: busbw n/a for their rows)\n";
    Table ct(
        {"op", "group", "message size", "count", "total ms", "avg ms", "algbw GB/s", "busbw GB/s"});
    for (const CommRow& c : r.comms)
      ct.add({c.op, c.group,
              c.bucket_lo_bytes == 0
                  ? std::string("0 B")
                  : format_bytes(static_cast<double>(c.bucket_lo_bytes)) + " - " +
                        format_bytes(static_cast<double>(c.bucket_hi_bytes)),
              num(c.count), fmt("%.3f", c.total_ms), fmt("%.4f", c.avg_ms),
              opt(c.algbw_gbps, "%.3f"), opt(c.busbw_gbps, "%.3f")});
    ct.print(os);
  }
}

void write_rank_bytes(std::ostream& os, const Report& r) {
  section(os, "Bytes moved per rank (sums over the steps)");
  Table bt({"rank", "gathered", "wire", "dense", "expert", "reduce-scattered", "reduce wire",
            "all-reduced", "a2a", "pf hit", "pf miss", "pf waste", "cache hit", "cache miss",
            "evict", "stall ms"});
  for (const RankRow& k : r.rank_rows)
    bt.add({num(k.rank), format_bytes(double(k.gathered_bytes)),
            k.has("gathered_wire_bytes") ? format_bytes(double(k.gathered_wire_bytes)) : "n/a",
            format_bytes(double(k.gathered_dense_bytes)),
            format_bytes(double(k.gathered_expert_bytes)),
            format_bytes(double(k.reduce_scattered_bytes)),
            k.has("reduce_wire_bytes") ? format_bytes(double(k.reduce_wire_bytes)) : "n/a",
            format_bytes(double(k.all_reduced_bytes)), format_bytes(double(k.a2a_bytes)),
            num(k.prefetch_hits), num(k.prefetch_misses),
            k.has("wasted_bytes") ? format_bytes(double(k.wasted_bytes)) : "n/a", num(k.cache_hits),
            num(k.cache_misses), num(k.cache_evictions), fmt("%.3f", k.stall_ms)});
  bt.print(os);
}

void write_memory(std::ostream& os, const Report& r) {
  section(os, "Peak memory per rank by tag (max over the steps)");
  std::vector<std::string> head = {"rank"};
  if (!r.rank_rows.empty())
    for (const auto& [tag, b] : r.rank_rows[0].peak_bytes) head.push_back(tag);
  head.push_back("peak total");
  Table mt(head);
  for (const RankRow& k : r.rank_rows) {
    std::vector<std::string> row = {num(k.rank)};
    for (size_t i = 1; i + 1 < head.size(); ++i) {
      auto it = std::find_if(k.peak_bytes.begin(), k.peak_bytes.end(),
                             [&](const auto& p) { return p.first == head[i]; });
      row.push_back(it == k.peak_bytes.end() ? "-" : format_bytes(double(it->second)));
    }
    row.push_back(format_bytes(double(k.peak_total_bytes)));
    mt.add(row);
  }
  mt.print(os);
}

}  // namespace

void write_text(std::ostream& os, const Report& r) {
  write_title(os, r);
  if (!r.layers.empty()) {
    write_experts(os, r);
    write_prediction_quality(os, r);
  }
  write_steps(os, r);
  write_comms(os, r);
  write_rank_bytes(os, r);
  write_memory(os, r);
}

}  // namespace moezero::report
