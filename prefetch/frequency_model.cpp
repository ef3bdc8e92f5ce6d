// prefetch/frequency_model.cpp — EMA updates, predictions and the JSON checkpoint form.
// Every update is a fixed sequence of double operations over arrays in index order, so the same
// inputs give the same bits on every rank.
#include "prefetch/frequency_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace moezero::prefetch {

namespace {

constexpr const char* kFormat = "moezero.frequency_model";
constexpr int kFormatVersion = 1;

inline double ema(double d, double x, double v) { return d * x + (1.0 - d) * v; }

}  // namespace

FrequencyModel::FrequencyModel(int layers, int experts, double ema_decay)
    : layers_(layers), experts_(experts), decay_(ema_decay) {
  MOEZERO_CHECK(layers >= 1, "FrequencyModel: layers must be >= 1, got ", layers);
  MOEZERO_CHECK(experts >= 1, "FrequencyModel: experts must be >= 1, got ", experts);
  MOEZERO_CHECK(ema_decay >= 0.0 && ema_decay < 1.0,
                "FrequencyModel: ema_decay must be in [0, 1), got ", ema_decay);
  const size_t le = size_t(layers) * size_t(experts);
  updates_.assign(size_t(layers), 0);
  share_.assign(le, 1.0 / double(experts));
  prob_.assign(le, 1.0);
  joint_.assign(le * size_t(experts), 0.0);
  given_.assign(le, 0.0);
  last_active_.assign(size_t(layers), std::vector<char>(size_t(experts), 0));
  confident_priced_.assign(size_t(layers), 0.0);
  confident_active_.assign(size_t(layers), 0.0);
}

void FrequencyModel::check_layer(int layer, const char* what) const {
  MOEZERO_CHECK(layer >= 0 && layer < layers_, "FrequencyModel::", what, ": layer ", layer,
                " out of range [0, ", layers_, ")");
}

void FrequencyModel::check_expert(int expert, const char* what) const {
  MOEZERO_CHECK(expert >= 0 && expert < experts_, "FrequencyModel::", what, ": expert ", expert,
                " out of range [0, ", experts_, ")");
}

void FrequencyModel::update(int layer, std::span<const int64_t> counts) {
  check_layer(layer, "update");
  MOEZERO_CHECK(counts.size() == size_t(experts_), "FrequencyModel::update: layer ", layer,
                ": expected ", experts_, " counts, got ", counts.size());
  // Order: layer l's n-th update needs layer l-1's n-th; layer 0's needs the last layer's previous.
  const int64_t n = updates_[size_t(layer)];
  if (layer > 0) {
    MOEZERO_CHECK(updates_[size_t(layer - 1)] == n + 1, "FrequencyModel::update: layer ", layer,
                  " updated out of order (layer ", layer - 1, " has ", updates_[size_t(layer - 1)],
                  " updates, layer ", layer, " has ", n, "); update layers 0..L-1 in order");
  } else {
    MOEZERO_CHECK(updates_[size_t(layers_ - 1)] == n,
                  "FrequencyModel::update: layer 0 updated "
                  "again before layer ",
                  layers_ - 1, " finished the micro-batch");
  }
  int64_t total = 0;
  for (const int64_t c : counts) {
    MOEZERO_CHECK(c >= 0, "FrequencyModel::update: layer ", layer, ": negative count ", c);
    total += c;
  }
  const double d = decay_;
  if (n > 0) {  // calibration of the confident guesses, priced before this update (as the plan
                // was); the first update's prices are the cold prior's, not guesses
    const std::vector<char>* prev = layer > 0 ? &last_active_[size_t(layer - 1)] : nullptr;
    double claimed = 0.0, came = 0.0;
    for (int e = 0; e < experts_; ++e) {
      const double p = priced(layer, e, prev);
      if (p < 0.5) continue;
      claimed += p;
      came += counts[size_t(e)] > 0 ? 1.0 : 0.0;
    }
    confident_priced_[size_t(layer)] = d * confident_priced_[size_t(layer)] + claimed;
    confident_active_[size_t(layer)] = d * confident_active_[size_t(layer)] + came;
  }
  std::vector<char>& act = last_active_[size_t(layer)];
  for (int e = 0; e < experts_; ++e) {
    const int64_t c = counts[size_t(e)];
    const double frac = total > 0 ? double(c) / double(total) : 0.0;
    share_[at(layer, e)] = ema(d, share_[at(layer, e)], frac);
    act[size_t(e)] = c > 0 ? 1 : 0;
    prob_[at(layer, e)] = ema(d, prob_[at(layer, e)], c > 0 ? 1.0 : 0.0);
  }
  if (layer > 0) {
    const std::vector<char>& prev = last_active_[size_t(layer - 1)];
    // Only the rows of predecessors active in this micro-batch move (EMA over i's occurrences).
    for (int i = 0; i < experts_; ++i) {
      if (!prev[size_t(i)]) continue;
      given_[at(layer, i)] = ema(d, given_[at(layer, i)], 1.0);
      for (int j = 0; j < experts_; ++j) {
        joint_[at3(layer, i, j)] = ema(d, joint_[at3(layer, i, j)], act[size_t(j)] ? 1.0 : 0.0);
      }
    }
  }
  updates_[size_t(layer)] = n + 1;
}

