// train::train under mpirun, what only a multi-process job can show: a request that needs every
// rank's values in one process (TrainOptions::collect_params) is refused on every process
// before any collective, naming the alternative, and the same job then trains.
#include <gtest/gtest.h>

#include <string>

#include "comm/mpi_launch.h"
#include "core/config.h"
#include "core/error.h"
#include "train/trainer.h"

namespace moezero::moe {
namespace {

Config tiny(int world) {
  return parse_config(
      "{}", "mpi_trainer_test",
      {"model.d_model=32", "model.n_layers=1", "model.n_heads=4", "model.n_kv_heads=2",
       "model.d_ff=32", "model.seq_len=8", "model.num_experts=4",
       "train.micro_batch_size=" + std::to_string(world * 2), "train.steps=2",
       "parallel.world_size=" + std::to_string(world), "comm.timeout_s=60"});
}

TEST(MpiTrainer, CollectParamsIsRefusedOnEveryProcessThenTrainingWorks) {
  const auto mpi = comm::mpi_process();
  ASSERT_TRUE(mpi.has_value());
  train::TrainOptions opt;
  opt.collect_params = true;
  try {
    train::train(tiny(mpi->world_size), opt);
    ADD_FAILURE() << "collect_params under mpirun must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("collect_params"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("checkpoint"), std::string::npos) << e.what();
  }
  const train::TrainResult r = train::train(tiny(mpi->world_size), train::TrainOptions{});
  EXPECT_EQ(r.steps.size(), mpi->rank == 0 ? 2u : 0u) << "rank 0's process reports the steps";
}

}  // namespace
}  // namespace moezero::moe
