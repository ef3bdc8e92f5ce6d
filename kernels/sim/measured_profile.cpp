// kernels/sim/measured_profile.cpp — the measured compute profile: a kernel benchmark's --json
// as per-op-kind efficiencies over the library curves (kernels/sim/measured_profile.h).
#include "kernels/sim/measured_profile.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "kernels/sim/measured_profiles_json.h"  // generated: embedded::measured_profiles
#include "kernels/sim/sim_device.h"

namespace moezero::sim {

const std::vector<std::string>& op_kind_names() {
  static const std::vector<std::string> names = {
#define MOEZERO_OP(name, params, args) #name,
#include "core/ops.def"
  };
  return names;
}

namespace {

using nlohmann::json;

double positive(const json& c, const char* key, const std::string& where) {
  MOEZERO_REQUIRE(c.contains(key) && c[key].is_number(), where, " lacks the number '", key, "'");
  const double v = c[key].get<double>();
  MOEZERO_REQUIRE(std::isfinite(v) && v > 0, where, " has ", key, " = ", v, ", not a number > 0");
  return v;
}

std::string text(const json& c, const char* key, const std::string& where) {
  MOEZERO_REQUIRE(c.contains(key) && c[key].is_string(), where, " lacks the string '", key, "'");
  return c[key].get<std::string>();
}

// Sorted by size; points of one size and dtype merged (geometric mean of their rates).
void sort_and_merge(std::vector<MeasuredRates::Point>& pts) {
  std::sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) {
    return a.bf16 != b.bf16 ? a.bf16 < b.bf16 : a.size < b.size;
  });
  std::vector<MeasuredRates::Point> out;
  for (size_t i = 0; i < pts.size();) {
    size_t j = i;
    double log_sum = 0;
    for (; j < pts.size() && pts[j].size == pts[i].size && pts[j].bf16 == pts[i].bf16; ++j)
      log_sum += std::log(pts[j].rate);
    out.push_back({pts[i].size, std::exp(log_sum / double(j - i)), pts[i].bf16});
    i = j;
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.size < b.size; });
  pts = std::move(out);
}

void add_case(MeasuredRates& r, const json& c, const std::string& where) {
  MOEZERO_REQUIRE(c.is_object(), where, " is not an object");
  const std::string op = text(c, "op", where);
  const auto& names = op_kind_names();
  MOEZERO_REQUIRE(std::find(names.begin(), names.end(), op) != names.end(), where, " has op '", op,
                  "', not an op of core/ops.def");
  const std::string bound = text(c, "bound", where);
  MOEZERO_REQUIRE(bound == "compute" || bound == "memory", where, " has bound '", bound,
                  "', not compute or memory");
  bool compute = bound == "compute";
  MeasuredRates::Point p;
  if (c.contains("sim_bytes")) {  // the simulator's own counts of the call: rate = count / time
    compute = compute && c.value("sim_flops", 0.0) > 0;
    p.size = positive(c, compute ? "sim_flops" : "sim_bytes", where);
    p.rate = p.size / positive(c, "seconds", where);
  } else {  // the case's counts, at the benchmark's rate
    p.size = positive(c, compute ? "flops" : "bytes", where);
    p.rate = positive(c, "rate", where);
  }
  p.bf16 = c.value("dtype", std::string()) == "bf16";
  auto [it, fresh] = r.kinds.try_emplace(op);
  MOEZERO_REQUIRE(fresh || it->second.compute == compute, where, " rates op '", op, "' as ", bound,
                  "-bound, an earlier case of it otherwise");
  it->second.compute = compute;
  it->second.points.push_back(p);
}

// The library's rate of one call of `size` (FLOP/s or bytes/s).
double library_rate(const GpuProfile& g, bool compute, double size, bool bf16) {
  return size / (compute ? g.gemm_seconds(size, bf16) : g.memory_seconds(size));
}

// log(measured / library) at `x`, interpolated in log x over the points of the dtype class
// (all points when none has it), held at the nearest measured size outside them.
double log_ratio(const GpuProfile& g, const MeasuredRates::Kind& k, double x, bool bf16) {
  std::vector<const MeasuredRates::Point*> pts;
  for (const auto& p : k.points)
    if (p.bf16 == bf16) pts.push_back(&p);
  if (pts.empty())
    for (const auto& p : k.points) pts.push_back(&p);
  auto lr = [&](const MeasuredRates::Point* p) {
    return std::log(p->rate / library_rate(g, k.compute, p->size, p->bf16));
  };
  if (x <= pts.front()->size) return lr(pts.front());
  if (x >= pts.back()->size) return lr(pts.back());
  size_t i = 1;
  while (pts[i]->size < x) ++i;
  const double t = std::log(x / pts[i - 1]->size) / std::log(pts[i]->size / pts[i - 1]->size);
  return lr(pts[i - 1]) + t * (lr(pts[i]) - lr(pts[i - 1]));
}

}  // namespace

