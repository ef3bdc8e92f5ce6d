// core/config.h — the typed configuration of a moezero run, parsed once from one JSON file.
//
// Sections follow DeepSpeed's layout: model, train, data, parallel, zero, moe, prefetch,
// shard_cache, comm_emulation, comm, profile. Every key has a default, a type and a check; an
// unknown key, a wrong type or a bad value is rejected with the key's path and the reason
// ("config.json: train.lr: must be > 0, got -0.1"). Command-line overrides `--set a.b=value`
// are applied to the JSON before parsing, so they get exactly the same checks.
// Everything else takes these structs; nothing downstream reads JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace moezero {

struct ModelConfig {
  int64_t vocab_size = 256;  // byte-level by default
  int64_t d_model = 128;
  int64_t d_ff = 256;       // SwiGLU width of a dense FFN (and of each expert by default)
  int64_t expert_d_ff = 0;  // SwiGLU width of each routed expert; 0: d_ff
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 2;
  int64_t seq_len = 64;  // training context length (and the longest the model accepts)
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  double init_std = 0.02;
  int64_t num_experts = 8;  // 0: a dense model
  int64_t top_k = 2;
  int64_t moe_every = 1;            // every n-th layer is MoE (1: all), the others dense SwiGLU
  int64_t num_shared_experts = 0;   // shared SwiGLU experts every token of a MoE layer goes through
  int64_t shared_expert_d_ff = 0;   // width of each shared expert; 0: expert_width()
  bool shared_expert_gate = false;  // Qwen2-MoE: shared output *= sigmoid(xn · w_gate)
  bool qkv_bias = false;            // Qwen2: biases on the q, k and v projections

  // The width of a routed expert: expert_d_ff, or d_ff when it is 0.
  int64_t expert_width() const { return expert_d_ff > 0 ? expert_d_ff : d_ff; }
};

enum class NonFinitePolicy : uint8_t { Stop, Skip };

// train.activation_checkpointing: which activations the trainer keeps from forward to backward
// and which it recomputes in backward (model/transformer.h "Activation checkpointing").
//   None:      keep every block's saved activations.
//   Selective: recompute the core attention (softmax(q k^T) v and its log-sum-exp) in backward
//              from the kept q, k, v; keep the rest.
//   Full:      keep each transformer block's input (and a MoE block's agreed routing); recompute
//              the whole block in backward.
enum class ActivationCheckpointing : uint8_t { None, Selective, Full };

struct TrainConfig {
  int64_t steps = 100;
  int64_t micro_batch_size = 8;  // sequences per micro-batch, ALL ranks together
  int64_t grad_accum_steps = 1;
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;    // global L2 norm; 0 disables clipping
  DType dtype = DType::F32;  // compute dtype: fp32 or bf16 (masters and moments stay f32)
  int64_t seed = 1234;
  int64_t log_every = 10;
  std::string metrics_file;  // JSON lines, one per step; empty: none
  std::string save_dir;
  int64_t save_every = 0;        // 0: no periodic checkpoints (one at the end when save_dir is set)
  int64_t keep_checkpoints = 0;  // complete checkpoints kept in save_dir, newest first; 0: all
  NonFinitePolicy on_nonfinite = NonFinitePolicy::Stop;
  uint64_t memory_limit = 0;  // bytes per rank on its device; 0: no limit (docs/health.md)
  std::string init_from;      // a Hugging Face style directory to start from; empty: random init
  int64_t eval_every = 0;     // validation loss every n steps (and after the last); 0: off
  int64_t eval_batches = 4;   // micro-batches (micro_batch_size rows each) per evaluation
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::None;
};

// data.format: Bytes: data.path is a text file whose bytes are tokens (vocab 256); Tokens: llm.c
// token shards (train/token_shard.h), data.path a file or a glob.
enum class DataFormat : uint8_t { Bytes, Tokens };

struct DataConfig {
  std::string path;      // bytes: a text file (empty: the built-in corpus); tokens: file or glob
  std::string val_path;  // held-out files in data.format (empty: val_fraction of path's tokens)
  DataFormat format = DataFormat::Bytes;
  double val_fraction = 0.0;
  std::string tokenizer;  // tokenizer.json of the tokens (hf/bpe_tokenizer.h); empty: bytes
};

enum class BackendKind : uint8_t { Cpu, Cuda };

struct ParallelConfig {
  int64_t world_size = 2;  // ranks (threads on one machine)
  int64_t ep_size = 1;     // expert-parallel width
  BackendKind backend = BackendKind::Cpu;
};