int64_t FrequencyModel::updates(int layer) const {
  check_layer(layer, "updates");
  return updates_[size_t(layer)];
}

double FrequencyModel::share(int layer, int expert) const {
  check_layer(layer, "share");
  check_expert(expert, "share");
  return share_[at(layer, expert)];
}

double FrequencyModel::probability(int layer, int expert) const {
  check_layer(layer, "probability");
  check_expert(expert, "probability");
  return prob_[at(layer, expert)];
}

double FrequencyModel::joint(int layer, int prev_expert, int expert) const {
  check_layer(layer, "joint");
  MOEZERO_CHECK(layer >= 1, "FrequencyModel::joint: layer 0 has no previous layer");
  check_expert(prev_expert, "joint");
  check_expert(expert, "joint");
  return joint_[at3(layer, prev_expert, expert)];
}

double FrequencyModel::given(int layer, int prev_expert) const {
  check_layer(layer, "given");
  MOEZERO_CHECK(layer >= 1, "FrequencyModel::given: layer 0 has no previous layer");
  check_expert(prev_expert, "given");
  return given_[at(layer, prev_expert)];
}

double FrequencyModel::conditional(int layer, int prev_expert, int expert) const {
  const double j = joint(layer, prev_expert, expert);
  const double g = given_[at(layer, prev_expert)];
  const double s = (1.0 - decay_) * kPriorObservations;
  const double marginal = prob_[at(layer, expert)];
  if (g + s <= 0.0) return marginal;  // unreachable for d < 1; keeps the division safe
  return (j + s * marginal) / (g + s);
}

double FrequencyModel::predicted(int layer, int expert,
                                 const std::vector<char>* prev_active) const {
  check_layer(layer, "predicted");
  check_expert(expert, "predicted");
  if (prev_active == nullptr || layer == 0) return prob_[at(layer, expert)];
  MOEZERO_CHECK(prev_active->size() == size_t(experts_),
                "FrequencyModel::predicted: prev_active "
                "has ",
                prev_active->size(), " flags, expected ", experts_);
  bool any = false;
  double best = 0.0;
  for (int i = 0; i < experts_; ++i) {
    if (!(*prev_active)[size_t(i)]) continue;
    best = std::max(best, conditional(layer, i, expert));
    any = true;
  }
  return any ? best : prob_[at(layer, expert)];
}

const std::vector<char>& FrequencyModel::last_active(int layer) const {
  check_layer(layer, "last_active");
  return last_active_[size_t(layer)];
}

double FrequencyModel::priced(int layer, int expert, const std::vector<char>* prev_active) const {
  return evidence(layer, std::min(predicted(layer, expert, prev_active), prob_[at(layer, expert)]));
}

double FrequencyModel::evidence(int layer, double p) const {
  check_layer(layer, "evidence");
  const int64_t n = updates_[size_t(layer)];
  if (n == 0) return 1.0;  // no evidence yet: the prior
  const double prior = std::pow(decay_, double(n));
  return std::clamp((p - prior) / (1.0 - prior), 0.0, 1.0);
}

double FrequencyModel::plan_calibration(int layer) const {
  check_layer(layer, "plan_calibration");
  return (confident_active_[size_t(layer)] + 1.0) / (confident_priced_[size_t(layer)] + 1.0);
}

// ---- JSON -------------------------------------------------------------------------------------

nlohmann::json FrequencyModel::to_json() const {
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = kFormatVersion;
  j["layers"] = layers_;
  j["experts"] = experts_;
  j["ema_decay"] = decay_;
  j["updates"] = updates_;
  j["share"] = share_;
  j["probability"] = prob_;
  j["joint"] = joint_;
  j["given"] = given_;
  nlohmann::json act = nlohmann::json::array();
  for (const auto& row : last_active_) {
    std::vector<int> r(row.begin(), row.end());
    act.push_back(r);
  }
  j["last_active"] = act;
  j["confident_priced"] = confident_priced_;
  j["confident_active"] = confident_active_;
  return j;
}

namespace {

const nlohmann::json& field(const nlohmann::json& j, const char* name) {
  MOEZERO_CHECK(j.is_object(), "frequency_model: expected a JSON object");
  const auto it = j.find(name);
  MOEZERO_CHECK(it != j.end(), "frequency_model.", name, ": missing");
  return *it;
}

int64_t int_field(const nlohmann::json& j, const char* name, int64_t lo, int64_t hi) {
  const nlohmann::json& v = field(j, name);
  MOEZERO_CHECK(v.is_number_integer(), "frequency_model.", name, ": expected an integer, got ",
                v.dump());
  const int64_t x = v.get<int64_t>();
  MOEZERO_CHECK(x >= lo && x <= hi, "frequency_model.", name, ": must be in [", lo, ", ", hi,
                "], got ", x);
  return x;
}

// A flat array of `n` numbers, each in [lo, hi] and finite.
std::vector<double> doubles_field(const nlohmann::json& j, const char* name, size_t n, double lo,
                                  double hi) {
  const nlohmann::json& v = field(j, name);
  MOEZERO_CHECK(v.is_array(), "frequency_model.", name, ": expected an array");
  MOEZERO_CHECK(v.size() == n, "frequency_model.", name, ": expected ", n, " values, got ",
                v.size());
  std::vector<double> out(n);
  for (size_t k = 0; k < n; ++k) {
    MOEZERO_CHECK(v[k].is_number(), "frequency_model.", name, "[", k, "]: expected a number, got ",
                  v[k].dump());
    const double x = v[k].get<double>();
    MOEZERO_CHECK(std::isfinite(x) && x >= lo && x <= hi, "frequency_model.", name, "[", k,
                  "]: must be in [", lo, ", ", hi, "], got ", x);
    out[k] = x;
  }
  return out;
}

}  // namespace

