// tools/bench_report.cpp — how `moezero bench` (and `moezero plan`) print their rows: the table
// on stdout, the frontier table, and the JSON of --json (tools/bench.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/allocator.h"
#include "core/error.h"
#include "core/output_file.h"
#include "tools/bench.h"

namespace moezero::bench {

namespace {

nlohmann::ordered_json value_json(const Value& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

// Adds {field + suffix: value or null} to `row` for every row_fields() entry; derived ones
// (utilisation and spread: computed over rows and repeats) only when `suffix` is empty.
void add_fields(nlohmann::ordered_json& row, const std::vector<Value>& values,
                const std::string& suffix) {
  for (size_t f = 0; f < values.size(); ++f) {
    const std::string& name = row_fields()[f];
    if (!suffix.empty() && (name == "utilisation" || name == "spread")) continue;
    row[name + suffix] = value_json(values[f]);
  }
}

// Prints `lines` as columns, each as wide as its widest cell; the first left-aligned.
void print_columns(const std::vector<std::vector<std::string>>& lines) {
  std::vector<size_t> width(lines.at(0).size(), 0);
  for (const auto& l : lines)
    for (size_t c = 0; c < l.size(); ++c) width[c] = std::max(width[c], l[c].size());
  for (const auto& l : lines) {
    std::string out;
    for (size_t c = 0; c < l.size(); ++c) {
      std::string pad(width[c] - l[c].size(), ' ');
      out += c == 0 ? l[c] + pad : "  " + pad + l[c];
    }
    std::printf("%s\n", out.c_str());
  }
}

}  // namespace

// A cell of the table: "-" when the counter is absent; bytes in binary units.
std::string cell(const std::string& field, const Value& v) {
  if (!v) return "-";
  char buf[64];
  if (field.find("bytes") != std::string::npos)
    return format_bytes(static_cast<uint64_t>(std::llround(*v)));
  if (field == "utilisation" || field == "spread" || field == "active_fraction")
    std::snprintf(buf, sizeof buf, "%.3f", *v);
  else if (field.find("_ms") != std::string::npos)
    std::snprintf(buf, sizeof buf, "%.1f", *v);
  else
    std::snprintf(buf, sizeof buf, "%.0f", *v);
  return buf;
}

// The table: one line per strategy, columns in row_fields() order; with RepeatRange::Show,
// tokens/s is followed by the smallest and largest repeat's value (Row::min, Row::max).
void print_table(const std::vector<Row>& rows, RepeatRange range) {
  const auto& fields = row_fields();
  const bool show = range == RepeatRange::Show;
  std::vector<std::vector<std::string>> lines{{"strategy"}};
  for (const std::string& f : fields) {
    lines[0].push_back(f);
    if (show && f == "tokens_per_s") {
      lines[0].push_back("min");
      lines[0].push_back("max");
    }
  }
  for (const Row& r : rows) {
    std::vector<std::string> l{r.strategy};
    for (size_t f = 0; f < fields.size(); ++f) {
      l.push_back(cell(fields[f], r.values[f]));
      if (show && fields[f] == "tokens_per_s") {
        l.push_back(cell(fields[f], f < r.min.size() ? r.min[f] : Value{}));
        l.push_back(cell(fields[f], f < r.max.size() ? r.max[f] : Value{}));
      }
    }
    lines.push_back(std::move(l));
  }
  print_columns(lines);
}

void print_frontier(const std::vector<FrontierEntry>& entries) {
  std::vector<std::vector<std::string>> lines{{"incumbent", "tokens_per_s", "peak_state_bytes",
                                               "fastest moezero at <= peak", "tokens_per_s",
                                               "peak_state_bytes", "ratio", "ceiling"}};
  for (const FrontierEntry& e : entries) {
    char ratio[32] = "-", ceiling[32] = "-";
    if (e.ratio) std::snprintf(ratio, sizeof ratio, "%.3f", *e.ratio);
    if (e.ceiling) std::snprintf(ceiling, sizeof ceiling, "%.3f", *e.ceiling);
    lines.push_back({e.incumbent, cell("tokens_per_s", e.incumbent_tokens_per_s),
                     cell("peak_state_bytes", e.incumbent_peak_state_bytes),
                     e.moezero.value_or("(none fits)"),
                     cell("tokens_per_s", e.moezero_tokens_per_s),
                     cell("peak_state_bytes", e.moezero_peak_state_bytes), ratio, ceiling});
  }
  print_columns(lines);
}

nlohmann::ordered_json rows_json(const std::vector<Row>& rows) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const Row& r : rows) {
    nlohmann::ordered_json row;
    row["strategy"] = r.strategy;
    add_fields(row, r.values, "");
    add_fields(row, r.min, "_min");
    add_fields(row, r.max, "_max");
    out.push_back(std::move(row));
  }
  return out;
}

nlohmann::ordered_json frontier_json(const std::vector<FrontierEntry>& entries) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const FrontierEntry& e : entries) {
    nlohmann::ordered_json j;
    j["incumbent"] = e.incumbent;
    j["incumbent_tokens_per_s"] = e.incumbent_tokens_per_s;
    j["incumbent_peak_state_bytes"] = e.incumbent_peak_state_bytes;
    j["moezero"] = e.moezero ? nlohmann::ordered_json(*e.moezero) : nullptr;
    j["moezero_tokens_per_s"] = value_json(e.moezero_tokens_per_s);
    j["moezero_peak_state_bytes"] = value_json(e.moezero_peak_state_bytes);
    j["ratio"] = value_json(e.ratio);
    j["ceiling"] = value_json(e.ceiling);
    out.push_back(std::move(j));
  }
  return out;
}

void write_json(const std::vector<Row>& rows, const std::string& path, const char* who,
                const nlohmann::ordered_json& extra) {
  nlohmann::ordered_json j = extra;
  j["rows"] = rows_json(rows);
  write_output_file(path, j.dump(2) + "\n", std::string(who) + ": --json");
}

}  // namespace moezero::bench
