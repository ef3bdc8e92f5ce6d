// tools/plan_cmd.cpp — `moezero plan --config FILE --cluster NODESxGPUS [--nics-per-node K]
// [--gpu NAME] [--inter-node NAME] [--intra-node NAME] [--routing-trace FILE | --zipf S [--drift D]
// [--coactivation C]] [--strategies LIST] [--steps N] [--warmup N] [--present ep|all]
// [--set k=v ...] [--json OUT]`: what a MoE job will do on a cluster this machine does not have.
// Runs the real trainer (ZeRO engine, prefetcher, shard cache, MoE layer decisions, step loop)
// for each strategy of `moezero bench` on the simulated backend (kernels/sim, comm/sim; issue 18,
// docs/simulator.md): virtual-time GPUs of a named profile, a modelled network of the cluster's
// topology, routing from a trace or a synthetic generator (moe/routing_source.h). Prints the
// same table as `moezero bench` and recommends the fastest strategy that fits the GPU's memory.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "comm/sim/sim_links.h"
#include "comm/world.h"
#include "core/allocator.h"
#include "core/config.h"
#include "core/error.h"
#include "core/process_groups.h"
#include "kernels/sim/measured_profile.h"
#include "kernels/sim/sim_device.h"
#include "model/transformer.h"
#include "moe/routing_source.h"
#include "tools/bench.h"
#include "tools/cli.h"
#include "tools/plan_choice.h"
#include "train/trainer.h"

