// The simulated device computes like the CPU backend when every tensor is backed: every
// Test-size case of the op-case table (kernels/op_cases) on a simulated device whose backed
// threshold covers the case, against its float64 reference. So small buffers (counters,
// scalars, tiny models) hold right values, and each op of core/ops.def has a simulated
// implementation that forwards its arguments correctly.
#include <gtest/gtest.h>

#include "kernels/op_cases/op_case.h"
#include "kernels/sim/sim_device.h"

namespace moezero::sim {
namespace {

TEST(SimOpCases, AllBackedOpsMatchTheFloat64Reference) {
  SimDeviceOptions options;
  options.backed_bytes = uint64_t{1} << 30;  // everything real
  auto dev = make_sim_device(0, gpu_profile("h100"), options);
  int checked = 0;
  for (const cases::OpCase* c : cases::cases_of(cases::SizeClass::Test)) {
    const cases::Comparison r = cases::check_against_reference(*dev, *c, 1234);
    EXPECT_TRUE(r.ok) << c->name << ": " << r.detail;
    ++checked;
  }
  EXPECT_GT(checked, 30);
  EXPECT_GT(*dev->virtual_time_s(), 0.0);  // and they cost virtual time
}

}  // namespace
}  // namespace moezero::sim
