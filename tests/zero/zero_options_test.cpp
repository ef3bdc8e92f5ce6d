// tests/zero/zero_options_test.cpp — ZeroOptions::of(Config): the engine takes the zero section as
// it is parsed and only train.dtype, train.grad_accum_steps, train.seed and profile.check_finite
// from the other sections; the gradient accumulation dtype is derived from the section.
#include <gtest/gtest.h>

#include "core/config.h"
#include "zero/zero_engine.h"

namespace moezero {
namespace {

TEST(ZeroOptions, TakesTheZeroSectionAsItIs) {
  const Config c = parse_config(R"({
    "zero": {"stage": 3, "param_persistence_threshold": 77, "keep_dense_bytes": 5,
             "prefetch_bucket_size": 6, "max_live_parameters": 7, "reduce_bucket_size": 8,
             "grad_accum_dtype": "param", "quantized_weights": true, "quantization_block": 64},
    "train": {"dtype": "bf16", "grad_accum_steps": 3, "seed": 99},
    "profile": {"check_finite": false}})",
                                "cfg.json");
  const ZeroOptions o = ZeroOptions::of(c);
  Config mine, theirs;  // every zero.* key equal: the section, not a selection of it
  mine.zero = o.zero;
  theirs.zero = c.zero;
  EXPECT_EQ(config_to_json(mine), config_to_json(theirs));
  EXPECT_EQ(o.stage(), 3);
  EXPECT_EQ(o.zero.param_persistence_threshold, 77);
  EXPECT_EQ(o.zero.max_live_parameters, 7u);
  EXPECT_EQ(o.compute_dtype, DType::BF16);
  EXPECT_EQ(o.grad_accum_dtype(), DType::BF16);  // param: the compute dtype
  EXPECT_EQ(o.micro_batches_per_step, 3);
  EXPECT_EQ(o.seed, 99u);
  EXPECT_FALSE(o.check_finite);
  EXPECT_TRUE(o.materialize);          // the run's, not the config's
  EXPECT_EQ(o.gather_codec, nullptr);  // the engine makes the int8 codec of quantized_weights
}

TEST(ZeroOptions, GradAccumDtypeIsFp32UnlessParam) {
  ZeroOptions o;
  o.compute_dtype = DType::BF16;
  EXPECT_EQ(o.grad_accum_dtype(), DType::F32);
  o.zero.grad_accum_dtype = GradAccumDtype::Param;
  EXPECT_EQ(o.grad_accum_dtype(), DType::BF16);
  o.compute_dtype = DType::F32;
  EXPECT_EQ(o.grad_accum_dtype(), DType::F32);
}

}  // namespace
}  // namespace moezero
