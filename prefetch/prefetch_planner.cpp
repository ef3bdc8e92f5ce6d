// prefetch/prefetch_planner.cpp — PrefetchPlanner (see prefetch_planner.h).
#include "prefetch/prefetch_planner.h"

#include <utility>

#include "core/error.h"

namespace moezero::prefetch {

PrefetchPlanner::PrefetchPlanner(PrefetchConfig cfg, const FrequencyModel* model,
                                 PrefetchCosts costs)
    : cfg_(std::move(cfg)), policy_(&prefetch_policy(cfg_.policy)), model_(model), costs_(costs) {}

void PrefetchPlanner::dense_acquired(const std::string& channel, int group) {
  // Once this step leaves the channel's recorded order, nothing is prefetched by order there
  // until the step ends.
  orders_[channel].on_acquire(group);
}

void PrefetchPlanner::each_dense_ahead(
    const std::function<void(std::span<const int> next)>& next) const {
  for (const auto& [channel, o] : orders_) {       // key order: the same on every rank
    const std::span<const int> ahead = o.ahead();  // empty unless replaying
    if (!ahead.empty()) next(ahead);
  }
}

void PrefetchPlanner::end_step() {
  for (auto& [channel, o] : orders_) o.end_step();  // (re-)learn each channel's order
}

std::vector<std::pair<std::string, std::vector<int>>> PrefetchPlanner::dense_orders() const {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  for (const auto& [channel, o] : orders_) out.emplace_back(channel, o.recorded());
  return out;
}

void PrefetchPlanner::set_dense_orders(
    const std::vector<std::pair<std::string, std::vector<int>>>& orders) {
  orders_.clear();
  for (const auto& [channel, ids] : orders) orders_[channel] = FetchOrder::restored(ids);
}

bool PrefetchPlanner::plans_experts() const {
  return model_ && policy_->plans_ahead() && cfg_.lookahead_layers > 0;
}

std::vector<int> PrefetchPlanner::expert_plan(const ExpertPlanQuery& q, PlanNotes* notes) const {
  if (notes != nullptr) *notes = PlanNotes{};
  if (!plans_experts()) return {};
  return plan_prefetch(cfg_, *model_, q.layer, q.candidates, q.bytes, q.prev, costs_, notes,
                       q.given_p);
}

void PrefetchPlanner::set_free_link_ns(double ns) {
  MOEZERO_CHECK(ns >= 0.0, "PrefetchPlanner::set_free_link_ns: ", ns, " ns");
  costs_.free_link_ns = ns;
}

bool PrefetchPlanner::measures_idle_link() const {
  return plans_experts() && policy_->reads_free_link(cfg_, costs_);
}

bool PrefetchPlanner::exact_backward() const { return policy_->exact_backward(); }

std::vector<int> PrefetchPlanner::backward_order(std::span<const int> local,
                                                 std::span<const char> forward_active) const {
  return prefetch::backward_order(local, forward_active);
}

}  // namespace moezero::prefetch