namespace moezero::cli {
namespace {

using ::moezero::bench::Row;
using ::moezero::bench::Value;

constexpr int kMaxNicsPerNode = 1024;

struct PlanArgs {
  std::string config_path, json_path, routing_trace, cluster;
  int nodes = 0, gpus_per_node = 0;
  int nics_per_node = 0;  // 0: not given (one per GPU)
  std::string gpu = "h100", inter = "eth_100g", intra = "nvlink4";
  double zipf = 1.0, drift = 0.0, coactivation = 0.0, rank_noise = 0.1;
  bool synthetic_given = false;
  std::vector<std::string> overrides, strategies;
  int64_t steps = 2, warmup = 1;
  bool all_present = false;
};

double parse_real(const std::string& v, const char* what) {
  size_t used = 0;
  double x = 0.0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || !std::isfinite(x) || x < 0.0)
    MOEZERO_USER_ERROR(what, " needs a number >= 0, got '", v, "'");
  return x;
}

// A link named on the command line exists and is of its tier (checked before anything runs:
// an unknown one used to leave every strategy "not run" and exit 0).
void check_link(const std::string& name, const char* flag, bool intra) {
  comm::LinkProfile link;
  try {
    link = comm::link_profile(name);
  } catch (const Error& e) {
    MOEZERO_USER_ERROR("plan: ", flag, " ", e.message(),
                       intra ? "" : ", or 'config' (the config's comm_emulation)");
  }
  MOEZERO_REQUIRE(link.intra_node == intra, "plan: ", flag, " '", name, "' is a link ",
                  link.intra_node ? "inside a node" : "between nodes", ", not ",
                  intra ? "inside a node" : "between nodes");
}

PlanArgs parse_plan_args(const std::vector<std::string>& args) {
  PlanArgs a;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&](const char* flag) {
      MOEZERO_USAGE_REQUIRE(i + 1 < args.size(), "plan: ", flag, " needs a value");
      return args[++i];
    };
    const std::string& f = args[i];
    if (f == "--config") {
      a.config_path = value("--config");
    } else if (f == "--cluster") {
      const std::string c = value("--cluster");
      const size_t x = c.find('x');
      MOEZERO_REQUIRE(x != std::string::npos, "plan: --cluster needs NODESxGPUS (e.g. 8x8), got '",
                      c, "'");
      // Each part checked before it is narrowed: 4294967297x8 is not 1x8.
      const int64_t nodes = bench::parse_count(c.substr(0, x), "plan: --cluster NODES", 1);
      const int64_t gpus = bench::parse_count(c.substr(x + 1), "plan: --cluster GPUS", 1);
      MOEZERO_REQUIRE(nodes <= (1 << 20) && gpus <= (1 << 20) && nodes * gpus <= (1 << 20),
                      "plan: --cluster ", c, " is beyond 2^20 GPUs");
      a.cluster = c;
      a.nodes = static_cast<int>(nodes);
      a.gpus_per_node = static_cast<int>(gpus);
    } else if (f == "--nics-per-node") {
      a.nics_per_node = static_cast<int>(std::min<int64_t>(
          kMaxNicsPerNode + 1,
          bench::parse_count(value("--nics-per-node"), "plan: --nics-per-node", 1)));
      MOEZERO_REQUIRE(a.nics_per_node <= kMaxNicsPerNode, "plan: --nics-per-node is beyond ",
                      kMaxNicsPerNode, " NICs per node");
    } else if (f == "--gpu") {
      a.gpu = value("--gpu");
    } else if (f == "--inter-node") {
      a.inter = value("--inter-node");
    } else if (f == "--intra-node") {
      a.intra = value("--intra-node");
    } else if (f == "--routing-trace") {
      a.routing_trace = value("--routing-trace");
    } else if (f == "--zipf") {
      a.zipf = parse_real(value("--zipf"), "plan: --zipf");
      a.synthetic_given = true;
    } else if (f == "--drift") {
      a.drift = parse_real(value("--drift"), "plan: --drift");
      a.synthetic_given = true;
    } else if (f == "--coactivation") {
      a.coactivation = parse_real(value("--coactivation"), "plan: --coactivation");
      MOEZERO_REQUIRE(a.coactivation <= 1.0, "plan: --coactivation needs a number in [0, 1]");
      a.synthetic_given = true;
    } else if (f == "--rank-noise") {
      a.rank_noise = parse_real(value("--rank-noise"), "plan: --rank-noise");
      a.synthetic_given = true;
    } else if (f == "--strategies") {
      a.strategies = bench::split_list(value("--strategies"), "plan: --strategies");
    } else if (f == "--steps") {
      a.steps = bench::parse_count(value("--steps"), "plan: --steps", 1);
    } else if (f == "--warmup") {
      a.warmup = bench::parse_count(value("--warmup"), "plan: --warmup", 0);
    } else if (f == "--present") {
      const std::string p = value("--present");
      MOEZERO_REQUIRE(p == "ep" || p == "all", "plan: --present needs ep or all, got '", p, "'");
      a.all_present = p == "all";
    } else if (f == "--set") {
      a.overrides.push_back(value("--set"));
    } else if (f == "--json") {
      a.json_path = value("--json");
    } else {
      MOEZERO_USAGE_ERROR("plan: unknown option '", f, "'");
    }
  }
  MOEZERO_USAGE_REQUIRE(!a.config_path.empty(), "plan: --config FILE is required");
  MOEZERO_USAGE_REQUIRE(a.nodes > 0, "plan: --cluster NODESxGPUS is required");
  MOEZERO_REQUIRE(
      a.routing_trace.empty() || !a.synthetic_given,
      "plan: --routing-trace and --zipf/--drift/--coactivation/--rank-noise exclude each other");
  if (a.strategies.empty()) a.strategies = bench::default_strategy_names();
  check_link(a.intra, "--intra-node", true);
  if (a.inter != "config") check_link(a.inter, "--inter-node", false);
  MOEZERO_REQUIRE(a.inter != "config" || a.nics_per_node == 0,
                  "plan: --nics-per-node does not apply to --inter-node config (the config's "
                  "comm_emulation gives every rank its own NIC, as moezero bench emulates it)");
  if (a.nics_per_node == 0) a.nics_per_node = a.gpus_per_node;
  return a;
}

