// tests/mpi/mpi_test_main.cpp — GoogleTest main for tests run as `mpirun -np N mpi_tests`:
// initialises MPI once (MpiWorld, MPI_THREAD_MULTIPLE), prints the result lines of rank 0
// only (every rank still prints its failures), and fails when started without mpirun.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/mpi/mpi_world.h"
#include "comm/mpi_launch.h"

namespace {

// Forwards only failures (and the final summary on rank 0) to the default printer.
class RankPrinter : public ::testing::EmptyTestEventListener {
 public:
  RankPrinter(::testing::TestEventListener* inner, int rank) : inner_(inner), rank_(rank) {}
  ~RankPrinter() override { delete inner_; }
  void OnTestProgramStart(const ::testing::UnitTest& u) override {
    if (rank_ == 0) inner_->OnTestProgramStart(u);
  }
  void OnTestStart(const ::testing::TestInfo& t) override {
    if (rank_ == 0) inner_->OnTestStart(t);
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (rank_ == 0 || r.failed()) {
      if (rank_ != 0) std::fprintf(stderr, "[rank %d] ", rank_);
      inner_->OnTestPartResult(r);
    }
  }
  void OnTestEnd(const ::testing::TestInfo& t) override {
    if (rank_ == 0 || t.result()->Failed()) inner_->OnTestEnd(t);
  }
  void OnTestProgramEnd(const ::testing::UnitTest& u) override {
    if (rank_ == 0 || u.Failed()) inner_->OnTestProgramEnd(u);
  }

 private:
  ::testing::TestEventListener* inner_;
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (!moezero::comm::mpi_process()) {
    std::fprintf(stderr, "mpi_tests: start me with mpirun -np N (N >= 2)\n");
    return 1;
  }
  const int rank = moezero::comm::MpiWorld::instance().rank();
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  auto* printer = listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankPrinter(printer, rank));
  return RUN_ALL_TESTS();
}
