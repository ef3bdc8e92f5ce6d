// prefetch/budget_planner.cpp — the value policy's densities and knapsack-greedy admission
// (see budget_planner.h).
#include "prefetch/budget_planner.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace moezero::prefetch {

namespace {

void check(const KeepInputs& in, const StepClock& c) {
  MOEZERO_CHECK(in.p >= 0.0 && in.p <= 1.0, "budget planner: p ", in.p, " outside [0, 1]");
  MOEZERO_CHECK(c.layers >= 1 && c.micro_batches >= 1 && c.micro_batch >= 0 &&
                    c.micro_batch < c.micro_batches && c.phase >= 0 && c.phase < 2 * c.layers,
                "budget planner: bad step clock (layers ", c.layers, ", micro-batch ",
                c.micro_batch, " of ", c.micro_batches, ", phase ", c.phase, ")");
  MOEZERO_CHECK(in.layer >= 0 && in.layer < c.layers, "budget planner: layer ", in.layer,
                " outside [0, ", c.layers, ")");
}

// The first micro-batch whose forward of the group's layer is still to come.
int64_t first_forward(const KeepInputs& in, const StepClock& c) {
  return in.forward_done ? c.micro_batch + 1 : c.micro_batch;
}

}  // namespace

double reuse_probability(const KeepInputs& in, const StepClock& clock) {
  check(in, clock);
  if (in.next == NextUse::Backward) return 1.0;
  double miss_all = 1.0;  // (1 - p)^k as a product: the same bits wherever it runs
  for (int64_t m = first_forward(in, clock); m < clock.micro_batches; ++m) miss_all *= 1.0 - in.p;
  return 1.0 - miss_all;
}

double soon_weight(const KeepInputs& in, const StepClock& clock) {
  check(in, clock);
  const int64_t now = clock.now();
  const auto discount = [now](int64_t at) {
    return 1.0 / static_cast<double>(1 + std::max<int64_t>(0, at - now));
  };
  if (in.next == NextUse::Backward) return discount(clock.backward_at(clock.micro_batch, in.layer));
  double w = 0.0, none_yet = 1.0;  // none_yet: (1 - p)^k, no use in the k forwards before
  for (int64_t m = first_forward(in, clock); m < clock.micro_batches; ++m) {
    w += none_yet * in.p * discount(clock.forward_at(m, in.layer));
    none_yet *= 1.0 - in.p;
  }
  return w;
}

double regather_ns(uint64_t wire_bytes, const PrefetchCosts& costs) {
  if (!costs.known()) return static_cast<double>(wire_bytes);
  return costs.gather_latency_ns + static_cast<double>(wire_bytes) * costs.link_ns_per_byte;
}

double keep_density(const KeepInputs& in, const StepClock& clock, const PrefetchCosts& costs) {
  MOEZERO_CHECK(in.bytes > 0, "keep_density: bytes must be > 0");
  const double d =
      soon_weight(in, clock) * regather_ns(in.wire_bytes, costs) / static_cast<double>(in.bytes);
  MOEZERO_CHECK(std::isfinite(d) && d >= 0.0, "keep_density: ", d, " is not a finite value >= 0");
  return d;
}

bool evicted_before(const KeepEntry& a, const KeepEntry& b) {
  if (a.density != b.density) return a.density < b.density;
  if (a.last_use != b.last_use) return a.last_use < b.last_use;
  return a.group < b.group;
}

KeepDecision plan_admission(const KeepEntry& newcomer, std::span<const KeepEntry> evictable,
                            uint64_t free_bytes) {
  KeepDecision d;
  if (!(newcomer.density > 0.0)) return d;  // worthless: freed after use
  if (newcomer.bytes <= free_bytes) {
    d.admit = true;
    return d;
  }
  std::vector<KeepEntry> order(evictable.begin(), evictable.end());
  std::sort(order.begin(), order.end(), evicted_before);
  const uint64_t need_bytes = newcomer.bytes - free_bytes;
  uint64_t freed_bytes = 0;
  double lost = 0.0;  // link time the victims would have saved
  for (const KeepEntry& e : order) {
    if (freed_bytes >= need_bytes) break;
    d.victims.push_back(e.group);
    freed_bytes += e.bytes;
    lost += e.density * static_cast<double>(e.bytes);
  }
  const double gained = newcomer.density * static_cast<double>(newcomer.bytes);
  if (freed_bytes < need_bytes || lost > gained) {
    d.victims.clear();
    return d;
  }
  d.admit = true;
  return d;
}

}  // namespace moezero::prefetch
