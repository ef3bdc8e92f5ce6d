// moezero/moezero.h — the one header a C++ program includes to train MoE transformers with
// moezero (ZeRO stage 0-3 sharding, ranks as threads on the CPU backend).
//
// Build: install moezero (`cmake --install build --prefix P`), then in your CMakeLists.txt
//     find_package(moezero REQUIRED)                      # -DCMAKE_PREFIX_PATH=P
//     target_link_libraries(app PRIVATE moezero::moezero)
//
// Use (examples/custom_moe/main.cpp is a complete program):
//   1. A Config (core/config.h). Either in code — `moezero::Config cfg;` holds every default,
//      set fields (cfg.model.num_experts = 4, cfg.train.steps = 30, ...) and check it with
//      moezero::validate_config(cfg) — or from JSON: moezero::make_config(json_text, overrides),
//      moezero::load_config(path, overrides), with "section.key=value" overrides. Every bad
//      value is rejected with its key path ("train.lr: must be > 0, got -0.1").
//   2. Data (optional): a train::DataSource callback in train::TrainOptions::data. For a
//      train::BatchRequest it fills `rows` sequences of seq_len tokens and their targets
//      (values in [0, model.vocab_size), target -1 = ignored), rows [row_begin, row_begin +
//      rows) of global micro-batch `micro_batch`. It must be a pure function of its arguments
//      (so every world size trains on the same global batch) and thread-safe (ranks call it
//      concurrently). Without one, the trainer reads data.path or its built-in corpus.
//   3. moezero::train::train(cfg, options) runs the whole training (the engine `moezero train`
//      uses) and returns a train::TrainResult: one train::StepLog per step (loss, lr, grad norm,
//      tokens/s, bytes moved and peak bytes per rank). TrainOptions::progress prints a line per
//      train.log_every steps. (The former names moezero::moe::train, moe::TrainOptions, ...
//      still compile, deprecated: see the end of this header.)
//   4. Errors: every failure is a moezero::Error (core/error.h) with a one-line what().
//
// The headers below keep their in-tree paths ("core/config.h"), so code that includes them
// directly works in-tree and installed alike.
#pragma once

#include "comm/world.h"
#include "core/config.h"
#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/transformer.h"
#include "moezero/api.h"
#include "train/data.h"
#include "train/trainer.h"

// The trainer's former names (moezero::moe::train, moe::TrainOptions, ...): it lives in
// moezero::train now (namespaces follow folders). These deprecated aliases keep code written
// against the old names compiling; new code uses moezero::train::...
namespace moezero::moe {
using BatchRequest [[deprecated("use moezero::train::BatchRequest")]] = train::BatchRequest;
using DataSource [[deprecated("use moezero::train::DataSource")]] = train::DataSource;
using GradHookInfo [[deprecated("use moezero::train::GradHookInfo")]] = train::GradHookInfo;
using GradHook [[deprecated("use moezero::train::GradHook")]] = train::GradHook;
using StepLog [[deprecated("use moezero::train::StepLog")]] = train::StepLog;
using TrainOptions [[deprecated("use moezero::train::TrainOptions")]] = train::TrainOptions;
using TrainResult [[deprecated("use moezero::train::TrainResult")]] = train::TrainResult;
[[deprecated("use moezero::train::train")]] inline train::TrainResult train(
    const Config& cfg, const train::TrainOptions& options = {}) {
  return moezero::train::train(cfg, options);
}
}  // namespace moezero::moe
