// examples/custom_moe/main.cpp — train a mixture-of-experts transformer from C++ with
// moezero's API: a model defined in code, a custom data source given as a callback, and the
// same training engine `moezero train` uses (2 ranks as threads, ZeRO stage 3).
//
//   custom_moe [--experts N] [--steps N]
//
// Prints the loss of every step, then "final loss <last> (first <first>)".
// Built against an installed moezero (see CMakeLists.txt beside this file).
#include <moezero/moezero.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int64_t kVocab = 64;  // token ids 0..63

// A stateless 64-bit mix (splitmix64): the data source must be a pure function of its inputs.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Learnable synthetic data: sequence `row` of global micro-batch `mb` is an arithmetic
// progression mod kVocab, start and stride (1..4) drawn from a hash of (mb, row):
//   start, start + d, start + 2d, ...   The next token is the current one + d, and d can be read
// off the two previous tokens, so a model that learns the rule drives the loss far below
// ln(64) = 4.16 (the loss of a uniform guess; token frequencies alone teach nothing here).
void progression_data(const moezero::train::BatchRequest& req, std::vector<int32_t>& tokens,
                      std::vector<int32_t>& targets) {
  tokens.resize(static_cast<size_t>(req.rows * req.seq_len));
  targets.resize(tokens.size());
  for (int64_t r = 0; r < req.rows; ++r) {
    const int64_t row = req.row_begin + r;  // global row: the same whatever the world size
    const uint64_t h = mix(static_cast<uint64_t>(req.micro_batch) * 1000003ull + row);
    const int64_t start = static_cast<int64_t>(h % kVocab);
    const int64_t stride = 1 + static_cast<int64_t>((h >> 32) % 4);
    for (int64_t t = 0; t < req.seq_len; ++t) {
      const size_t i = static_cast<size_t>(r * req.seq_len + t);
      tokens[i] = static_cast<int32_t>((start + t * stride) % kVocab);
      targets[i] = static_cast<int32_t>((start + (t + 1) * stride) % kVocab);  // next token
    }
  }
}

int64_t int_flag(int argc, char** argv, int& i) {
  if (i + 1 >= argc) throw std::runtime_error(std::string(argv[i]) + " needs a value");
  const std::string v = argv[++i];
  char* end = nullptr;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 0)
    throw std::runtime_error(std::string(argv[i - 1]) + ": not a count: '" + v + "'");
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int64_t experts = 4, steps = 30;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--experts")
        experts = int_flag(argc, argv, i);
      else if (a == "--steps")
        steps = int_flag(argc, argv, i);
      else
        throw std::runtime_error("unknown option '" + a + "' (use --experts N, --steps N)");
    }

    // 1. The model and the run, in code. A default Config holds every default; the JSON way
    //    is moezero::make_config(R"({"model": {"num_experts": 4}})", {"train.steps=30"}).
    moezero::Config cfg;
    cfg.model.vocab_size = kVocab;
    cfg.model.d_model = 32;
    cfg.model.n_layers = 2;
    cfg.model.n_heads = 4;
    cfg.model.n_kv_heads = 2;  // grouped-query attention: 2 query heads per key/value head
    cfg.model.d_ff = 64;       // SwiGLU width of each expert
    cfg.model.seq_len = 32;
    cfg.model.num_experts = experts;  // 0: a dense model
    cfg.model.top_k = 2;              // each token goes to its 2 best experts
    cfg.model.moe_every = 1;          // every layer is a MoE layer
    cfg.train.steps = steps;
    cfg.train.micro_batch_size = 8;  // sequences per step, both ranks together
    cfg.train.lr = 1e-2;
    cfg.train.min_lr = 1e-3;
    cfg.train.warmup_steps = 3;
    cfg.parallel.world_size = 2;  // 2 ranks, as threads of this process
    cfg.zero.stage = 3;           // parameters, gradients and optimizer states sharded
    cfg.zero.param_persistence_threshold = 256;  // shard every group of this tiny model
    cfg = moezero::validate_config(cfg);         // the checks a JSON config gets, with key paths

    std::printf(
        "custom_moe: %lld parameters, %lld layers, %lld experts (top-%lld), "
        "%lld ranks, ZeRO-%lld, %lld steps\n",
        (long long)moezero::parameter_count(cfg.model), (long long)cfg.model.n_layers,
        (long long)cfg.model.num_experts, (long long)cfg.model.top_k,
        (long long)cfg.parallel.world_size, (long long)cfg.zero.stage, (long long)cfg.train.steps);

    // 2. The data: our callback instead of a file.
    moezero::train::TrainOptions options;
    options.data = progression_data;

    // 3. Train: the engine of `moezero train`. Returns once every step has run.
    const moezero::train::TrainResult result = moezero::train::train(cfg, options);

    // One StepLog per step. aux: the load-balancing loss summed over the MoE layers (top_k per
    // layer when the experts share the tokens evenly, more when routing is skewed).
    for (const auto& s : result.steps)
      std::printf("step %3lld  loss %.4f  aux %.4f  lr %.2e  grad norm %.3f\n", (long long)s.step,
                  s.loss, s.aux_loss, s.lr, s.grad_norm);
    if (result.steps.empty()) return 0;
    const auto& last = result.steps.back();
    // Routing of the last step: tokens per expert of each MoE layer (all ranks, top_k per token).
    for (size_t l = 0; l < last.tokens_per_expert.size(); ++l) {
      std::printf("MoE layer %zu tokens per expert:", l);
      for (int64_t n : last.tokens_per_expert[l]) std::printf(" %lld", (long long)n);
      std::printf("\n");
    }
    std::printf("final loss %.4f (first %.4f)\n", last.loss, result.steps.front().loss);
    return 0;
  } catch (const std::exception& e) {  // moezero::Error: one line with the key or value at fault
    std::fprintf(stderr, "custom_moe: %s\n", e.what());
    return 1;
  }
}
