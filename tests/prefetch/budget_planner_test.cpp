// tests/prefetch/budget_planner_test.cpp — the value policy's densities (reuse probability,
// distance to the next use, re-gather cost, quantised wire bytes, latency), knapsack-greedy
// admission, two cases where lfu and value disagree (value keeps what saves more link time, and
// what is needed sooner), and determinism (the same inputs, in any order, give the same
// decision), also through ShardCache with eviction=value.
#include "prefetch/budget_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "core/error.h"
#include "prefetch/shard_cache.h"

namespace moezero::prefetch {
namespace {

using Ids = std::vector<int>;

StepClock clock_at(int layers, int64_t micro_batches, int64_t micro_batch, int phase) {
  StepClock c;
  c.layers = layers;
  c.micro_batches = micro_batches;
  c.micro_batch = micro_batch;
  c.phase = phase;
  return c;
}

// Its layer's forward still to come (forward_done false) or passed.
KeepInputs at_layer(int layer, double p, uint64_t bytes, bool forward_done) {
  KeepInputs in;
  in.p = p;
  in.layer = layer;
  in.next = NextUse::Forward;
  in.forward_done = forward_done;
  in.bytes = bytes;
  in.wire_bytes = bytes;
  return in;
}

KeepInputs pending_backward(int layer, double p, uint64_t bytes) {
  KeepInputs in = at_layer(layer, p, bytes, true);
  in.next = NextUse::Backward;
  return in;
}

TEST(BudgetPlanner, ReuseProbability) {
  const StepClock first = clock_at(2, 3, 0, 0);  // 2 layers, 3 micro-batches: the first phase
  EXPECT_EQ(reuse_probability(at_layer(1, 0.5, 8, false), first), 0.875);  // 3 forwards left
  EXPECT_EQ(reuse_probability(at_layer(1, 0.5, 8, true), first), 0.75);    // 2
  EXPECT_EQ(reuse_probability(at_layer(1, 0.0, 8, false), first), 0.0);
  EXPECT_EQ(reuse_probability(at_layer(1, 1.0, 8, true), first), 1.0);
  const StepClock last = clock_at(2, 3, 2, 3);  // the last micro-batch's last phase
  EXPECT_EQ(reuse_probability(at_layer(0, 0.9, 8, true), last), 0.0);  // its last use is behind it
  EXPECT_EQ(reuse_probability(pending_backward(0, 0.01, 8), last), 1.0);  // certain, whatever p
  EXPECT_THROW(reuse_probability(at_layer(0, 1.5, 8, true), last), Error);
  EXPECT_THROW(reuse_probability(at_layer(2, 0.5, 8, true), last), Error);  // no layer 2
  EXPECT_THROW(reuse_probability(at_layer(0, 0.5, 8, true), clock_at(2, 3, 3, 0)), Error);
  EXPECT_THROW(reuse_probability(at_layer(0, 0.5, 8, true), clock_at(2, 3, 0, 4)), Error);
}

// Belady's rule with probabilities: what is needed sooner is worth more per byte kept.
TEST(BudgetPlanner, SoonerUsesWeighMore) {
  const StepClock c = clock_at(2, 2, 0, 1);  // forward of layer 1 (phase 1) of micro-batch 0
  EXPECT_EQ(soon_weight(pending_backward(1, 0.2, 8), c), 1.0 / 2);  // its backward: phase 2
  EXPECT_EQ(soon_weight(pending_backward(0, 0.2, 8), c), 1.0 / 3);  // phase 3
  // Layer 0's forward has passed: its next chance is micro-batch 1's (phase 4).
  EXPECT_EQ(soon_weight(at_layer(0, 1.0, 8, true), c), 1.0 / 4);
  EXPECT_EQ(soon_weight(at_layer(0, 0.5, 8, true), c), 0.5 / 4);
  // Layer 1's forward is now (routing not known yet): p now, else micro-batch 1's (phase 5).
  EXPECT_EQ(soon_weight(at_layer(1, 0.5, 8, false), c), 0.5 / 1 + 0.25 / 5);
  EXPECT_EQ(soon_weight(at_layer(1, 0.5, 8, true), clock_at(2, 2, 1, 1)), 0.0);  // none left
}

TEST(BudgetPlanner, RegatherCostAndDensity) {
  const PrefetchCosts none;
  EXPECT_EQ(regather_ns(1000, none), 1000.0);           // no link model: bytes stand for time
  const PrefetchCosts link = link_costs(8.0, 20.0, 4);  // 8 Gbit/s, 20 us per step, 4 ranks
  EXPECT_DOUBLE_EQ(regather_ns(1000, link), 3 * 20e3 + 1000 * 0.75 * 8 / 8.0);

  const StepClock c = clock_at(2, 2, 0, 1);
  EXPECT_DOUBLE_EQ(keep_density(pending_backward(1, 0.2, 1000), c, none), 0.5);
  EXPECT_DOUBLE_EQ(keep_density(pending_backward(1, 0.2, 1000), c, link),
                   0.5 * regather_ns(1000, link) / 1000);
  // Quantised wire bytes (int8, about a quarter of fp32): keeping saves less per byte.
  KeepInputs quantised = pending_backward(1, 0.2, 1000);
  quantised.wire_bytes = 260;
  EXPECT_LT(keep_density(quantised, c, link),
            keep_density(pending_backward(1, 0.2, 1000), c, link));
  // Per-gather latency: a small group saves more link time per byte than a large one.
  EXPECT_GT(keep_density(pending_backward(1, 0.2, 1000), c, link),
            keep_density(pending_backward(1, 0.2, 100000), c, link));
  EXPECT_EQ(keep_density(at_layer(1, 0.5, 1000, true), clock_at(2, 2, 1, 1), link), 0.0);
  EXPECT_THROW(keep_density(pending_backward(1, 0.2, 0), c, link), Error);
}

TEST(BudgetPlanner, AdmissionIsKnapsackGreedy) {
  // Worthless: refused even with room.
  EXPECT_FALSE(plan_admission({1, 10, 0.0, 5}, {}, 100).admit);
  // Fits: admitted, nothing evicted.
  KeepDecision d = plan_admission({1, 10, 0.1, 5}, {}, 10);
  EXPECT_TRUE(d.admit);
  EXPECT_TRUE(d.victims.empty());
  // Victims lowest density first (then older, then lower id) until it fits.
  const std::vector<KeepEntry> resident = {
      {7, 10, 0.5, 1}, {3, 10, 0.2, 4}, {4, 10, 0.2, 2}, {9, 10, 0.2, 2}, {5, 10, 0.9, 3}};
  d = plan_admission({1, 25, 0.6, 6}, resident, 5);
  EXPECT_TRUE(d.admit);
  EXPECT_EQ(d.victims, (Ids{4, 9}));  // 0.2 at clock 2 (ids 4, 9); 3 (clock 4) is not needed
  // Refused when the victims would have saved more than it does: nothing evicted.
  d = plan_admission({1, 25, 0.15, 6}, resident, 5);  // 3.75 < 2 + 2
  EXPECT_FALSE(d.admit);
  EXPECT_TRUE(d.victims.empty());
  // Equal totals: admitted (the newer entry, as lfu's recency would).
  d = plan_admission({1, 20, 0.2, 6}, resident, 0);
  EXPECT_TRUE(d.admit);
  EXPECT_EQ(d.victims, (Ids{4, 9}));
  // Not enough evictable bytes.
  EXPECT_FALSE(plan_admission({1, 100, 9.0, 6}, resident, 0).admit);
}

// lfu and value disagree (1): a tight budget holds a small group reused often (p 0.6); a large
// one reused less often (p 0.5) is offered, both next needed at the same forward. lfu refuses it
// (colder). value admits it: kept, it saves a gather of 100 bytes with probability 0.5 against
// the small one's 20 bytes with probability 0.6.
TEST(BudgetPlanner, ValueKeepsWhatSavesMoreBytesWhereLfuDoesNot) {
  const PrefetchCosts none;
  const StepClock c = clock_at(2, 2, 0, 3);  // micro-batch 0's last phase: one forward left
  const KeepInputs small = at_layer(0, 0.6, 20, true), large = at_layer(1, 0.5, 100, true);
  ShardCache lfu(100, EvictionPolicy::Lfu);
  ASSERT_TRUE(lfu.admit(1, 20, 0, small.p).admitted);
  EXPECT_FALSE(lfu.admit(2, 100, 0, large.p).admitted);
  EXPECT_EQ(lfu.resident(), (Ids{1}));

  ShardCache value(100, EvictionPolicy::Value);
  EXPECT_EQ(value.score_kind(), KeepScore::Density);
  EXPECT_EQ(lfu.score_kind(), KeepScore::Probability);
  ASSERT_TRUE(value.admit(1, 20, 0, keep_density(small, c, none)).admitted);
  const CacheAdmit a = value.admit(2, 100, 0, keep_density(large, c, none));
  EXPECT_TRUE(a.admitted);
  EXPECT_EQ(a.evicted, (Ids{1}));
  EXPECT_EQ(value.resident(), (Ids{2}));
}

// lfu and value disagree (2): a backward two phases away (certain) against a likelier expert of
// another layer whose next chance is the next micro-batch's forward: lfu ranks by p alone and
// keeps the latter; value keeps what is needed sooner, as Belady's rule does.
TEST(BudgetPlanner, ValueKeepsWhatIsNeededSoonerWhereLfuDoesNot) {
  const PrefetchCosts none;
  const StepClock c = clock_at(2, 2, 0, 1);
  const KeepInputs pending = pending_backward(0, 0.3, 10), hot = at_layer(0, 0.9, 10, true);
  EXPECT_GT(keep_density(pending, c, none), keep_density(hot, c, none));
  ShardCache value(10, EvictionPolicy::Value);
  ASSERT_TRUE(value.admit(5, 10, 0, keep_density(hot, c, none)).admitted);
  EXPECT_EQ(value.admit(6, 10, 0, keep_density(pending, c, none)).evicted, (Ids{5}));
  ShardCache lfu(10, EvictionPolicy::Lfu);
  ASSERT_TRUE(lfu.admit(5, 10, 0, hot.p).admitted);
  EXPECT_FALSE(lfu.admit(6, 10, 0, pending.p).admitted);
}

TEST(BudgetPlanner, SameInputsSameDecisionInAnyOrder) {
  const unsigned seed = 20261205;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<KeepEntry> resident;
    uint64_t resident_bytes = 0;
    for (int g = 0; g < 12; ++g) {
      if (rng() % 2) continue;
      const KeepEntry e{g, 1 + rng() % 50, static_cast<double>(rng() % 4) / 4.0, rng() % 6};
      resident.push_back(e);
      resident_bytes += e.bytes;
    }
    const KeepEntry newcomer{99, 1 + rng() % 120, static_cast<double>(rng() % 5) / 4.0, 7};
    const uint64_t capacity = 200;
    const uint64_t free_bytes = capacity > resident_bytes ? capacity - resident_bytes : 0;
    const KeepDecision a = plan_admission(newcomer, resident, free_bytes);
    std::shuffle(resident.begin(), resident.end(), rng);
    const KeepDecision b = plan_admission(newcomer, resident, free_bytes);
    EXPECT_EQ(a.admit, b.admit) << "trial " << trial;
    EXPECT_EQ(a.victims, b.victims) << "trial " << trial;
    if (!a.admit) {
      EXPECT_TRUE(a.victims.empty());
      continue;
    }
    // Admitted: it fits after the victims leave, and they saved no more than it will.
    uint64_t freed = 0;
    double lost = 0.0;
    for (int v : a.victims) {
      const auto it = std::find_if(resident.begin(), resident.end(),
                                   [v](const KeepEntry& e) { return e.group == v; });
      ASSERT_NE(it, resident.end());
      freed += it->bytes;
      lost += it->density * static_cast<double>(it->bytes);
    }
    EXPECT_LE(newcomer.bytes, free_bytes + freed) << "trial " << trial;
    EXPECT_LE(lost, newcomer.density * static_cast<double>(newcomer.bytes)) << "trial " << trial;
    EXPECT_GT(newcomer.density, 0.0) << "trial " << trial;
  }
}

TEST(BudgetPlanner, ShardCacheValueEvictsOnRequestAndKeepsPins) {
  ShardCache c(100, EvictionPolicy::Value);
  ASSERT_TRUE(c.admit(1, 40, 0, 2.0).admitted);
  ASSERT_TRUE(c.admit(2, 40, 0, 1.0).admitted);
  EXPECT_FALSE(c.admit(3, 10, 0, 0.0).admitted);  // worthless: refused with room left
  EXPECT_EQ(c.eviction_order(), (Ids{2, 1}));
  c.pin(2);
  EXPECT_THROW(c.evict(2), Error);
  EXPECT_EQ(c.admit(4, 60, 0, 3.0).evicted, (Ids{1}));  // the pinned entry stays
  c.unpin(2);
  c.evict(2);
  EXPECT_EQ(c.resident(), (Ids{4}));
  EXPECT_EQ(c.counters().evictions, 2u);
  EXPECT_EQ(c.counters().bytes_resident, 60u);
  EXPECT_THROW(c.evict(2), Error);
  EXPECT_THROW(c.admit(5, 10, 0, -1.0), Error);
}

}  // namespace
}  // namespace moezero::prefetch
