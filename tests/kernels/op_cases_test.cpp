// tests/kernels/op_cases_test.cpp — the op-case table (kernels/op_cases) driven as one
// value-parameterised test: every Test-size case on every compiled backend against its float64
// reference, and, where a GPU is usable, CUDA against CPU on the same inputs. CUDA cases skip
// with the reason when no GPU is usable. The detailed per-op tests (edge cases, aliasing,
// errors, determinism) stay in the other files of this folder.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "kernels/backend.h"
#include "kernels/op_cases/op_case.h"

namespace moezero::cases {
namespace {

using Param = std::tuple<const OpCase*, DeviceKind>;

class OpCaseTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (std::get<1>(GetParam()) == DeviceKind::Cuda) {
      std::string why;
      if (!cuda_available(&why)) GTEST_SKIP() << why;
    }
    const char* env = std::getenv("MOEZERO_TEST_SEED");
    seed_ = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::cout << "[ seed     ] " << op_case().name << ": MOEZERO_TEST_SEED=" << seed_ << std::endl;
  }
  const OpCase& op_case() const { return *std::get<0>(GetParam()); }
  uint64_t seed_ = 0;
};

TEST_P(OpCaseTest, MatchesFloat64Reference) {
  auto dev = make_device(std::get<1>(GetParam()));
  const Comparison r = check_against_reference(*dev, op_case(), seed_);
  EXPECT_TRUE(r.ok) << op_case().name << ": " << r.detail;
}

// Both results are within the case's bound of the reference, so within twice it of each other.
class CudaVsCpuTest : public ::testing::TestWithParam<const OpCase*> {};

TEST_P(CudaVsCpuTest, CudaMatchesCpu) {
  std::string why;
  if (!cuda_available(&why)) GTEST_SKIP() << why;
  const OpCase& c = *GetParam();
  const char* env = std::getenv("MOEZERO_TEST_SEED");
  const uint64_t seed = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
  std::cout << "[ seed     ] " << c.name << ": MOEZERO_TEST_SEED=" << seed << std::endl;
  auto cpu = make_cpu_device();
  auto gpu = make_cuda_device();
  const HostValues init = initial_values(c, seed);
  const HostValues on_cpu = run_on(*cpu, c, init);
  const Comparison r = compare(c, run_on(*gpu, c, init), on_cpu, 2.0);
  EXPECT_TRUE(r.ok) << c.name << ": " << r.detail;
}

// The comparison itself: a result off by more than its bound fails, and so does an `=` output
// the op never wrote (still the poison of initial_values).
TEST(OpCaseTable, ComparisonCatchesWrongResultsAndMissedWrites) {
  for (const OpCase* c : cases_of(SizeClass::Test)) {
    if (c->op != "swiglu_forward" && c->op != "sort_by_expert") continue;
    const HostValues init = initial_values(*c, 7);
    const HostValues ref = reference_values(*c, init);
    EXPECT_TRUE(compare(*c, ref, ref).ok) << c->name;
    EXPECT_FALSE(compare(*c, init, ref).ok) << c->name << ": poison passed";
    HostValues off = ref;
    off.back()[0] += 0.5;
    EXPECT_FALSE(compare(*c, off, ref).ok) << c->name << ": a wrong element passed";
  }
}

// Every op of core/ops.def has at least one Test case.
TEST(OpCaseTable, CoversEveryOp) {
  std::vector<std::string> ops;
#define MOEZERO_OP(name, params, args) ops.push_back(#name);
#include "core/ops.def"
  for (const std::string& op : ops) {
    bool found = false;
    for (const OpCase* c : cases_of(SizeClass::Test)) found |= c->op == op;
    EXPECT_TRUE(found) << "no Test case of op " << op;
  }
  std::set<std::string> names;
  for (const OpCase& c : all_cases()) {
    EXPECT_TRUE(names.insert(c.name + "/" + size_class_name(c.size)).second)
        << "duplicate " << c.name;
  }
}

std::string clean(std::string s) {
  for (char& ch : s) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return s;
}
std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return clean(std::string(device_kind_name(std::get<1>(info.param))) + "_" +
               std::get<0>(info.param)->name);
}

std::string case_name(const ::testing::TestParamInfo<const OpCase*>& info) {
  return clean(info.param->name);
}

INSTANTIATE_TEST_SUITE_P(Table, CudaVsCpuTest, ::testing::ValuesIn(cases_of(SizeClass::Test)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Table, OpCaseTest,
                         ::testing::Combine(::testing::ValuesIn(cases_of(SizeClass::Test)),
                                            ::testing::ValuesIn(compiled_backends())),
                         param_name);

}  // namespace
}  // namespace moezero::cases
