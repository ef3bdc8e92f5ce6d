// report/report_html.cpp — the HTML form of the report: one page, inline CSS and SVG only (no
// script, no network, no external font), readable when printed or opened from a file.
// The sections of the page; the charts are in report_charts.cpp, the heatmap, colours and
// style sheet in html_parts.cpp, the text helpers in html_format.cpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#include "report/html_format.h"
#include "report/html_parts.h"
#include "report/report_charts.h"
#include "report/report_render.h"

namespace moezero::report {

using html::esc;
using html::fmt;
using html::nice_ceil;
using html::num;
using html::opt;
using html::px;
using html::td;
using html::th_row;

namespace {

std::string placeholder(const std::string& title, const std::string& why) {
  return "<div class=\"hm\"><h3>" + esc(title) + "</h3><div class=\"empty\">" + esc(why) +
         "</div></div>\n";
}

std::string card(const std::string& k, const std::string& v, const std::string& s) {
  return "<div class=\"card\"><div class=\"k\">" + esc(k) + "</div><div class=\"v\">" + v +
         "</div><div class=\"s\">" + s + "</div></div>";
}

// The document head and the page header: source, kind, step range, ranks, layers.
void write_head(std::ostream& o, const Report& r) {
  o << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
    << "<title>moezero report: " << esc(r.source) << "</title><style>" << report_css()
    << "</style></head><body>\n";
  o << "<header><h1>moezero report</h1><div class=\"meta\">" << esc(r.source) << " &middot; "
    << r.kind << " &middot; steps " << r.first_step << "&ndash;" << r.last_step << " (" << r.steps
    << ") &middot; " << r.ranks << " ranks &middot; " << r.layers.size()
    << " MoE layers</div></header>\n<main>\n";
}

// Summary cards: tokens, expert bytes, overlap, stall, peak memory.
void write_summary_cards(std::ostream& o, const Report& r) {
  int64_t tokens = 0, gathered = 0, expert_gathers = 0;
  for (const ExpertRow& x : r.experts) {
    tokens += x.tokens;
    gathered += x.gathered_bytes;
    expert_gathers += x.gathers;
  }
  int64_t peak = 0;
  for (const RankRow& k : r.rank_rows) {
    peak = std::max(peak, k.peak_total_bytes);
  }
  o << "<div class=\"cards\">"
    << card("Tokens routed", num(tokens), "expert assignments, all MoE layers")
    << card("Expert bytes gathered", r.has_expert_counters ? format_bytes(double(gathered)) : "n/a",
            r.has_expert_counters ? num(expert_gathers) + " gathers" : "needs per-expert counters")
    << card("Overlap ratio", opt(r.total_overlap_ratio, "%.3f"),
            r.has_overlap ? "1 &minus; exposed / comm, whole file" : "needs comm_ms in the file")
    << card("Stall", fmt("%.1f ms", r.total_stall_ms), "compute waiting, all ranks")
    << card("Peak memory", format_bytes(double(peak)), "max over ranks and steps") << "</div>\n";
}

// The prediction quality tables: Brier score per layer, calibration over all layers.
void write_prediction_tables(std::ostream& o, const Report& r) {
  o << "<div class=\"grid2\"><div><h3 style=\"margin-top:12px\">Brier score per layer</h3>"
       "<table id=\"brier-table\">"
    << th_row({"layer", "experts", "pairs", "Brier score"});
  for (const LayerRow& l : r.layers)
    o << "<tr>" << td("L" + std::to_string(l.layer)) << td(num(l.experts)) << td(num(l.brier_pairs))
      << td(opt(l.brier, "%.4f")) << "</tr>";
  o << "</table></div><div><h3 style=\"margin-top:12px\">Calibration, all layers</h3>"
       "<table id=\"calibration-table\">"
    << th_row({"p bucket", "pairs", "mean p", "observed rate"});
  for (const CalibrationRow& c : r.calibration) {
    if (c.layer != -1) continue;
    const bool last = c.hi >= 1.0;
    const std::string range =
        fmt("%.1f", c.lo) + (last ? " &ndash; " : " &ndash; &lt;") + fmt("%.1f", c.hi);
    const double gap = c.observed_rate ? *c.observed_rate - c.mean_predicted : 0.0;
    o << "<tr>" << td(range) << td(num(c.pairs)) << td(fmt("%.2f", c.mean_predicted))
      << td(opt(c.observed_rate, "%.3f"), gap < -0.1  ? "neg"
                                          : gap > 0.1 ? "pos"
                                                      : "")
      << "</tr>";
  }
  o << "</table><p class=\"note\">mean p is the bucket centre; well calibrated: observed rate "
       "near it (red: more often active than predicted, blue: less).</p></div></div>";
}

// Brier heatmap: MoE layers x steps (NaN where no plan before routing covered the step).
Heatmap brier_heatmap(const Report& r) {
  Heatmap h;
  h.id = "heatmap-brier";
  h.title = "Brier score per layer and step";
  h.col_name = "step";
  h.value_fmt = "%.3f";
  h.caption = "mean (p \xe2\x88\x92 active)\xc2\xb2; 0 perfect, 0.25 = always p 0.5";
  const size_t nl = r.layers.size(), ns = nl ? r.brier_cells.size() / nl : 0;
  double max_b = 0;
  for (size_t l = 0; l < nl; ++l) {
    h.rows.push_back("L" + std::to_string(r.layers[l].layer));
    h.values.emplace_back(ns, std::nan(""));
  }
  for (size_t s = 0; s < ns; ++s) {
    h.cols.push_back(std::to_string(r.brier_cells[s * nl].step));
    for (size_t l = 0; l < nl; ++l) {
      const BrierCell& c = r.brier_cells[s * nl + l];
      if (!c.brier) continue;
      h.values[l][s] = *c.brier;
      max_b = std::max(max_b, *c.brier);
    }
  }
  h.hi = nice_ceil(std::max(max_b, 0.05));
  return h;
}

// Balance heatmap: MoE layers x steps of max/mean (cv = false) or CV of the tokens per expert.
Heatmap balance_heatmap(const Report& r, bool cv) {
  Heatmap h;
  h.id = cv ? "heatmap-balance-cv" : "heatmap-balance-max";
  h.title = cv ? "Load CV per layer and step" : "Load max / mean per layer and step";
  h.col_name = "step";
  h.value_fmt = "%.3f";
  h.caption = cv ? "std / mean of tokens per expert; 0 = balanced"
                 : "max / mean of tokens per expert; 1 = balanced";
  const size_t nl = r.layers.size(), ns = nl ? r.balance_cells.size() / nl : 0;
  double lo = cv ? 0.0 : 1.0, hi = lo;
  for (size_t l = 0; l < nl; ++l) {
    h.rows.push_back("L" + std::to_string(r.layers[l].layer));
    h.values.emplace_back(ns, std::nan(""));
  }
  for (size_t s = 0; s < ns; ++s) {
    h.cols.push_back(std::to_string(r.balance_cells[s * nl].step));
    for (size_t l = 0; l < nl; ++l) {
      const BalanceCell& c = r.balance_cells[s * nl + l];
      const std::optional<double>& v = cv ? c.cv : c.max_over_mean;
      if (!v) continue;
      h.values[l][s] = *v;
      hi = std::max(hi, *v);
    }
  }
  h.lo = lo;
  h.hi = lo + nice_ceil(std::max(hi - lo, 0.05));
  return h;
}

// Expert activity heatmaps (layers x experts), then the prediction quality of the plans made
// before routing: Brier heatmap (layers x steps) and tables.
void write_expert_activity(std::ostream& o, const Report& r) {
  Heatmap share, active;
  double max_share = 0;
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const std::string label = "L" + std::to_string(r.layers[l].layer);
    std::vector<double> s, a;
    for (size_t x = 0; x < size_t(r.layers[l].experts); ++x) {
      const ExpertRow& row = r.expert(l, x);
      s.push_back(row.token_share);
      a.push_back(row.active_fraction);
      max_share = std::max(max_share, row.token_share);
    }
    for (Heatmap* h : {&share, &active}) h->rows.push_back(label);
    share.values.push_back(s);
    active.values.push_back(a);
  }
  share.id = "heatmap-share";
  share.title = "Token share";
  share.hi = nice_ceil(max_share);
  share.caption = "share of the layer's routed tokens";
  active.id = "heatmap-active";
  active.title = "Observed: fraction of steps active";
  active.caption = "steps with tokens > 0 / steps";
  o << "<section><h2>Expert activity (layers &times; experts)</h2><p class=\"note\">Rows are "
       "MoE layers (model layer index), columns experts. Token share sums to 1 over a layer's "
       "experts (uniform routing: 1/E = "
    << fmt("%.3f", 1.0 / double(std::max<int64_t>(r.layers[0].experts, 1)))
    << "). Hover a cell for its value.</p>\n<div class=\"grid2\">\n";
  o << heatmap_panel(share, "tokens[l][e] / &sum;<sub>e</sub> tokens[l][e], summed over the steps");
  o << heatmap_panel(active, "fraction of the steps in which the expert received tokens");
  o << "</div></section>\n";
  if (r.has_balance) {
    o << "<section><h2>Load balance per layer over steps</h2><p class=\"note\">Rows are MoE "
         "layers, columns steps: the metrics' load_max_over_mean and load_cv (tokens per expert "
         "in the step, after capacity); grey: the step routed no token to the layer.</p>\n"
         "<div class=\"grid2\">\n";
    o << heatmap_panel(balance_heatmap(r, false),
                       "max<sub>e</sub> tokens / mean<sub>e</sub> tokens");
    o << heatmap_panel(balance_heatmap(r, true),
                       "std<sub>e</sub> tokens / mean<sub>e</sub> tokens");
    o << "</div></section>\n";
  }
  o << "<section><h2>Prediction quality (plans before routing)</h2>";
  if (!r.has_prediction_quality) {
    o << placeholder("Brier score per layer and step",
                     "This file has no brier_sum / calibration counts (moe_layers): they are "
                     "recorded by newer trainers.")
      << "</section>\n";
    return;
  }
  o << "<p class=\"note\">For every micro-batch that had a plan before routing, each expert's "
       "probability p the plan used against whether it turned out active (y). Brier score = "
       "mean (p &minus; y)<sup>2</sup>; grey: no plan before routing in that step.</p>\n";
  o << "<div class=\"hm\">" << heatmap_svg(brier_heatmap(r)) << "</div>\n";
  write_prediction_tables(o, r);
  o << "</section>\n";
}

void write_losses(std::ostream& o, const Report& r) {
  const std::string chart = r.step_rows.empty() ? "" : loss_chart(r);
  if (chart.empty()) return;
  o << "<section><h2>Loss</h2><div class=\"legend\"><span class=\"sw\" "
       "style=\"background:#4393c3\"></span>training loss<span class=\"sw\" "
       "style=\"background:#d6604d\"></span>validation loss (train.eval_every)</div>"
    << chart << "</section>\n";
}

// Communication per step: chart and table.
void write_steps_html(std::ostream& o, const Report& r) {
  o << "<section><h2>Communication per step</h2><p class=\"note\">"
    << (r.has_overlap
            ? "Time in collectives summed over ranks: <b>exposed</b> (compute waited for it) "
              "and <b>overlapped</b> (hidden behind compute) = comm &minus; exposed. The line is "
              "the overlap ratio 1 &minus; exposed / comm (right axis)."
            : "This file has no comm_ms / exposed_comm_ms: the bars show the compute stream's "
              "stall time summed over ranks.")
    << "</p>";
  if (r.has_overlap)
    o << "<div class=\"legend\"><span class=\"sw\" style=\"background:#d6604d\"></span>exposed"
      << "<span class=\"sw\" style=\"background:#4393c3\"></span>overlapped"
      << "<span class=\"sw\" style=\"background:#1d2733;height:2px;vertical-align:3px\"></span>"
         "overlap ratio</div>";
  o << steps_chart(r);
  o << "<div class=\"scroll\" style=\"max-height:300px;margin-top:8px\"><table>"
    << th_row({"step", "loss", "val loss", "comm ms", "exposed ms", "overlapped ms",
               "overlap ratio", "stall ms"});
  for (const StepRow& s : r.step_rows)
    o << "<tr>" << td(std::to_string(s.step)) << td(opt(s.loss, "%.4f"))
      << td(opt(s.val_loss, "%.4f")) << td(opt(s.comm_ms, "%.3f"))
      << td(opt(s.exposed_comm_ms, "%.3f")) << td(opt(s.overlapped_ms, "%.3f"))
      << td(opt(s.overlap_ratio, "%.3f")) << td(fmt("%.3f", s.stall_ms)) << "</tr>";
  o << "<tr class=\"total\">" << td("all") << td("") << td("") << td(opt(r.total_comm_ms, "%.3f"))
    << td(opt(r.total_exposed_comm_ms, "%.3f"))
    << td(r.total_comm_ms ? fmt("%.3f", *r.total_comm_ms - *r.total_exposed_comm_ms) : "n/a")
    << td(opt(r.total_overlap_ratio, "%.3f")) << td(fmt("%.3f", r.total_stall_ms))
    << "</tr></table></div></section>\n";
}

// Per layer and expert: the counters table.
void write_expert_table(std::ostream& o, const Report& r) {
  o << "<section><h2>Per layer and expert</h2><p class=\"note\">Sums over the " << r.steps
    << " steps and all ranks. pf = prefetch; waste = bytes prefetched but never used; a2a "
       "in/out = tokens the expert's owner received from / sent to other ranks."
    << (r.has_expert_counters ? "" : " This file has no per-expert counters: n/a.")
    << "</p><div class=\"scroll\"><table class=\"wide\">"
    << th_row({"layer", "expert", "tokens", "share", "active", "mean p", "gathers", "gathered",
               "gather ms", "cache hit", "cache miss", "pf hit", "pf miss", "pf waste", "a2a in",
               "a2a out"});
  const bool c = r.has_expert_counters;
  auto n = [&](int64_t v) { return c ? num(v) : std::string("n/a"); };
  for (const ExpertRow& x : r.experts) {
    o << "<tr>" << td("L" + std::to_string(x.layer)) << td(std::to_string(x.expert))
      << td(num(x.tokens)) << td(fmt("%.4f", x.token_share)) << td(fmt("%.3f", x.active_fraction))
      << td(opt(x.predicted, "%.3f")) << td(n(x.gathers))
      << td(c ? format_bytes(double(x.gathered_bytes)) : "n/a")
      << td(c ? fmt("%.3f", x.gather_ms) : "n/a") << td(n(x.cache_hits)) << td(n(x.cache_misses))
      << td(n(x.prefetch_hits)) << td(n(x.prefetch_misses))
      << td(c ? format_bytes(double(x.wasted_bytes)) : "n/a") << td(n(x.a2a_tokens_in))
      << td(n(x.a2a_tokens_out)) << "</tr>";
  }
  o << "</table></div></section>\n";
}

// Comms summary: collective spans by op/group/size, then bytes and counters per rank.
void write_comms_html(std::ostream& o, const Report& r) {
  o << "<section><h2>Comms summary</h2>";
  if (r.has_collectives) {
    o << "<p class=\"note\">Collective spans of the trace grouped by op, group kind and message "
         "size (powers of two). algbw = bytes / time; busbw = algbw &times; the nccl-tests "
         "factor of the op on n ranks ((n&minus;1)/n for all_gather, reduce_scatter, "
         "all_to_all; 2(n&minus;1)/n for all_reduce; 1 for broadcast). GB/s = 10<sup>9</sup> "
         "B/s."
      << (r.has_group_size ? "" : " Some spans lack args.group_size: busbw n/a for their rows.")
      << "</p><div class=\"scroll\"><table>"
      << th_row({"op", "group", "message size", "count", "total ms", "avg ms", "algbw GB/s",
                 "busbw GB/s"});
    for (const CommRow& c : r.comms)
      o << "<tr>" << td(esc(c.op)) << td(esc(c.group))
        << td(c.bucket_lo_bytes == 0 ? std::string("0 B")
                                     : format_bytes(double(c.bucket_lo_bytes)) + " &ndash; " +
                                           format_bytes(double(c.bucket_hi_bytes)))
        << td(num(c.count)) << td(fmt("%.3f", c.total_ms)) << td(fmt("%.4f", c.avg_ms))
        << td(opt(c.algbw_gbps, "%.3f")) << td(opt(c.busbw_gbps, "%.3f")) << "</tr>";
    o << "</table></div>";
  } else {
    o << "<p class=\"note\">"
      << (r.kind == "trace" ? "The trace has no collective spans."
                            : "Latencies and bandwidths need a trace: run with "
                              "<code>profile.trace</code> (or <code>moezero train --trace "
                              "FILE</code>) and report the trace. Byte counters per rank:")
      << "</p>";
  }
  o << "<h3 style=\"margin-top:10px\">Bytes and counters per rank</h3><p class=\"note\">Sums "
       "over the steps.</p><div class=\"scroll\"><table>"
    << th_row({"rank", "gathered", "wire", "dense", "expert", "reduce-scattered", "reduce wire",
               "all-reduced", "a2a", "pf hit", "pf miss", "pf waste", "cache hit", "cache miss",
               "evictions", "stall ms"});
  for (const RankRow& k : r.rank_rows)
    o << "<tr>" << td(std::to_string(k.rank)) << td(format_bytes(double(k.gathered_bytes)))
      << td(k.has("gathered_wire_bytes") ? format_bytes(double(k.gathered_wire_bytes)) : "n/a")
      << td(format_bytes(double(k.gathered_dense_bytes)))
      << td(format_bytes(double(k.gathered_expert_bytes)))
      << td(format_bytes(double(k.reduce_scattered_bytes)))
      << td(k.has("reduce_wire_bytes") ? format_bytes(double(k.reduce_wire_bytes)) : "n/a")
      << td(format_bytes(double(k.all_reduced_bytes))) << td(format_bytes(double(k.a2a_bytes)))
      << td(num(k.prefetch_hits)) << td(num(k.prefetch_misses))
      << td(k.has("wasted_bytes") ? format_bytes(double(k.wasted_bytes)) : "n/a")
      << td(num(k.cache_hits)) << td(num(k.cache_misses)) << td(num(k.cache_evictions))
      << td(fmt("%.3f", k.stall_ms)) << "</tr>";
  o << "</table></div></section>\n";
}

// Peak memory per rank: chart and table by tag.
void write_memory_html(std::ostream& o, const Report& r) {
  o << "<section><h2>Peak memory per rank</h2><p class=\"note\">Each tag's own peak over the "
       "steps (tags need not peak at the same moment, so the stack can exceed the marked peak "
       "total).</p>"
    << memory_chart(r) << "<div class=\"scroll\"><table>";
  std::vector<std::string> head = {"rank"};
  if (!r.rank_rows.empty())
    for (const auto& [t, b] : r.rank_rows[0].peak_bytes) head.push_back(esc(t));
  head.push_back("peak total");
  o << th_row(head);
  for (const RankRow& k : r.rank_rows) {
    o << "<tr>" << td(std::to_string(k.rank));
    for (size_t i = 1; i + 1 < head.size(); ++i) {
      auto it = std::find_if(k.peak_bytes.begin(), k.peak_bytes.end(),
                             [&](const auto& p) { return esc(p.first) == head[i]; });
      o << td(it == k.peak_bytes.end() ? "&ndash;" : format_bytes(double(it->second)));
    }
    o << td(format_bytes(double(k.peak_total_bytes))) << "</tr>";
  }
  o << "</table></div></section>\n";
}

}  // namespace

std::string render_html(const Report& r) {
  std::ostringstream o;
  write_head(o, r);
  write_summary_cards(o, r);
  if (!r.layers.empty()) write_expert_activity(o, r);
  write_losses(o, r);
  write_steps_html(o, r);
  if (!r.experts.empty()) write_expert_table(o, r);
  write_comms_html(o, r);
  write_memory_html(o, r);
  o << "</main></body></html>\n";
  return o.str();
}

}  // namespace moezero::report