// The strategy's config: the file, the user's --set, the strategy's, then the cluster's world
// size and the step count; nothing written.
Config strategy_config(const PlanArgs& a, const bench::Strategy& s, int world) {
  std::vector<std::string> o = a.overrides;
  o.insert(o.end(), s.overrides.begin(), s.overrides.end());
  o.push_back("parallel.world_size=" + std::to_string(world));
  o.push_back("train.steps=" + std::to_string(a.warmup + a.steps));
  Config c = load_config(a.config_path, o);
  c.parallel.backend = BackendKind::Cpu;  // the simulated GPUs run it (the header says so)
  c.train.metrics_file.clear();
  c.train.save_dir.clear();
  c.profile.trace.clear();
  c.profile.routing_trace.clear();
  c.train.eval_every = 0;
  return c;
}

std::unique_ptr<moe::RoutingSource> make_routing(const PlanArgs& a, const Config& c) {
  moe::RoutingShape shape;
  shape.num_experts = c.model.num_experts;
  shape.top_k = static_cast<int>(c.model.top_k);
  shape.tokens_per_rank =
      c.train.micro_batch_size / c.parallel.world_size * static_cast<int64_t>(c.model.seq_len);
  for (int l = 0; l < static_cast<int>(c.model.n_layers); ++l)
    shape.moe_layers += model::is_moe_layer(c.model, l) ? 1 : 0;
  if (shape.moe_layers == 0) {  // a dense model: any valid shape (no MoE layer asks)
    shape.moe_layers = 1;
    shape.num_experts = std::max<int64_t>(shape.num_experts, 1);
    shape.top_k = 1;
  }
  if (!a.routing_trace.empty())
    return std::make_unique<moe::TraceRoutingSource>(a.routing_trace, shape);
  moe::SyntheticRouting p;
  p.zipf_s = a.zipf;
  p.drift = a.drift;
  p.coactivation = a.coactivation;
  p.rank_noise = a.rank_noise;
  p.seed = static_cast<uint64_t>(c.train.seed);
  p.grad_accum_steps = c.train.grad_accum_steps;
  return std::make_unique<moe::SyntheticRoutingSource>(shape, p);
}

struct Outcome {
  std::string name;
  std::optional<bench::RunSummary> summary;
  uint64_t peak_total = 0;      // largest present rank's allocator peak of the measured steps
  std::vector<double> step_ms;  // rank 0's virtual step time of each measured step
  std::string failure;          // why it did not run (out of memory, config)
  double wall_s = 0.0;
};

