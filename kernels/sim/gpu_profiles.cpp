// kernels/sim/gpu_profiles.cpp — the GPU profiles (kernels/sim/gpu_profiles.json, compiled in)
// and the cost curves of a profile.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kernels/sim/gpu_profiles_json.h"  // generated: embedded::gpu_profiles_json
#include "kernels/sim/sim_device.h"

namespace moezero::sim {

namespace {

double number(const nlohmann::json& p, const std::string& profile, const char* key, double lo,
              double hi) {
  MOEZERO_CHECK(p.contains(key) && p[key].is_number(), "gpu_profiles.json: profile '", profile,
                "' lacks the number '", key, "'");
  const double v = p[key].get<double>();
  MOEZERO_CHECK(v >= lo && v <= hi, "gpu_profiles.json: profile '", profile, "' has ", key, " = ",
                v, ", outside [", lo, ", ", hi, "]");
  return v;
}

std::vector<GpuProfile> load() {
  const nlohmann::json doc = nlohmann::json::parse(embedded::gpu_profiles_json);
  std::vector<GpuProfile> out;
  for (const nlohmann::json& p : doc.at("profiles")) {
    GpuProfile g;
    g.name = p.at("name").get<std::string>();
    g.description = p.at("description").get<std::string>();
    constexpr double kBig = 1e18;
    g.bf16_flops = number(p, g.name, "bf16_flops", 1, kBig);
    g.fp32_flops = number(p, g.name, "fp32_flops", 1, kBig);
    g.hbm_bytes_per_s = number(p, g.name, "hbm_bytes_per_s", 1, kBig);
    g.host_link_bytes_per_s = number(p, g.name, "host_link_bytes_per_s", 1, kBig);
    g.launch_s = number(p, g.name, "launch_s", 0, 1);
    g.memory_bytes = static_cast<uint64_t>(number(p, g.name, "memory_bytes", 1, kBig));
    g.gemm_max_efficiency = number(p, g.name, "gemm_max_efficiency", 1e-3, 1);
    g.gemm_half_flops = number(p, g.name, "gemm_half_flops", 0, kBig);
    g.mem_max_efficiency = number(p, g.name, "mem_max_efficiency", 1e-3, 1);
    g.mem_half_bytes = number(p, g.name, "mem_half_bytes", 0, kBig);
    g.sharing = static_cast<int>(number(p, g.name, "sharing", 1, 1024));
    g.one_executor = p.value("one_executor", false);
    MOEZERO_CHECK(p.contains("sources"), "gpu_profiles.json: profile '", g.name,
                  "' has no sources");
    out.push_back(std::move(g));
  }
  return out;
}

const std::vector<GpuProfile>& all() {
  static const std::vector<GpuProfile> profiles = load();
  return profiles;
}

}  // namespace

double GpuProfile::gemm_seconds(double flops, bool bf16) const {
  if (flops <= 0) return 0.0;
  return (flops + gemm_half_flops) / ((bf16 ? bf16_flops : fp32_flops) * gemm_max_efficiency);
}

double GpuProfile::memory_seconds(double bytes) const {
  if (bytes <= 0) return 0.0;
  return (bytes + mem_half_bytes) / (hbm_bytes_per_s * mem_max_efficiency);
}

std::vector<std::string> gpu_profile_names() {
  std::vector<std::string> names;
  for (const GpuProfile& p : all()) names.push_back(p.name);
  return names;
}

GpuProfile gpu_profile(const std::string& name) {
  std::string known;
  for (const GpuProfile& p : all()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  MOEZERO_USER_ERROR("unknown GPU profile '", name, "' (known: ", known, ")");
}

}  // namespace moezero::sim
