// hf/hf_score.h — evaluation of a model on a text file: the mean next-token cross-entropy
// (nats) over the file's consecutive, non-overlapping windows of T + 1 tokens from offset 0
// (window w covers tokens [w (T+1), (w+1)(T+1)); its T targets are tokens 1..T of the window;
// a final shorter window is dropped). Tokens are the file's bytes, or the ids a tokenizer.json
// gives (ScoreOptions::tokenizer); every token must be < vocab_size. Non-finite parameters
// or a non-finite loss are refused (no "loss": null).
//
// The model runs forward only, on the CPU, one rank, fp32, with nothing of training in it: no
// router jitter, no capacity drops, no aux or z loss in the number. This is the inference
// function Hugging Face's model class computes (tests/hf compares the two).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "hf/hf_export.h"

namespace moezero::hf {

struct ScoreOptions {
  int64_t seq_len = 0;        // T; 0: the model's seq_len (config.json's max_position_embeddings)
  int64_t batch_windows = 8;  // windows per forward pass
  bool keep_first_logits = false;  // fill ScoreResult::first_logits
  std::string tokenizer;           // score_hf_dir: a tokenizer.json for the text; empty: bytes
};

struct ScoreResult {
  int64_t windows = 0;
  int64_t tokens = 0;  // windows * T: the number of predicted targets
  double loss = 0.0;   // mean cross-entropy in nats
  int64_t seq_len = 0;
  std::vector<float> first_logits;  // (T, V) logits of window 0, when asked for
};

// Scores `text` with the model `model` (an MoE model uses `moe`'s top-k normalisation only)
// whose parameters are `groups` (as full_param_groups(model), by name).
// Throws naming the problem: no whole window, a byte >= vocab_size, missing groups.
ScoreResult score_bytes(const ModelConfig& model, const MoeConfig& moe,
                        const std::vector<GroupValues>& groups, const std::vector<uint8_t>& text,
                        const ScoreOptions& options, const std::string& text_name = "<text>");

// The same on token ids; `unit` ("byte", "token") words the messages.
ScoreResult score_tokens(const ModelConfig& model, const MoeConfig& moe,
                         const std::vector<GroupValues>& groups, const std::vector<int32_t>& text,
                         const ScoreOptions& options, const std::string& text_name,
                         const char* unit);

// `moezero score`: reads the exported directory and the text file (tokenized with
// options.tokenizer when set), then score_tokens.
ScoreResult score_hf_dir(const std::string& model_dir, const std::string& text_path,
                         const ScoreOptions& options);

// {"tokens": n, "loss": x} (x with 17 significant digits), one line.
std::string score_json(const ScoreResult& r);

}  // namespace moezero::hf