Outcome run_strategy(const PlanArgs& a, const std::string& name, const Config& base,
                     const sim::GpuProfile& gpu, const moe::RoutingSource& routing) {
  Outcome out{name, std::nullopt, 0, {}, {}, 0.0};
  const int world = a.nodes * a.gpus_per_node;
  Config c;
  try {
    c = strategy_config(a, bench::resolve_strategy(name, base), world);
  } catch (const Error& e) {
    out.failure = "the config rejects its overrides: " + e.message();
    return out;
  }
  comm::SimWorldOptions so;
  so.world_size = world;
  so.topology.nodes = a.nodes;
  so.topology.gpus_per_node = a.gpus_per_node;
  so.topology.intra_link = a.intra;
  so.topology.nics_per_node = a.nics_per_node;
  so.gpu = gpu;
  so.device = train::simulated_device_options(world);
  if (a.inter == "config") {  // the link `moezero bench` emulates for this config
    so.network = make_comm_options(c.comm_emulation, c.comm).emulation;
    MOEZERO_REQUIRE(so.network->enabled() || name == "compute",
                    "plan: --inter-node config needs an emulated link in the config "
                    "(comm_emulation.link_gbps or latency_us)");
  } else {
    so.topology.inter_link = a.inter;
  }
  if (name == "compute") {         // bench's denominator, a lower bound: free communication, and
    so.network = CommEmulation{};  // memory without limit (it need not fit: it is no candidate)
    so.device.capacity_bytes = uint64_t(1) << 60;
  }
  so.comm = make_comm_options(c.comm_emulation, c.comm);
  if (!a.all_present) {  // one expert-parallel group stands for the world (docs/simulator.md)
    const ProcessGroups pgs(world, static_cast<int>(c.parallel.ep_size),
                            static_cast<int>(std::max<int64_t>(c.model.num_experts, 1)));
    so.present = pgs.ep_group_of(0).ranks;
  }
  train::TrainOptions opt;
  opt.routing_source = &routing;
  opt.device_memory_bytes = so.device.capacity_bytes > 0 ? so.device.capacity_bytes
                                                         : gpu.memory_bytes;  // the "auto" sizes
  opt.data = [](const train::BatchRequest& b, std::vector<int32_t>& tokens,
                std::vector<int32_t>& targets) {  // not read: no kernel computes
    tokens.assign(static_cast<size_t>(b.rows * b.seq_len), 0);
    targets.assign(static_cast<size_t>(b.rows * b.seq_len), 0);
  };
  opt.run_world = [&so](const std::function<void(comm::RankContext&)>& rank_main) {
    comm::World::run_sim(so, rank_main);
  };
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const train::TrainResult r = train::train(c, opt);
    out.summary = bench::summarise_run(r.steps, a.warmup);
    for (size_t i = static_cast<size_t>(a.warmup); i < r.steps.size(); ++i) {
      const train::StepLog& step = r.steps[i];
      for (const train::RankStepStats& s : step.ranks)
        out.peak_total = std::max(out.peak_total, s.peak_total_bytes);
      if (step.tokens_per_s > 0)
        out.step_ms.push_back(1000.0 * double(step.tokens) / step.tokens_per_s);
    }
  } catch (const Error& e) {
    out.failure = e.message();
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

// The config with the cluster's world size: parallel.world_size comes from --cluster (the
// header says so), so the user's --set is checked at that size, never at the file's (a
// --set train.micro_batch_size=16 for --cluster 2x8 is valid at 16 GPUs, whatever the file's
// world). An error that only the cluster's size causes (the config as given loads at its own
// world size) names --cluster, which the user gave, not parallel.world_size, which the user did
// not set; the user's own errors (file, --set) are reported as they are.
Config load_base_config(const PlanArgs& a, int world) {
  std::vector<std::string> o = a.overrides;
  o.push_back("parallel.world_size=" + std::to_string(world));
  std::exception_ptr at_cluster;
  std::string why;
  try {
    return load_config(a.config_path, o);
  } catch (const Error& e) {
    at_cluster = std::current_exception();
    why = e.message();
  }
  try {
    (void)load_config(a.config_path, a.overrides);
  } catch (const Error&) {
    std::rethrow_exception(at_cluster);  // wrong at its own size too: the user's error
  }
  MOEZERO_USER_ERROR("plan: --cluster ", a.cluster, " (", world,
                     " GPUs) cannot be planned with this config: ", why);
}

// The header's line on the world size: the cluster's, and the config's own when it differs
// (nothing when the config as given does not load at its own size: the cluster's is the only
// one).
std::string world_size_note(const PlanArgs& a, int world) {
  std::string note =
      "parallel.world_size = " + std::to_string(world) + " from --cluster " + a.cluster;
  try {
    const Config own = load_config(a.config_path, a.overrides);
    if (own.parallel.world_size != world)
      note += " (the config's " + std::to_string(own.parallel.world_size) + " is replaced)";
  } catch (const Error&) {
    note += " (the config's own is replaced)";
  }
  return note;
}

// "80.0 GiB per GPU", or "70.0 GiB per GPU (train.memory_limit)".
std::string memory_text(const PlanMemory& memory) {
  return format_bytes(memory.bytes) + " per GPU" +
         (memory.from_memory_limit ? " (train.memory_limit)" : "");
}

// A plan with no answer fails: no strategy ran at all (each one's reason is printed above),
// or none fits the GPU's memory.
void require_an_answer(const PlanArgs& a, const std::vector<Outcome>& outcomes, bool fits,
                       const sim::GpuProfile& gpu, const PlanMemory& memory) {
  const Outcome* ran = nullptr;
  for (const Outcome& o : outcomes)
    if (o.name != "compute" && o.summary) ran = &o;
  if (!ran) {
    std::string first;
    for (const Outcome& o : outcomes)
      if (o.name != "compute" && first.empty()) first = o.name + ": " + o.failure;
    MOEZERO_USER_ERROR(
        "plan: no strategy ran for ", a.config_path, " on --cluster ", a.cluster,
        first.empty() ? std::string(" (--strategies lists only compute)") : " (" + first + ")");
  }
  MOEZERO_REQUIRE(fits, "plan: no strategy of ", a.config_path, " fits within ",
                  memory_text(memory), " of --gpu ", gpu.name, " on --cluster ", a.cluster,
                  " (the peaks are in the table)");
}

const Outcome& outcome_of(const std::vector<Outcome>& outcomes, const std::string& name) {
  return *std::find_if(outcomes.begin(), outcomes.end(),
                       [&](const Outcome& x) { return x.name == name; });
}

// The recommendation (tools/plan_choice.h): the fastest strategy (not the compute-only
// reference) that ran within the GPU's memory, or the least memory of those within its jitter.
// [in] exact: whether a strategy keeps the numerics (no quantised gathers or reductions); when
// the recommendation quantises, the fastest exact strategy is named beside it
// ([out] exact_choice; nullopt when the recommendation is exact or no exact strategy fits).
std::optional<PlanChoice> recommend(const std::vector<Outcome>& outcomes,
                                    const std::vector<Row>& rows, const PlanMemory& memory,
                                    const std::function<bool(const std::string&)>& exact,
                                    std::optional<std::string>& exact_choice) {
  const auto& fields = bench::row_fields();
  const size_t ms =
      static_cast<size_t>(std::find(fields.begin(), fields.end(), "step_ms") - fields.begin());
  std::vector<PlanCandidate> candidates;
  for (const Row& r : rows) {
    if (r.strategy == "compute" || !r.values[ms]) continue;
    const Outcome& o = outcome_of(outcomes, r.strategy);
    candidates.push_back(PlanCandidate{r.strategy, *r.values[ms], step_jitter(o.step_ms),
                                       o.peak_total, o.peak_total <= memory.bytes});
  }
  const std::optional<PlanChoice> choice = choose_plan(candidates);
  if (!choice) return choice;
  auto describe = [&](const std::string& name) {
    const auto c = std::find_if(candidates.begin(), candidates.end(),
                                [&](const PlanCandidate& x) { return x.name == name; });
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s (%.1f ms per step, jitter %.1f %%, peak %s)", name.c_str(),
                  c->step_ms, 100.0 * c->jitter, format_bytes(c->peak_bytes).c_str());
    return std::string(buf);
  };
  if (choice->tied.size() > 1) {
    std::printf("\ntie: within the measured steps' jitter of the fastest:");
    for (const std::string& name : choice->tied) std::printf("\n  %s", describe(name).c_str());
    std::printf("\nrecommended: %s, the least memory of the tie (of %s)\n",
                choice->recommended.c_str(), memory_text(memory).c_str());
  } else {
    std::printf("\nrecommended: %s of %s\n", describe(choice->recommended).c_str(),
                memory_text(memory).c_str());
  }
  if (!exact(choice->recommended)) {  // quantised: the fastest choice that keeps the numerics
    std::vector<PlanCandidate> kept;
    for (const PlanCandidate& c : candidates)
      if (exact(c.name)) kept.push_back(c);
    if (const std::optional<PlanChoice> e = choose_plan(kept)) {
      exact_choice = e->recommended;
      std::printf(
          "  it quantises weights or gradients (int8 blocks: not the numerics of a "
          "full-precision run); without: %s\n",
          describe(e->recommended).c_str());
    }
  }
  return choice;
}