std::optional<double> MeasuredRates::seconds(const GpuProfile& library, std::string_view op,
                                             double flops, bool bf16, double bytes) const {
  const auto it = kinds.find(op);
  if (it == kinds.end()) return std::nullopt;
  const Kind& k = it->second;
  const double x = k.compute ? flops : bytes;
  if (x <= 0) return std::nullopt;  // nothing of the rated count: the library's answer
  const double lib = k.compute ? library.gemm_seconds(x, bf16) : library.memory_seconds(x);
  const double s = lib / std::exp(log_ratio(library, k, x, bf16));
  return k.compute ? std::max(s, library.memory_seconds(bytes)) : s;
}

double MeasuredRates::mean_ratio(const GpuProfile& library, std::string_view op) const {
  const auto it = kinds.find(op);
  if (it == kinds.end()) return 1.0;
  double sum = 0;
  for (const Point& p : it->second.points)
    sum += std::log(p.rate / library_rate(library, it->second.compute, p.size, p.bf16));
  return std::exp(sum / double(it->second.points.size()));
}

MeasuredRates parse_measured_rates(std::string_view body, const std::string& origin) {
  json doc;
  try {
    doc = json::parse(body);
  } catch (const json::exception& e) {
    MOEZERO_USER_ERROR(origin, ": not JSON (", e.what(), ")");
  }
  MOEZERO_REQUIRE(doc.is_object() && doc.value("format", std::string()) == "moezero-kernel-rates",
                  origin,
                  ": not a kernel benchmark's --json (no \"format\": \"moezero-kernel-rates\")");
  MeasuredRates r;
  r.origin = origin;
  r.bench = text(doc, "bench", origin);
  r.device = text(doc, "device", origin);
  MOEZERO_REQUIRE(doc.contains("cases") && doc["cases"].is_array() && !doc["cases"].empty(), origin,
                  ": no cases (a non-empty array \"cases\")");
  for (size_t i = 0; i < doc["cases"].size(); ++i)
    add_case(r, doc["cases"][i], origin + ": cases[" + std::to_string(i) + "]");
  for (auto& [op, k] : r.kinds) sort_and_merge(k.points);
  return r;
}

MeasuredRates load_measured_rates(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) MOEZERO_USER_ERROR(path, ": cannot read: ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  MOEZERO_REQUIRE(!in.bad(), path, ": cannot read: ", std::strerror(errno));
  return parse_measured_rates(ss.str(), path);
}

std::optional<MeasuredRates> compiled_in_measured_rates(const std::string& gpu) {
  for (const embedded::MeasuredProfileJson* e = embedded::measured_profiles; e->gpu; ++e)
    if (gpu == e->gpu)
      return parse_measured_rates(e->json, "compiled in: kernels/sim/measured/" + gpu + ".json");
  return std::nullopt;
}

namespace {

std::string describe(const GpuProfile& gpu, const MeasuredRates& r) {
  std::ostringstream os;
  os << "compute profile: measured (" << r.origin << ": " << r.kinds.size() << " of "
     << op_kind_names().size() << " op kinds measured on '" << r.device << "' by " << r.bench
     << ", the others on the library curves of " << gpu.name << "; measured / library:";
  char buf[64];
  for (const auto& [op, k] : r.kinds) {
    std::snprintf(buf, sizeof buf, " %s %.3g", op.c_str(), r.mean_ratio(gpu, op));
    os << buf;
  }
  os << ")";
  return os.str();
}

}  // namespace

std::string choose_compute_profile(GpuProfile& gpu, const std::string& mode,
                                   const std::string& path) {
  MOEZERO_REQUIRE(mode.empty() || mode == "library" || mode == "measured",
                  "plan: --compute-profile needs library or measured, got '", mode, "'");
  MOEZERO_REQUIRE(mode != "library" || path.empty(), "plan: --measured-json ", path,
                  " contradicts --compute-profile library");
  std::optional<MeasuredRates> r;
  if (!path.empty()) {
    try {
      r = load_measured_rates(path);
    } catch (const Error& e) {
      MOEZERO_USER_ERROR("plan: --measured-json ", e.message());
    }
  } else if (mode != "library") {
    r = compiled_in_measured_rates(gpu.name);
    MOEZERO_REQUIRE(r || mode.empty(),
                    "plan: --compute-profile measured: this build has no "
                    "kernels/sim/measured/",
                    gpu.name, ".json for --gpu ", gpu.name,
                    " (give --measured-json PATH, a kernel benchmark's --json)");
  }
  if (!r) {
    gpu.measured.reset();
    return "compute profile: library (the curves of kernels/sim/gpu_profiles.json for " + gpu.name +
           (mode.empty() ? "; no measured file for it in this build)"
                         : ", as --compute-profile library asks)");
  }
  gpu.measured = std::make_shared<const MeasuredRates>(std::move(*r));
  return describe(gpu, *gpu.measured);
}

}  // namespace moezero::sim
