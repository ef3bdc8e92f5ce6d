// train/grad_health.cpp — see grad_health.h.
#include "train/grad_health.h"

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/communicator.h"
#include "core/device.h"
#include "core/error.h"
#include "core/host_exchange.h"
#include "core/ops.h"
#include "zero/zero_engine.h"

namespace moezero::train {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, sep)) out.push_back(cur);
  return out;
}

const char* kind_text(int64_t kind) {
  switch (static_cast<NonFiniteKind>(kind)) {
    case NonFiniteKind::NaN: return "nan";
    case NonFiniteKind::PosInf: return "inf";
    case NonFiniteKind::NegInf: return "-inf";
    case NonFiniteKind::None: break;
  }
  return "?";
}

constexpr size_t kReportWords = 8;  // found, group, param, index, kind, micro_batch, order, count

}  // namespace

std::string short_param_name(const std::string& full) {
  std::string n = full;
  for (const char* suffix : {".weight", ".bias"}) {
    const size_t len = std::strlen(suffix);
    if (n.size() > len && n.compare(n.size() - len, len, suffix) == 0) n.resize(n.size() - len);
  }
  const size_t dot = n.rfind('.');
  return dot == std::string::npos ? n : n.substr(dot + 1);
}

GradHealth::GradHealth(Device& device, Stream& stream, Communicator& misc, Communicator* ep,
                       const ZeroEngine& engine)
    : device_(device), stream_(stream), misc_(misc) {
  // One line per group: name \t layer \t expert \t param,param,...
  std::string text;
  for (int g = 0; g < engine.group_count(); ++g) {
    const GroupSpec& spec = engine.layout(g).spec();
    text +=
        spec.name + "\t" + std::to_string(spec.layer) + "\t" + std::to_string(spec.expert) + "\t";
    for (size_t i = 0; i < spec.params.size(); ++i) text += (i ? "," : "") + spec.params[i].name;
    text += "\n";
  }
  const int world = misc.size();
  const int eps = ep ? ep->size() : 1;
  MOEZERO_CHECK(world % eps == 0 && (!ep || ep->rank() == misc.rank() % eps),
                "group name exchange: EP group rank ", ep ? ep->rank() : 0, " of ", eps,
                " for world rank ", misc.rank(), " of ", world);
  const std::vector<std::string> texts =
      eps == 1 ? std::vector<std::string>{text} : all_gather_strings(device, stream, *ep, text);
  // Ranks r and r + eps hold the same groups: one list per EP position (at 1,024 ranks a
  // list per rank was 1,024 copies of ~300 groups' names on every present rank).
  world_ = world;
  groups_.resize(static_cast<size_t>(eps));
  for (int r = 0; r < eps; ++r)
    for (const std::string& line : split(texts[static_cast<size_t>(r)], '\n')) {
      const std::vector<std::string> f = split(line, '\t');
      MOEZERO_CHECK(f.size() >= 3, "group name exchange: bad line '", line, "' from rank ", r);
      GroupInfo gi;
      gi.name = f[0];
      gi.layer = std::stoi(f[1]);
      gi.expert = std::stoi(f[2]);
      if (f.size() > 3) gi.params = split(f[3], ',');
      groups_[static_cast<size_t>(r)].push_back(std::move(gi));
    }
}

GradNorms GradHealth::norms(const StepResult& r) const {
  GradNorms out;
  std::map<std::string, double> group_sq;  // every rank holding a group adds its shard
  out.shards.resize(static_cast<size_t>(world_));
  for (size_t rank = 0; rank < out.shards.size(); ++rank) {
    const std::vector<GroupInfo>& groups = groups_of(static_cast<int>(rank));
    for (size_t g = 0; g < groups.size(); ++g) {
      const double sq = r.shard_sq[rank * static_cast<size_t>(r.shard_sq_slots) + g];
      out.shards[rank].emplace_back(groups[g].name, std::sqrt(sq));
      group_sq[groups[g].name] += sq;
    }
  }
  double total = 0.0;
  for (const auto& [name, sq] : group_sq) {
    out.groups.emplace_back(name, std::sqrt(sq));
    total += sq;
  }
  out.global = std::sqrt(total);
  return out;
}

