// tools/moezero_main.cpp — the moezero program: dispatches subcommands and turns every
// error into one clear line on stderr and a non-zero exit.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "comm/mpi_launch.h"
#include "core/error.h"
#include "tools/cli.h"

namespace {

// One entry per command: its usage lines, as `moezero help` lists them and `moezero CMD --help`
// prints them alone.
struct CommandUsage {
  const char* name;
  const char* text;
};
constexpr CommandUsage kCommands[] = {
    {"train",
     "  train --config FILE [--set section.key=value ...] [--metrics FILE] [--trace FILE] "
     "[--quiet]\n"
     "        [--resume DIR] [--stop-at STEP] [--export-hf HF_DIR [--export-dtype f32|bf16]]\n"
     "        [--gemm-profile]\n"
     "      train the model the config describes (ranks as threads on the CPU; under\n"
     "      `mpirun -np N`, one rank per process: see docs/mpi.md);\n"
     "      --resume continues from a checkpoint (a train.save_dir or one step directory),\n"
     "      --stop-at ends the run after STEP (schedule still spans train.steps),\n"
     "      --export-hf writes the trained model as a Hugging Face directory,\n"
     "      --gemm-profile times every CPU GEMM tile and prints their rates at the end\n"},
    {"selfcheck",
     "  selfcheck [--ranks N] [--backend cpu|cuda|all]\n"
     "      run kernels against float64 references and collectives on N ranks-as-threads\n"},
    {"config",
     "  config [--doc | --defaults | FILE [--set section.key=value ...]]\n"
     "      print the config reference (Markdown), the defaults, or a checked, resolved file\n"},
    {"export",
     "  export --checkpoint DIR --out HF_DIR [--dtype f32|bf16]\n"
     "      write a checkpoint as a Hugging Face directory (config.json + model.safetensors,\n"
     "      and the run's tokenizer.json with its transformers tokenizer/generation configs)\n"},
    {"score",
     "  score --model HF_DIR --text FILE [--seq-len T] [--batch N] [--logits-out FILE]\n"
     "        [--tokenizer FILE | --bytes]\n"
     "      mean next-token cross-entropy (nats) of an exported model on a text file, as JSON;\n"
     "      tokens from the directory's tokenizer.json (or --tokenizer), else (or --bytes) the\n"
     "      file's bytes; stderr says which\n"},
    {"generate",
     "  generate --checkpoint DIR | --model HF_DIR [--prompt TEXT] [--max-new-tokens N]\n"
     "        [--temperature T] [--top-k K] [--top-p P] [--seed S] [--tokenizer FILE]\n"
     "        [--device auto|cpu|cuda] [--ignore-eos] [--ids]\n"
     "      write text after the prompt (KV cache; on the GPU when there is one, else the\n"
     "      CPU (auto, the default, says so on stderr); tokens from the directory's\n"
     "      tokenizer.json, else bytes; temperature 0: greedy; defaults: 200 tokens,\n"
     "      temperature 0.8, top-k 0 (all), top-p 1, seed 0; stops at <|endoftext|> unless\n"
     "      --ignore-eos; --ids prints the prompt's and the new token ids as JSON)\n"},
    {"report",
     "  report TRACE_OR_METRICS [--html FILE] [--json FILE] [--quiet]\n"
     "      per-expert, per-step, comms and memory summary of a metrics file or trace;\n"
     "      --html: one self-contained page with heatmaps, --json: the numbers\n"},
    {"bench",
     "  bench --config FILE [--set section.key=value ...] [--strategies LIST] [--repeats N]\n"
     "        [--steps N] [--warmup N] [--json OUT]\n"
     "      the benchmark of record: the real trainer under each strategy (compute, z1, z2,\n"
     "      z3-leaf, z3-leaf-reuse, zeropp, z3-fsdp, z3-fsdp-keep, z3-none, z3-none-hold,\n"
     "      moezero, moezero-nopredict, moezero-qw, moezero-qg, moezero-zeropp,\n"
     "      moezero-cache=P), order rotated per repeat, N measured steps (default 10) per run:\n"
     "      medians with min/max, peak state over ranks, frontier table with each incumbent's\n"
     "      ceiling (the compute row over it)\n"},
    {"plan",
     "  plan --config FILE --cluster NODESxGPUS [--nics-per-node K] [--gpu NAME]\n"
     "       [--inter-node NAME] [--intra-node NAME] [--routing-trace FILE | --zipf S [--drift D] "
     "[--coactivation C]\n"
     "       [--rank-noise R]]\n"
     "       [--strategies LIST] [--steps N] [--warmup N] [--present ep|all] [--set k=v ...]\n"
     "       [--compute-profile library|measured] [--measured-json FILE] [--json OUT]\n"
     "      what the job will do on a cluster: the real trainer per bench strategy on simulated\n"
     "      GPUs (h100, h200, a100) and links (nvlink4, ib_ndr, eth_100g, ..., or 'config': the\n"
     "      config's comm_emulation; K NICs of that link per node, default one per GPU),\n"
     "      bench's table, and the fastest strategy that fits; compute on the library curves\n"
     "      or on a kernel benchmark's --json (measured: the default when there is a file)\n"},

};

void print_usage(std::ostream& os) {
  os << "usage: moezero <command> [options]   (moezero <command> --help: that command alone)\n"
        "commands:\n";
  for (const CommandUsage& c : kCommands) os << c.text;
  os << "  help      print this text\n"
        "exit status: 0 done, 1 error, 2 usage (unknown option, missing value or argument), 3 "
        "stopped by a signal (train)\n";
}

const CommandUsage* find_command(const std::string& name) {
  for (const CommandUsage& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

// `-h` or `--help` anywhere among a command's arguments asks for its usage.
bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "-h" || a == "--help") return true;
  return false;
}

int dispatch(const std::string& cmd, const std::vector<std::string>& args) {
  if (cmd == "train") return moezero::cli::train(args);
  if (cmd == "selfcheck") return moezero::cli::selfcheck(args);
  if (cmd == "config") return moezero::cli::config(args);
  if (cmd == "export") return moezero::cli::export_model(args);
  if (cmd == "score") return moezero::cli::score(args);
  if (cmd == "generate") return moezero::cli::generate(args);
  if (cmd == "report") return moezero::cli::report(args);
  if (cmd == "bench") return moezero::cli::bench(args);
  return moezero::cli::plan(args);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    print_usage(args.empty() ? std::cerr : std::cout);
    return args.empty() ? 2 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  const CommandUsage* usage = find_command(cmd);
  if (!usage) {
    std::cerr << "moezero: unknown command '" << cmd << "'\n";
    print_usage(std::cerr);
    return 2;
  }
  if (wants_help(args)) {
    std::cout << "usage: moezero " << usage->text + 2;  // the entry without its indent
    return 0;
  }
  try {
    const int rc = dispatch(cmd, args);
    // What the command printed is its output too (`generate > file`, `report > file`): a write
    // that failed (a full disk, /dev/full) fails the command.
    std::cout.flush();
    if (std::fflush(stdout) != 0 || !std::cout)
      MOEZERO_USER_ERROR("cannot write the output (stdout): ", std::strerror(errno));
    return rc;
  } catch (const moezero::cli::UsageError& e) {
    std::cerr << "moezero " << cmd << ": error: " << e.what() << " (see `moezero " << cmd
              << " --help`)\n";
    moezero::comm::mpi_abort_if_active(2);
    return 2;
  } catch (const moezero::Error& e) {
    // what(): user errors (UserError, OutOfMemoryError) without a source location, internal
    // errors with "[file:line]".
    std::cerr << "moezero " << cmd << ": error: " << e.what() << "\n";
    moezero::comm::mpi_abort_if_active(1);  // under mpirun: no peer waits for this process
    return 1;
  } catch (const std::bad_alloc& e) {
    std::cerr << "moezero " << cmd << ": error: OutOfMemoryError: a host allocation failed ("
              << e.what() << "); lower the memory the run needs (see the memory line of the "
              << "run header) or raise the limit\n";
    moezero::comm::mpi_abort_if_active(1);
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "moezero " << cmd << ": error: " << e.what() << "\n";
    moezero::comm::mpi_abort_if_active(1);
    return 1;
  }
}
