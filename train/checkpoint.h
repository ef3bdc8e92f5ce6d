// train/checkpoint.h — sharded checkpoints of a training run (docs/checkpoints.md).
//
// A checkpoint is one step directory, DIR/step_00000100/, holding one rank_RRRRR.bin per rank
// (fp32 masters and AdamW moments of the element ranges that rank owns, per group), the
// frequency model once (frequency_model.json), and manifest.json (format version, step, world
// size, EP size, stage, dtype, the config, every file's size and crc32, and per group each
// rank's range with its offset and crc32). DIR/latest names the newest complete one.
//
// What a run's state is between two steps, and where each piece lives:
//   masters, moments          rank files (ZeroEngine::export_state / import_state)
//   optimizer step count      manifest "engine_step" (AdamW bias correction; skipped steps
//                             do not count)
//   data position             manifest "step": batches are a pure function of (train.seed,
//                             micro-batch index = step * grad_accum_steps + a)
//   RNG state                 none: router jitter is keyed by (seed, layer, micro-batch,
//                             token), initialisation by (seed, parameter name)
//   gradient accumulation     none: a step is atomic (step() zeroes the accumulators)
//   frequency model           frequency_model.json (identical on every rank; saved once)
//   expert selection bias     manifest "expert_bias" (moe.expert_bias_update_rate > 0; per MoE
//                             layer, identical on every rank)
//   dense prefetch order      manifest "prefetch_orders" (per rank; used on the same layout)
//   config                    manifest "config"
//
// Re-sharding: every group's state is stored as element ranges of its unpadded flat buffer,
// so a loader builds any new rank's range from the overlapping old ranges (reading only
// those byte ranges): any world size, EP size, ZeRO stage and compute dtype can resume any
// checkpoint of the same model. The model section of the config must match.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/param_group.h"

namespace moezero {
class Communicator;
class Device;
class Stream;
class ZeroEngine;
namespace prefetch {
class FrequencyModel;
}
namespace model {
class Transformer;
}
}  // namespace moezero

namespace moezero::checkpoint {

// ---- Consolidation (for export): the full fp32 masters of every group --------------------

// One parameter group's full fp32 master parameters, assembled from every rank's shards.
struct NamedGroup {
  std::string name;         // group name, e.g. "embed", "layers.1.attn", "layers.1.experts.3"
  int64_t numel = 0;        // == GroupLayout(spec).numel(): unpadded, alignment gaps included
  GroupSpec spec;           // the model's spec (params: HF names, shapes); param i sits at
                            // GroupLayout(spec).offset(i) in `data`
  std::vector<float> data;  // (numel) fp32 master parameters (alignment gaps are 0)
};

struct FullParams {
  Config config;                   // the run's config as saved in the checkpoint
  int64_t step = 0;                // training steps completed when it was saved
  std::vector<NamedGroup> groups;  // in model::Transformer(config.model).param_groups() order
};

// [in] dir: a train.save_dir (follows its `latest` pointer) or one step directory (holds
// manifest.json). Verifies every file it reads (size and crc32); throws moezero::Error naming
// the file and the problem (missing, truncated, checksum mismatch, unknown format version, no
// checkpoint in DIR).
FullParams load_full_params(const std::string& dir);

// ---- Save and resume (collective over the world; called by the trainer) -----------------

// Test hook: rank `rank`'s rank file fails after `after_bytes` bytes (rank -1: never).
struct SaveFault {
  int rank = -1;
  uint64_t after_bytes = 0;
};

// What a rank saves or restores. `world` is a world communicator (rank, size) whose
// collectives run on `stream` of `device`.
struct RankState {
  const Config* config = nullptr;
  ZeroEngine* engine = nullptr;
  prefetch::FrequencyModel* frequency = nullptr;  // null: a dense model
  Communicator* world = nullptr;
  Device* device = nullptr;
  Stream* stream = nullptr;
  model::Transformer* model = nullptr;  // its experts' selection biases; null: none saved
};

// Every rank calls it after step `step` (1-based count of completed steps). Writes
// config.train.save_dir/step_<step>/ atomically (all files into a temporary directory, fsynced;
// manifest last; the directory renamed; then `latest`), then keeps the newest
// train.keep_checkpoints. On any rank's failure every rank throws the same Error and `latest`
// and the previous checkpoints are untouched.
void save(const RankState& s, int64_t step, const SaveFault& fault = {});

// Every rank calls it before the first step: loads the checkpoint at `dir` (see
// load_full_params) into this rank's engine and frequency model; returns the completed step
// count to continue from. Refuses (Error naming the file and the problem) a checkpoint of
// another model (the first differing model.* key), a corrupt, truncated or missing file, an
// unknown format version.
int64_t restore(const RankState& s, const std::string& dir);

}  // namespace moezero::checkpoint