std::optional<NonFiniteReport> GradHealth::agree_nonfinite(const StepResult& r, int64_t step) {
  std::vector<int64_t> mine(kReportWords, 0);
  if (r.nonfinite) {
    const NonFiniteGrad& f = *r.nonfinite;
    mine = {1, f.group, f.param, f.index, f.kind, f.micro_batch, f.order, f.count};
  }
  const std::vector<int64_t> all =
      misc_.size() > 1 ? all_gather_words(device_, stream_, misc_, mine) : mine;
  std::optional<NonFiniteReport> out;
  int64_t best_mb = 0, best_order = 0;
  std::vector<int> ranks;
  for (int rank = 0; rank < misc_.size(); ++rank) {
    const int64_t* w = all.data() + static_cast<size_t>(rank) * kReportWords;
    if (w[0] == 0) continue;
    ranks.push_back(rank);
    if (out && (w[5] > best_mb || (w[5] == best_mb && w[6] >= best_order))) continue;
    best_mb = w[5];
    best_order = w[6];
    const GroupInfo& gi = groups_of(rank).at(static_cast<size_t>(w[1]));
    NonFiniteReport rep;
    rep.rank = rank;
    rep.group = gi.name;
    rep.layer = gi.layer;
    rep.expert = gi.expert;
    if (w[2] >= 0 && static_cast<size_t>(w[2]) < gi.params.size()) {
      rep.param = gi.params[static_cast<size_t>(w[2])];
      rep.tensor = short_param_name(rep.param);
    } else {
      rep.tensor = rep.param = "(padding)";
    }
    rep.index = w[3];
    rep.value = kind_text(w[4]);
    rep.step = step;
    rep.micro_batch = w[5];
    rep.count = w[7];
    out = rep;
  }
  if (out) out->ranks = ranks;
  return out;
}

std::string nonfinite_message(const std::optional<NonFiniteReport>& rep, int64_t step, double loss,
                              bool check_finite, NonFinitePolicy policy) {
  std::ostringstream os;
  os << "non-finite gradient norm at step " << step << " (loss " << loss << "): ";
  if (rep) {
    os << "first non-finite gradient value " << rep->value << " on rank " << rep->rank << ", group "
       << rep->group;
    if (rep->layer >= 0 || rep->expert >= 0) {
      os << " (";
      if (rep->layer >= 0) os << "layer " << rep->layer;
      if (rep->expert >= 0) os << (rep->layer >= 0 ? ", " : "") << "expert " << rep->expert;
      os << ")";
    }
    os << ", tensor " << rep->tensor << " (" << rep->param << ") element " << rep->index
       << ", micro-batch " << rep->micro_batch << "; " << rep->count
       << " non-finite value(s) in that gradient; found in rank " << rep->rank
       << "'s own gradient before the reduction; ranks with non-finite gradients:";
    for (int r : rep->ranks) os << " " << r;
  } else if (check_finite) {
    os << "every gradient value was finite before the reduction (the reduction or the sum of "
          "squares overflowed)";
  } else {
    os << "profile.check_finite is off (turn it on to locate the first non-finite value)";
  }
  if (policy == NonFinitePolicy::Stop)
    os << ". train.on_nonfinite = stop: parameters and optimizer state were not updated.";
  else
    os << ". train.on_nonfinite = skip: the step was skipped, parameters and optimizer state "
          "are unchanged.";
  return os.str();
}

void add_health_json(const std::optional<GradNorms>& norms,
                     const std::optional<NonFiniteReport>& nonfinite, nlohmann::json& j) {
  // NaN and Inf norms are written as null (JSON has no such numbers).
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  if (norms) {
    nlohmann::json groups = nlohmann::json::object();
    for (const auto& [name, v] : norms->groups) groups[name] = num(v);
    j["grad_norms"] = {{"global", num(norms->global)}, {"groups", groups}};
    for (size_t r = 0; r < norms->shards.size() && r < j["ranks"].size(); ++r) {
      nlohmann::json shards = nlohmann::json::object();
      for (const auto& [name, v] : norms->shards[r]) shards[name] = num(v);
      j["ranks"][r]["shard_grad_norms"] = shards;
    }
  }
  if (nonfinite) {
    const NonFiniteReport& n = *nonfinite;
    auto opt_int = [](int v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(); };
    j["nonfinite"] = {{"rank", n.rank},
                      {"group", n.group},
                      {"layer", opt_int(n.layer)},
                      {"expert", opt_int(n.expert)},
                      {"tensor", n.tensor},
                      {"param", n.param},
                      {"index", n.index},
                      {"value", n.value},
                      {"step", n.step},
                      {"micro_batch", n.micro_batch},
                      {"count", n.count},
                      {"ranks", n.ranks}};
  }
}

}  // namespace moezero::train
