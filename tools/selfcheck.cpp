// tools/selfcheck.cpp — `moezero selfcheck`: a quick end-to-end look at a fresh build.
// Runs the op-case table's Test cases (kernels/op_cases: every op of core/ops.def) on every
// available backend against their float64 references, then the collectives on N ranks-as-threads
// (LocalCommunicator) with inputs crafted so the results are exact, and prints one line per check.
// Exit code 1 if any fails.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/op_cases/op_case.h"
#include "tools/cli.h"
#include "tools/selfcheck_comm.h"

namespace moezero::cli {
namespace {

struct Report {
  int passed = 0, failed = 0;
  void line(const std::string& what, bool ok, const std::string& detail) {
    std::printf("  %-4s %-60s %s\n", ok ? "ok" : "FAIL", what.c_str(), detail.c_str());
    (ok ? passed : failed)++;
  }
};

// Every Test-size case of the op table (kernels/op_cases) on `dev`, against its float64
// reference, one line each. A fixed seed: a failure replays exactly.
void check_kernels(Device& dev, Report& r) {
  const std::string tag = "[" + dev.name() + "] ";
  for (const cases::OpCase* c : cases::cases_of(cases::SizeClass::Test)) {
    try {
      const cases::Comparison cmp = cases::check_against_reference(dev, *c, 1234);
      r.line(tag + c->name, cmp.ok, cmp.detail);
    } catch (const std::exception& e) {
      r.line(tag + c->name, false, std::string("threw: ") + e.what());
    }
  }
}

}  // namespace

int selfcheck(const std::vector<std::string>& args) {
  int ranks = 4;
  std::string backend = "all";
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      MOEZERO_USAGE_REQUIRE(i + 1 < args.size(), "selfcheck: ", flag, " needs a value");
      return args[++i];
    };
    if (args[i] == "--ranks") {
      std::string v = value("--ranks");
      try {
        ranks = std::stoi(v);
      } catch (const std::exception&) {
        MOEZERO_USER_ERROR("selfcheck: --ranks '", v, "' is not an integer");
      }
      MOEZERO_REQUIRE(ranks >= 1 && ranks <= 64, "selfcheck: --ranks must be in [1, 64], got ",
                      ranks);
    } else if (args[i] == "--backend") {
      backend = value("--backend");
      MOEZERO_REQUIRE(backend == "cpu" || backend == "cuda" || backend == "all",
                      "selfcheck: --backend must be cpu, cuda or all, got '", backend, "'");
    } else {
      MOEZERO_USAGE_ERROR("selfcheck: unknown option '", args[i], "'");
    }
  }
  Report r;
  std::printf("moezero selfcheck\nkernels (the op-case table against float64 references):\n");
  if (backend != "cuda") {
    auto cpu = make_cpu_device(0);
    check_kernels(*cpu, r);
  }
  if (backend != "cpu") {
    std::string why;
    if (cuda_available(&why)) {
      auto gpu = make_cuda_device(0);
      check_kernels(*gpu, r);
    } else {
      std::printf("  skip [cuda] kernels: %s\n", why.c_str());
      MOEZERO_REQUIRE(backend != "cuda", "selfcheck: --backend cuda asked for, but ", why);
    }
  }
  std::printf("collectives (%d ranks as threads, exact results):\n", ranks);
  check_collectives(ranks, [&](const std::string& what, bool ok, const std::string& detail) {
    r.line(what, ok, detail);
  });
  std::printf("selfcheck: %d passed, %d failed\n", r.passed, r.failed);
  return r.failed == 0 ? 0 : 1;
}

}  // namespace moezero::cli