// How stage 3 gathers a MoE block's experts (README "zero.moe_gather").
//   Experts: moezero: per-expert groups, only the agreed active ones, prefetch policy and
//            shard cache.
//   Leaf:    DeepSpeed with the MoE block a leaf module: every local expert as one coalesced
//            all-gather whenever the block runs (forward and backward of every micro-batch),
//            prefetched one module ahead, freed after use, nothing cached.
//   Fsdp:    FSDP2 with the block not resharded after forward: the same gather in forward,
//            kept until the block's backward of that micro-batch, then freed.
enum class MoeGather : uint8_t { Experts, Leaf, Fsdp };
// Stage 1: the dtype of a rank's sum of its micro-batches' full gradients, kept until the
// step's last backward reduce-scatters it (DeepSpeed's data_types.grad_accum_dtype).
enum class GradAccumDtype : uint8_t { Fp32, Param };
// Which local experts' gradients a backward pass reduces (README "zero.expert_grads").
//   Active: moezero: only the agreed-active experts' (an expert no rank routed to has a zero
//           gradient on every rank, and every rank knows it: skipping its reduction is exact).
//   All:    every local expert's, the inactive ones as zeros, every time gradients are
//           reduced: what DeepSpeed-MoE (capacity-padded experts), FSDP2 over stacked expert
//           weights (torchtitan's GroupedExperts) and Megatron-Core (contiguous gradient
//           buffers) reduce; none of them can skip an expert without ranks agreeing on it.
enum class ExpertGrads : uint8_t { Active, All };

// A byte budget the run derives from the memory it has ("auto": shard_cache.capacity_bytes,
// zero.keep_dense_bytes, prefetch.budget_bytes). Read unresolved it means "no limit"; train()
// resolves the resident-copy budgets (train/memory_estimate.h, auto_sizes).
inline constexpr uint64_t kAutoBytes = ~uint64_t{0};

struct ZeroConfig {
  int64_t stage = 3;  // 0: data parallel, 1: +optimizer states, 2: +gradients, 3: +parameters
  int64_t param_persistence_threshold = 1024;  // elements; smaller groups stay replicated
  bool shard_single_rank = false;  // stage 3: gather groups held by one rank too (copies)
  // Stage 3, gradient accumulation: dense groups kept gathered between a step's micro-batches;
  // kAutoBytes ("auto"): every one that fits beside the rest and the shard cache's experts.
  uint64_t keep_dense_bytes = kAutoBytes;
  uint64_t prefetch_bucket_size = 64ull << 20;  // bytes fetched ahead of use
  uint64_t max_live_parameters = 1ull << 30;    // bytes of full parameters alive at once
  uint64_t reduce_bucket_size = 64ull << 20;    // bytes per reduce-scatter bucket
  MoeGather moe_gather = MoeGather::Experts;
  GradAccumDtype grad_accum_dtype = GradAccumDtype::Fp32;  // fp32, or the compute dtype
  ExpertGrads expert_grads = ExpertGrads::Active;          // which experts' gradients are reduced
  // moe_gather=experts: false keeps each active expert acquired in forward (full parameters)
  // until its backward in the same micro-batch (FSDP2's reshard_after_forward=False, per
  // expert); true releases it after forward and gathers it again in backward.
  bool reshard_after_forward = true;
  // ZeRO++ qgZ (zero/quantized_reduce.h): gradients reduce-scattered in full precision inside
  // each node (comm_emulation.ranks_per_node), then in block-quantised int8 across the nodes.
  bool quantized_gradients = false;
  // Stage 3: parameter all-gathers carry block-wise int8 values and one fp32 scale per
  // `quantization_block` elements (ZeRO++ qwZ; zero/int8_codec.h). fp32 masters never are.
  bool quantized_weights = false;
  int64_t quantization_block = 2048;  // elements per scale
  // Stage 3, hpZ (ZeRO++ hierarchical partitions, DeepSpeed's zero_hpz_partition_size): a
  // gathered group freed within a step leaves this rank its slice of it over its secondary
  // partition (this many consecutive ranks, normally a node); the step's later gathers of the
  // group all-gather those slices inside the partition only. 1: off.
  int64_t hpz_partition_size = 1;
};

// How the router turns gate logits into scores (README "MoE layers").
//   Softmax: Mixtral, probs = softmax(logits).
//   Sigmoid: DeepSeek-V3, scores = sigmoid(logits); probs = scores / Σ_e scores (aux loss).
enum class ScoreFunction : uint8_t { Softmax, Sigmoid };

