// tests/common/tiny_config.h — the tiny model the trainer-level tests share.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace moezero::test {

// 2 layers, d_model 32, 4 query / 2 KV heads, d_ff 48, 16 tokens, micro-batches of 12
// sequences, 3 steps at lr 0.01 -> 0.001, small ZeRO buckets (several collectives per pass),
// a 60 s collective timeout; dense unless `extra` says otherwise. `extra` is applied after, so
// its keys win (as `--set` does). [in] source: the name errors give the config.
inline Config tiny_config(const std::string& source, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.d_model=32",
                                "model.n_layers=2",
                                "model.n_heads=4",
                                "model.n_kv_heads=2",
                                "model.d_ff=48",
                                "model.seq_len=16",
                                "train.micro_batch_size=12",
                                "train.steps=3",
                                "train.warmup_steps=1",
                                "train.lr=0.01",
                                "train.min_lr=0.001",
                                "zero.param_persistence_threshold=64",
                                "zero.reduce_bucket_size=20000",
                                "zero.prefetch_bucket_size=30000",
                                "comm.timeout_s=60"};
  o.insert(o.end(), extra.begin(), extra.end());
  return parse_config("{}", source, o);
}

// The same with two MoE layers of 4 experts, top-2.
inline Config tiny_moe_config(const std::string& source, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"model.num_experts=4", "model.top_k=2"};
  o.insert(o.end(), extra.begin(), extra.end());
  return tiny_config(source, o);
}

}  // namespace moezero::test