// The --set overrides that turn the plan's config into its recommended strategy on the planned
// cluster: the world size (from --cluster), the user's own --set, then the strategy's.
std::vector<std::string> apply_overrides(const PlanArgs& a, const Config& base, int world,
                                         const PlanChoice& choice) {
  std::vector<std::string> v = {"parallel.world_size=" + std::to_string(world)};
  for (const std::string& o : a.overrides)
    if (o.rfind("parallel.world_size=", 0) != 0) v.push_back(o);
  for (const std::string& o : bench::resolve_strategy(choice.recommended, base).overrides)
    v.push_back(o);
  return v;
}

// The plan's input and verdict beside the rows of --json: a function of the input alone (no
// wall times), so two runs of one input write the same file.
nlohmann::ordered_json plan_json(const PlanArgs& a, const sim::GpuProfile& gpu,
                                 const std::optional<PlanChoice>& choice) {
  nlohmann::ordered_json p;
  p["config"] = a.config_path;
  p["nodes"] = a.nodes;
  p["gpus_per_node"] = a.gpus_per_node;
  p["nics_per_node"] =
      a.inter == "config" ? nlohmann::ordered_json() : nlohmann::ordered_json(a.nics_per_node);
  p["gpu"] = gpu.name;
  p["intra_node"] = a.intra;
  p["inter_node"] = a.inter;
  p["routing"] = a.routing_trace.empty() ? "synthetic" : a.routing_trace;
  p["warmup"] = a.warmup;
  p["steps"] = a.steps;
  p["overrides"] = a.overrides;
  p["recommended"] =
      choice ? nlohmann::ordered_json(choice->recommended) : nlohmann::ordered_json();
  p["tied"] = choice ? nlohmann::ordered_json(choice->tied) : nlohmann::ordered_json::array();
  nlohmann::ordered_json out;
  out["plan"] = p;
  return out;
}

