// prefetch/pregate.cpp — PregateModel (see the header).
#include "prefetch/pregate.h"

#include "core/error.h"

namespace moezero::prefetch {

PregateModel::PregateModel(int layers, int experts, double ema_decay)
    : layers_(layers), experts_(experts), decay_(ema_decay) {
  MOEZERO_CHECK(layers >= 1 && experts >= 1, "PregateModel: ", layers, " layers of ", experts,
                " experts");
  MOEZERO_CHECK(ema_decay >= 0.0 && ema_decay < 1.0, "PregateModel: ema_decay ", ema_decay,
                " is outside [0, 1)");
  const size_t L = static_cast<size_t>(layers);
  gate_group_.assign(L, -1);
  counts_mb_.assign(L, -1);
  counts_.assign(L, std::vector<float>(static_cast<size_t>(experts), 0.0f));
  hit_.assign(L, 0.5);
  miss_.assign(L, 0.5);
}

void PregateModel::check_layer(int layer, const char* what) const {
  MOEZERO_CHECK(layer >= 0 && layer < layers_, "PregateModel::", what, ": layer ", layer,
                " out of [0, ", layers_, ")");
}

void PregateModel::set_gate_group(int layer, int group) {
  check_layer(layer, "set_gate_group");
  gate_group_[static_cast<size_t>(layer)] = group;
}

int PregateModel::gate_group(int layer) const {
  check_layer(layer, "gate_group");
  return gate_group_[static_cast<size_t>(layer)];
}

void PregateModel::set_counts(int layer, int64_t micro_batch, std::span<const float> counts) {
  check_layer(layer, "set_counts");
  MOEZERO_CHECK(layer >= 1, "PregateModel::set_counts: layer 0 has no layer before it");
  MOEZERO_CHECK(static_cast<int>(counts.size()) == experts_,
                "PregateModel::set_counts: ", counts.size(), " counts for ", experts_, " experts");
  counts_[static_cast<size_t>(layer)].assign(counts.begin(), counts.end());
  counts_mb_[static_cast<size_t>(layer)] = micro_batch;
}

const std::vector<float>* PregateModel::counts(int layer, int64_t micro_batch) const {
  check_layer(layer, "counts");
  const size_t l = static_cast<size_t>(layer);
  return counts_mb_[l] == micro_batch && micro_batch >= 0 ? &counts_[l] : nullptr;
}

PregateModel::Outcome PregateModel::observe(int layer, int64_t micro_batch,
                                            std::span<const float> kept) {
  const std::vector<float>* c = counts(layer, micro_batch);
  Outcome out;
  if (c == nullptr) return out;
  MOEZERO_CHECK(static_cast<int>(kept.size()) == experts_, "PregateModel::observe: ", kept.size(),
                " outcomes for ", experts_, " experts");
  const size_t l = static_cast<size_t>(layer);
  for (size_t e = 0; e < kept.size(); ++e) {  // expert order: the same arithmetic on every rank
    const bool predicted = (*c)[e] > 0.5f, active = kept[e] > 0.5f;
    double& rate = predicted ? hit_[l] : miss_[l];
    rate = decay_ * rate + (1.0 - decay_) * (active ? 1.0 : 0.0);
    out.predicted += predicted;
    out.hits += predicted && active;
    out.active += active;
  }
  counts_mb_[l] = -1;  // used: a later pass of the same micro-batch (evaluation) has none
  return out;
}

double PregateModel::probability(int layer, int expert, int64_t micro_batch) const {
  const std::vector<float>* c = counts(layer, micro_batch);
  if (c == nullptr) return -1.0;
  MOEZERO_CHECK(expert >= 0 && expert < experts_, "PregateModel::probability: expert ", expert,
                " out of [0, ", experts_, ")");
  const size_t l = static_cast<size_t>(layer);
  return (*c)[static_cast<size_t>(expert)] > 0.5f ? hit_[l] : miss_[l];
}

double PregateModel::hit_rate(int layer) const {
  check_layer(layer, "hit_rate");
  return hit_[static_cast<size_t>(layer)];
}

double PregateModel::miss_rate(int layer) const {
  check_layer(layer, "miss_rate");
  return miss_[static_cast<size_t>(layer)];
}

}  // namespace moezero::prefetch