struct MoeConfig {
  double aux_loss_coef = 0.01;
  double z_loss_coef = 0.0;
  double router_jitter = 0.0;
  double capacity_factor = 0.0;  // 0: dropless
  bool normalize_top_k = true;   // Mixtral: renormalise the top-k weights; false: raw probs
  ScoreFunction score_function = ScoreFunction::Softmax;
  // Auxiliary-loss-free balancing (DeepSeek-V3): after each optimizer step every MoE layer's
  // per-expert selection bias moves by rate * sign(mean load - load_e); 0: off (no bias).
  double expert_bias_update_rate = 0.0;
  // A routing trace (profile.routing_trace) whose per-rank per-expert counts every training
  // micro-batch is forced to (README, MoE layers of today); empty: off.
  std::string routing_replay;
};

// What a speculative (before routing) expert gather of the cost policy is priced to gain
// (prefetch/prefetch_policy.h): Idle, only the part of its link time that fits in the link's
// measured idle time (agreed at the step boundary); Priced, its whole on-demand gather.
enum class Speculate : uint8_t { Idle, Priced };

struct PrefetchConfig {
  // A registered prefetch policy (prefetch/policy_registry.cpp: the names, what each does).
  std::string policy = "cost";
  double ema_decay = 0.9;
  double min_probability = 0.1;
  // Bytes of experts prefetched per layer; kAutoBytes ("auto"): no per-layer limit (what is
  // gathered ahead stays within zero.max_live_parameters).
  uint64_t budget_bytes = kAutoBytes;
  int64_t lookahead_layers = 1;
  double link_gbps = 0.0;  // the cost policy's link in Gbit/s; 0: comm_emulation.link_gbps
  Speculate speculate = Speculate::Idle;  // the cost policy's gain of a speculative gather
  bool pregate = false;  // layer i+1's router on layer i's MoE input predicts its experts
};

struct ShardCacheConfig {
  // 0 disables the cache; kAutoBytes ("auto"): every local expert, or what the memory left by
  // the rest of the run's estimate allows (train/memory_estimate.h, auto_sizes)
  uint64_t capacity_bytes = kAutoBytes;
  std::string eviction = "value";  // a registered eviction order (prefetch/shard_cache.cpp)
};

struct CommEmulationConfig {
  double link_gbps = 0.0;        // emulated link bandwidth in Gbit/s (10^9 bits/s); 0: no emulation
  double latency_us = 0.0;       // latency per algorithm step over the NIC, in microseconds
  int64_t ranks_per_node = 0;    // ranks r, p share a node when r / n == p / n; 0: one tier
  double intra_node_gbps = 0.0;  // link inside a node in Gbit/s (0: no bandwidth cost)
  double intra_node_latency_us = 0.0;  // latency per algorithm step inside a node
  int64_t nics_per_node = 0;  // NICs a node's ring channels spread over; 0: the hop's ranks' own
};

struct CommConfig {
  double timeout_s = 300.0;       // a collective whose peers do not arrive fails after this
  bool check_divergence = false;  // compare every collective's (op, dtype, count) across ranks
};

struct ProfileConfig {
  std::string trace;          // Chrome trace JSON output; empty: no trace
  std::string steps;          // which steps to trace: "3-5,10"; empty: all
  std::string routing_trace;  // JSON lines of per-rank per-expert token counts; empty: none
  bool grad_norms = false;
  bool check_finite = true;
};

struct Config {
  ModelConfig model;
  TrainConfig train;
  DataConfig data;
  ParallelConfig parallel;
  ZeroConfig zero;
  MoeConfig moe;
  PrefetchConfig prefetch;
  ShardCacheConfig shard_cache;
  CommEmulationConfig comm_emulation;
  CommConfig comm;
  ProfileConfig profile;
};

// Parses JSON text. `source` names it in errors (a file path, "<string>"). `overrides` are
// "section.key=value" strings; value is parsed as JSON when it is valid JSON, else taken as a
// string ("train.dtype=bf16" and "train.lr=1e-3" both work).
Config parse_config(const std::string& json_text, const std::string& source,
                    const std::vector<std::string>& overrides = {});
// Reads and parses a file (error names the path when it cannot be read).
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
// The config as JSON text (every key, defaults included): what a run saves beside its output.
std::string config_to_json(const Config& c, int indent = 2);

// One documented key, for the README table and `moezero config --doc`.
struct ConfigKeyDoc {
  std::string path;  // "train.lr"
  std::string type;  // "number", "integer", "bytes", "string", "bool", "one of a|b"
  std::string default_value;
  std::string doc;
};
std::vector<ConfigKeyDoc> config_reference();

// "64MiB", "1.5GB", "4096", 5e8 -> bytes. Throws naming `what` on a bad value.
uint64_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace moezero
