// tools/cli.h — subcommands of the moezero program. Each returns the process exit code;
// errors are thrown as moezero::Error and reported by main on one line.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "hf/hf_export.h"

namespace moezero::cli {

// A command line that does not parse (an unknown option, a flag without its value, a missing
// required argument): main prints it with a pointer to `moezero CMD --help` and exits 2.
class UsageError : public UserError {
 public:
  using UserError::UserError;
};

// `moezero selfcheck [--ranks N] [--backend cpu|cuda|all]`: runs a few kernels against
// float64 references and the collectives on N ranks-as-threads, prints one line per check.
int selfcheck(const std::vector<std::string>& args);

// `moezero train --config FILE [--set section.key=value ...] [--metrics FILE] [--trace FILE]
//  [--quiet] [--resume DIR] [--stop-at STEP] [--export-hf HF_DIR [--export-dtype f32|bf16]]`.
int train(const std::vector<std::string>& args);

// `moezero config [--doc | --defaults | FILE [--set section.key=value ...]]`.
int config(const std::vector<std::string>& args);

// `moezero export --checkpoint DIR --out HF_DIR [--dtype f32|bf16]`.
int export_model(const std::vector<std::string>& args);
// Consolidates checkpoint `checkpoint` (a save_dir or a step directory) into the Hugging Face
// directory `out` and prints one line; the work of `export`, and of `train --export-hf` under
// mpirun.
void export_checkpoint(const std::string& checkpoint, const std::string& out,
                       const hf::HfExportOptions& options);

// `moezero score --model HF_DIR --text FILE [--seq-len T] [--batch N] [--logits-out FILE]
//  [--tokenizer FILE | --bytes]`.
int score(const std::vector<std::string>& args);
// `moezero generate --checkpoint DIR | --model HF_DIR [--prompt TEXT] [--max-new-tokens N]
//  [--temperature T] [--top-k K] [--top-p P] [--seed S]`: prints the prompt and what the model
// writes after it (tokens are bytes), CPU, KV cache.
int generate(const std::vector<std::string>& args);
// The tokenizer.json of a checkpoint (DIR/tokenizer.json, or its save_dir's when DIR is a step
// directory) or an exported directory, else `configured` when that file exists, else "".
std::string find_tokenizer(const std::string& dir, const std::string& configured);
// `moezero report TRACE_OR_METRICS [--html FILE] [--json FILE] [--quiet]`.
int report(const std::vector<std::string>& args);
// `moezero bench --config FILE [--set k=v ...] [--strategies LIST] [--repeats N] [--steps N]
//  [--warmup N] [--json OUT]` (tools/bench.h).
int bench(const std::vector<std::string>& args);
int plan(const std::vector<std::string>& args);

}  // namespace moezero::cli

#define MOEZERO_USAGE_ERROR(...) MOEZERO_THROW_AS(::moezero::cli::UsageError, __VA_ARGS__)
#define MOEZERO_USAGE_REQUIRE(cond, ...) \
  do {                                   \
    if (!(cond)) [[unlikely]] {          \
      MOEZERO_USAGE_ERROR(__VA_ARGS__);  \
    }                                    \
  } while (0)
