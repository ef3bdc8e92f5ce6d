// tests/train/quantized_gradients_test.cpp — zero.quantized_gradients (ZeRO++ qgZ, zero/
// quantized_reduce.h) in training: examples/configs/tiny.json at world 4 as 2 nodes of 2 ranks
// (EP 2: the world's groups have 2 ranks per node, the EDP groups {0,2} and {1,3} one) trains
// within 1% of the unquantised losses with finite losses, and sends fewer bytes between the
// nodes; on one node nothing is quantised (the same losses, bit for bit).
#include <gtest/gtest.h>

#include <cmath>

#include "core/config.h"
#include "train/trainer.h"

namespace moezero::train {
namespace {

Config tiny4(bool quantized, int ranks_per_node, int steps) {
  return load_config(std::string(MOEZERO_SOURCE_DIR) + "/examples/configs/tiny.json",
                     {"parallel.world_size=4", "train.steps=" + std::to_string(steps),
                      "comm_emulation.ranks_per_node=" + std::to_string(ranks_per_node),
                      std::string("zero.quantized_gradients=") + (quantized ? "true" : "false")});
}

struct Totals {
  uint64_t inter = 0, intra = 0, wire = 0, scattered = 0;
};
Totals totals(const TrainResult& r) {
  Totals t;
  for (const StepLog& s : r.steps)
    for (const RankStepStats& k : s.ranks) {
      t.inter += k.inter_node_bytes;
      t.intra += k.intra_node_bytes;
      t.wire += k.reduce_wire_bytes;
      t.scattered += k.reduce_scattered_bytes;
    }
  return t;
}

// 20 steps: every step's loss finite and within 1% of the unquantised run's (int8 with one
// scale per 2048 elements perturbs each gradient element by at most half a step of its block,
// once per other node); fewer bytes between the nodes.
TEST(QuantizedGradients, TinyTrainsLikeFullPrecisionWithFewerInterNodeBytes) {
  const TrainResult ref = train(tiny4(false, 2, 20), {});
  const TrainResult q = train(tiny4(true, 2, 20), {});
  ASSERT_EQ(q.steps.size(), 20u);
  ASSERT_EQ(ref.steps.size(), 20u);
  double worst = 0;
  for (size_t s = 0; s < q.steps.size(); ++s) {
    ASSERT_TRUE(std::isfinite(q.steps[s].loss)) << "step " << s + 1;
    const double rel = std::abs(q.steps[s].loss - ref.steps[s].loss) / ref.steps[s].loss;
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 0.01) << "step " << s + 1 << ": " << q.steps[s].loss << " against "
                         << ref.steps[s].loss;
  }
  EXPECT_GT(worst, 0.0) << "quantised gradients left the losses unchanged: not quantised?";
  EXPECT_LT(q.steps.back().loss, q.steps.front().loss);  // it trains
  const Totals a = totals(ref), b = totals(q);
  // The same reduce-scatter input where the routing is the same (step 1: the same parameters);
  // later steps route differently, and experts no rank routes to are not reduced.
  EXPECT_EQ(q.steps[0].ranks[0].reduce_scattered_bytes,
            ref.steps[0].ranks[0].reduce_scattered_bytes);
  EXPECT_LT(b.wire, a.wire);
  EXPECT_LT(b.inter, a.inter);
  std::cout << "worst relative loss difference " << worst
            << "; inter-node bytes, 20 steps, all ranks: " << a.inter << " -> " << b.inter
            << "; intra-node " << a.intra << " -> " << b.intra << "; reduce wire " << a.wire
            << " -> " << b.wire << "\n";
}

// One node of 4: no group crosses a node, so nothing is quantised and the run is the
// unquantised one, bit for bit.
TEST(QuantizedGradients, OneNodeQuantisesNothing) {
  const TrainResult ref = train(tiny4(false, 4, 3), {});
  const TrainResult q = train(tiny4(true, 4, 3), {});
  ASSERT_EQ(q.steps.size(), ref.steps.size());
  for (size_t s = 0; s < q.steps.size(); ++s) {
    EXPECT_EQ(q.steps[s].loss, ref.steps[s].loss) << "step " << s + 1;
    EXPECT_EQ(q.steps[s].grad_norm, ref.steps[s].grad_norm) << "step " << s + 1;
  }
  EXPECT_EQ(totals(q).inter, totals(ref).inter);
}

}  // namespace
}  // namespace moezero::train