FrequencyModel FrequencyModel::from_json(const nlohmann::json& j) {
  const nlohmann::json& fmt = field(j, "format");
  MOEZERO_CHECK(fmt.is_string() && fmt.get<std::string>() == kFormat,
                "frequency_model.format: expected \"", kFormat, "\", got ", fmt.dump());
  int_field(j, "version", kFormatVersion, kFormatVersion);
  const int layers = int(int_field(j, "layers", 1, 1 << 20));
  const int experts = int(int_field(j, "experts", 1, 1 << 16));
  const nlohmann::json& dj = field(j, "ema_decay");
  MOEZERO_CHECK(dj.is_number(), "frequency_model.ema_decay: expected a number, got ", dj.dump());
  const double decay = dj.get<double>();
  MOEZERO_CHECK(decay >= 0.0 && decay < 1.0, "frequency_model.ema_decay: must be in [0, 1), got ",
                decay);
  FrequencyModel m(layers, experts, decay);
  const size_t L = size_t(layers), E = size_t(experts);

  const nlohmann::json& uj = field(j, "updates");
  MOEZERO_CHECK(uj.is_array() && uj.size() == L, "frequency_model.updates: expected an array of ",
                L, " integers");
  for (size_t l = 0; l < L; ++l) {
    MOEZERO_CHECK(uj[l].is_number_integer() && uj[l].get<int64_t>() >= 0,
                  "frequency_model.updates[", l, "]: expected an integer >= 0, got ", uj[l].dump());
    m.updates_[l] = uj[l].get<int64_t>();
  }
  // Between micro-batches every layer has n updates; mid-batch a prefix has n + 1.
  for (size_t l = 1; l < L; ++l) {
    MOEZERO_CHECK(m.updates_[l] == m.updates_[l - 1] || m.updates_[l] + 1 == m.updates_[l - 1],
                  "frequency_model.updates[", l, "]: ", m.updates_[l],
                  " is inconsistent with updates[", l - 1, "] = ", m.updates_[l - 1]);
  }
  MOEZERO_CHECK(m.updates_[0] <= m.updates_[L - 1] + 1,
                "frequency_model.updates[0]: ", m.updates_[0], " is inconsistent with updates[",
                L - 1, "]");
  m.share_ = doubles_field(j, "share", L * E, 0.0, 1.0);
  m.prob_ = doubles_field(j, "probability", L * E, 0.0, 1.0);
  m.joint_ = doubles_field(j, "joint", L * E * E, 0.0, 1.0);
  m.given_ = doubles_field(j, "given", L * E, 0.0, 1.0);

  const nlohmann::json& aj = field(j, "last_active");
  MOEZERO_CHECK(aj.is_array() && aj.size() == L, "frequency_model.last_active: expected ", L,
                " rows");
  for (size_t l = 0; l < L; ++l) {
    MOEZERO_CHECK(aj[l].is_array() && aj[l].size() == E, "frequency_model.last_active[", l,
                  "]: expected ", E, " flags");
    for (size_t e = 0; e < E; ++e) {
      const nlohmann::json& f = aj[l][e];
      MOEZERO_CHECK(f.is_number_integer() && (f.get<int>() == 0 || f.get<int>() == 1),
                    "frequency_model.last_active[", l, "][", e, "]: expected 0 or 1, got ",
                    f.dump());
      m.last_active_[l][e] = char(f.get<int>());
    }
  }
  // Added later: absent in older checkpoints (no evidence).
  const double big = 1e300;
  if (j.contains("confident_priced"))
    m.confident_priced_ = doubles_field(j, "confident_priced", L, 0.0, big);
  if (j.contains("confident_active"))
    m.confident_active_ = doubles_field(j, "confident_active", L, 0.0, big);
  return m;
}

void FrequencyModel::restore(const nlohmann::json& j) {
  FrequencyModel loaded = from_json(j);
  MOEZERO_CHECK(loaded.layers_ == layers_, "frequency_model.layers: checkpoint has ",
                loaded.layers_, ", this model has ", layers_);
  MOEZERO_CHECK(loaded.experts_ == experts_, "frequency_model.experts: checkpoint has ",
                loaded.experts_, ", this model has ", experts_);
  loaded.decay_ = decay_;
  *this = std::move(loaded);
}

}  // namespace moezero::prefetch