// --compute-profile library|measured and --measured-json PATH, taken out of `args`
// (kernels/sim/measured_profile.h chooses; docs/plan.md "Compute profiles").
std::vector<std::string> take_compute_profile(std::vector<std::string> args, std::string& mode,
                                              std::string& path) {
  for (size_t i = 0; i < args.size();) {
    if (args[i] != "--compute-profile" && args[i] != "--measured-json") {
      ++i;
      continue;
    }
    MOEZERO_USAGE_REQUIRE(i + 1 < args.size(), "plan: ", args[i], " needs a value");
    (args[i] == "--compute-profile" ? mode : path) = args[i + 1];
    args.erase(args.begin() + static_cast<std::ptrdiff_t>(i),
               args.begin() + static_cast<std::ptrdiff_t>(i) + 2);
  }
  return args;
}

}  // namespace

int plan(const std::vector<std::string>& all_args) {
  std::string profile_mode, measured_path;
  const PlanArgs a = parse_plan_args(take_compute_profile(all_args, profile_mode, measured_path));
  const int world = a.nodes * a.gpus_per_node;
  const Config base = load_base_config(a, world);
  sim::GpuProfile gpu = sim::gpu_profile(a.gpu);
  const std::string compute_profile = sim::choose_compute_profile(gpu, profile_mode, measured_path);
  const std::string nics = a.inter == "config" ? std::string("one NIC per rank")
                                               : std::to_string(a.nics_per_node) + " NIC" +
                                                     (a.nics_per_node > 1 ? "s" : "") + " per node";
  std::printf(
      "moezero plan: %s on %d x %d %s (%s inside a node, %s between nodes, %s), %s routing, "
      "steps %lld-%lld measured\n",
      a.config_path.c_str(), a.nodes, a.gpus_per_node, gpu.name.c_str(), a.intra.c_str(),
      a.inter.c_str(), nics.c_str(),
      a.routing_trace.empty() ? "synthetic" : a.routing_trace.c_str(), (long long)a.warmup + 1,
      (long long)(a.warmup + a.steps));
  std::printf("  %s\n", compute_profile.c_str());
  std::printf("  %s\n", world_size_note(a, world).c_str());
  if (base.parallel.backend != BackendKind::Cpu)
    std::printf("  (the config's parallel.backend \"cuda\" is replaced by the simulated GPUs)\n");
  // One routing source for every strategy: the strategies change zero, prefetch, cache and
  // link keys, never what it depends on (model, batch, world, seed, accumulation), so its
  // totals over the world are computed once (moe/routing_source.h).
  const std::unique_ptr<moe::RoutingSource> routing = make_routing(a, base);
  std::vector<Outcome> outcomes;
  for (const std::string& name : a.strategies) {
    outcomes.push_back(run_strategy(a, name, base, gpu, *routing));
    const Outcome& o = outcomes.back();
    if (o.summary)
      std::printf("  %-18s simulated in %.1f s\n", name.c_str(), o.wall_s);
    else
      std::printf("  %-18s not run: %s\n", name.c_str(), o.failure.c_str());
    std::fflush(stdout);
  }
  std::vector<std::string> names;
  std::vector<std::vector<bench::RunSummary>> runs;
  for (const Outcome& o : outcomes) {
    names.push_back(o.name);
    runs.push_back(o.summary ? std::vector<bench::RunSummary>{*o.summary}
                             : std::vector<bench::RunSummary>{});
  }
  std::vector<Row> rows = bench::combine(names, runs);
  // Times are virtual: exposed communication is the step's excess over the compute row's (the
  // trace's wall-clock spans mean nothing here, so no wall-clock field reaches the table or
  // the JSON), and the spread is over the measured steps, not over repeats.
  const auto& fields = bench::row_fields();
  auto at = [&](const char* f) {
    return static_cast<size_t>(std::find(fields.begin(), fields.end(), f) - fields.begin());
  };
  std::optional<double> compute_ms;
  for (const Row& r : rows)
    if (r.strategy == "compute") compute_ms = r.values[at("step_ms")];
  for (Row& r : rows) {
    for (const char* wall : {"comm_ms", "exposed_comm_ms_max", "exposed_comm_ms", "spread"})
      for (std::vector<bench::Value>* v : {&r.values, &r.min, &r.max}) (*v)[at(wall)].reset();
    // spread: max / min of the measured steps' times (the jitter ties are judged by).
    r.values[at("spread")] = 1.0 + step_jitter(outcome_of(outcomes, r.strategy).step_ms);
    if (compute_ms && r.values[at("step_ms")])
      r.values[at("exposed_comm_ms")] = std::max(0.0, *r.values[at("step_ms")] - *compute_ms);
  }
  std::printf(
      "\npredicted per optimizer step, rank 0 (virtual time); utilisation = compute's "
      "step_ms / step_ms;\nexposed_comm_ms = step_ms - compute's step_ms; spread = max / min of "
      "the measured steps' step_ms\n");
  bench::print_table(rows);
  const PlanMemory memory = plan_memory(gpu.memory_bytes, base.train.memory_limit);
  const auto exact = [&](const std::string& name) {  // the strategy's config, as it ran
    const Config c = strategy_config(a, bench::resolve_strategy(name, base), world);
    return !c.zero.quantized_weights && !c.zero.quantized_gradients;
  };
  std::optional<std::string> exact_choice;
  const std::optional<PlanChoice> choice = recommend(outcomes, rows, memory, exact, exact_choice);
  const std::vector<std::string> apply =
      choice ? apply_overrides(a, base, world, *choice) : std::vector<std::string>{};
  if (choice) {
    std::printf("  train with it: moezero train --config %s", a.config_path.c_str());
    for (const std::string& o : apply) std::printf(" --set %s", o.c_str());
    std::printf("\n");
  }
  if (!a.json_path.empty()) {
    nlohmann::ordered_json pj = plan_json(a, gpu, choice);
    pj["plan"]["compute_profile"] = compute_profile;
    pj["plan"]["recommended_overrides"] = apply;
    pj["plan"]["recommended_exact"] =
        exact_choice ? nlohmann::ordered_json(*exact_choice) : nlohmann::ordered_json();
    bench::write_json(rows, a.json_path, "plan", pj);
    std::printf("json: %s\n", a.json_path.c_str());
  }
  std::fflush(stdout);
  require_an_answer(a, outcomes, choice.has_value(), gpu, memory);
  return 0;
}

}  // namespace moezero::cli
