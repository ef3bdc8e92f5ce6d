// core/config_keys_model.cpp — the key tables of the model, train, data and parallel sections:
// what is trained, how, on what, by how many ranks. A key is added in exactly one place: its
// visit line (config_visitors.h: the visitors that walk these tables).
#include "core/config_visitors.h"

namespace moezero::config_detail {

template <class V>
void visit_model(V& v, ModelConfig& c) {
  v.field("vocab_size", c.vocab_size, "vocabulary size (256: bytes are tokens)",
          in_range<int64_t>(1, kMaxI));
  v.field("d_model", c.d_model, "model width (HF hidden_size)", in_range<int64_t>(1, 1 << 20));
  v.field("d_ff", c.d_ff,
          "SwiGLU hidden width of the dense FFN, and of each expert unless expert_d_ff is set "
          "(HF intermediate_size)",
          in_range<int64_t>(1, 1 << 22));
  v.field("expert_d_ff", c.expert_d_ff,
          "SwiGLU hidden width of each routed expert (fine-grained experts; HF "
          "moe_intermediate_size); 0: d_ff",
          in_range<int64_t>(0, 1 << 22));
  v.field("n_layers", c.n_layers, "decoder layers", in_range<int64_t>(1, 4096));
  v.field("n_heads", c.n_heads, "query heads", in_range<int64_t>(1, 4096));
  v.field("n_kv_heads", c.n_kv_heads, "key/value heads (grouped-query attention); divides n_heads",
          in_range<int64_t>(1, 4096));
  v.field("seq_len", c.seq_len,
          "training context length, also the longest sequence the model accepts",
          in_range<int64_t>(1, 1 << 24));
  v.field("rope_theta", c.rope_theta, "RoPE base", greater_than(0.0));
  v.field("norm_eps", c.norm_eps, "RMSNorm epsilon", greater_than(0.0));
  v.field("init_std", c.init_std, "std of the normal initialisation of weights", greater_than(0.0));
  v.field("num_experts", c.num_experts, "experts per MoE layer (0: dense model)",
          in_range<int64_t>(0, 65536));
  v.field("top_k", c.top_k, "experts per token", in_range<int64_t>(1, 65536));
  v.field("moe_every", c.moe_every, "every n-th layer is MoE (1: all layers)",
          in_range<int64_t>(1, 4096));
  v.field("num_shared_experts", c.num_shared_experts,
          "shared SwiGLU experts that every token of a MoE layer goes through (DeepSeek-MoE, "
          "Qwen-MoE), stored as one of the summed width; 0: none",
          in_range<int64_t>(0, 4096));
  v.field("shared_expert_d_ff", c.shared_expert_d_ff,
          "width of each shared expert; 0: the routed experts' width (expert_d_ff or d_ff)",
          in_range<int64_t>(0, 1 << 22));
  v.field("shared_expert_gate", c.shared_expert_gate,
          "Qwen2-MoE: scale the shared experts' output per token by sigmoid(xn . w) (a learned "
          "(1, d_model) gate)");
  v.field("qkv_bias", c.qkv_bias,
          "Qwen2 / Qwen2-MoE: learned biases on the attention's q, k and v projections (zero "
          "init, no weight decay)");
}

template <class V>
void visit_train(V& v, TrainConfig& c) {
  v.field("steps", c.steps, "optimizer steps", at_least<int64_t>(0));
  v.field("micro_batch_size", c.micro_batch_size,
          "sequences per micro-batch over all ranks together (each rank takes micro_batch_size / "
          "world_size), so the math does not depend on the world size",
          in_range<int64_t>(1, kMaxI));
  v.field("grad_accum_steps", c.grad_accum_steps, "micro-batches per optimizer step",
          in_range<int64_t>(1, kMaxI));
  v.field("lr", c.lr, "peak learning rate", greater_than(0.0));
  v.field("min_lr", c.min_lr, "learning rate at the end of the cosine decay", at_least(0.0));
  v.field("warmup_steps", c.warmup_steps, "linear warmup steps", at_least<int64_t>(0));
  v.field("weight_decay", c.weight_decay, "AdamW decoupled weight decay (not applied to norms)",
          at_least(0.0));
  v.field("beta1", c.beta1, "AdamW beta1", below(0.0, 1.0));
  v.field("beta2", c.beta2, "AdamW beta2", below(0.0, 1.0));
  v.field("eps", c.eps, "AdamW epsilon", greater_than(0.0));
  v.field("grad_clip", c.grad_clip, "max global gradient L2 norm (0: no clipping)", at_least(0.0));
  v.dtype("dtype", c.dtype, "compute dtype (masters and optimizer moments stay f32)");
  v.field("seed", c.seed, "seed of initialisation, data order and router jitter",
          at_least<int64_t>(0));
  v.field("log_every", c.log_every, "print a line every n steps", in_range<int64_t>(1, kMaxI));
  v.field("metrics_file", c.metrics_file, "JSON-lines metrics, one object per step (empty: none)");
  v.field("save_dir", c.save_dir, "checkpoint directory (empty: none)");
  v.field("save_every", c.save_every,
          "checkpoint every n steps (0: only at the end if save_dir is set)", at_least<int64_t>(0));
  v.field("keep_checkpoints", c.keep_checkpoints,
          "complete checkpoints kept in save_dir, newest first (0: all)", at_least<int64_t>(0));
  v.choice(
      "on_nonfinite", c.on_nonfinite,
      Choices<NonFinitePolicy>{{"stop", NonFinitePolicy::Stop}, {"skip", NonFinitePolicy::Skip}},
      "what a non-finite gradient does: stop the run or skip the step");
  v.bytes("memory_limit", c.memory_limit,
          "bytes each rank may allocate on its device (0: no limit); past it an allocation fails "
          "with an out-of-memory error naming the tag, the buffer and the bytes in use by tag");
  v.field("init_from", c.init_from,
          "Hugging Face style directory to initialise from (empty: random)");
  v.field("eval_every", c.eval_every,
          "validation loss and perplexity on the held-out data every n steps and after the last "
          "(0: off)",
          at_least<int64_t>(0));
  v.field("eval_batches", c.eval_batches,
          "micro-batches of micro_batch_size held-out sequences per evaluation",
          in_range<int64_t>(1, kMaxI));
  v.choice("activation_checkpointing", c.activation_checkpointing,
           Choices<ActivationCheckpointing>{{"none", ActivationCheckpointing::None},
                                            {"selective", ActivationCheckpointing::Selective},
                                            {"full", ActivationCheckpointing::Full}},
           "recompute in backward instead of keeping: none; selective: the core attention "
           "(softmax(q k^T) v) from the kept q, k, v; full: each transformer block from its input "
           "(a MoE block reuses its forward's agreed routing). Same losses bit for bit");
}

template <class V>
void visit_data(V& v, DataConfig& c) {
  v.field("path", c.path,
          "training data: bytes: a text file, bytes are tokens (empty: the built-in corpus); "
          "tokens: an llm.c token shard or a glob of shards");
  v.choice("format", c.format,
           Choices<DataFormat>{{"bytes", DataFormat::Bytes}, {"tokens", DataFormat::Tokens}},
           "bytes: bytes are tokens; tokens: llm.c shards (256 int32 header, uint16 or uint32 "
           "token ids), memory-mapped");
  v.field("val_path", c.val_path,
          "held-out data in data.format (file or glob); empty: data.val_fraction of data.path");
  v.field("val_fraction", c.val_fraction,
          "fraction of data.path held out for validation when data.val_path is empty",
          below(0.0, 1.0));
  v.field("tokenizer", c.tokenizer,
          "tokenizer.json (byte-level BPE, scripts/prepare_data.py) of the tokens: checked against "
          "model.vocab_size, copied into train.save_dir, used by moezero generate (empty: bytes)");
}

template <class V>
void visit_parallel(V& v, ParallelConfig& c) {
  v.field("world_size", c.world_size, "ranks (threads of one process on one machine)",
          in_range<int64_t>(1, 1024));
  v.field("ep_size", c.ep_size, "expert-parallel width; divides world_size and model.num_experts",
          in_range<int64_t>(1, 1024));
  v.choice("backend", c.backend,
           Choices<BackendKind>{{"cpu", BackendKind::Cpu}, {"cuda", BackendKind::Cuda}},
           "compute backend");
}

template void visit_model<Reader>(Reader&, ModelConfig&);
template void visit_model<Writer>(Writer&, ModelConfig&);
template void visit_model<Documenter>(Documenter&, ModelConfig&);
template void visit_train<Reader>(Reader&, TrainConfig&);
template void visit_train<Writer>(Writer&, TrainConfig&);
template void visit_train<Documenter>(Documenter&, TrainConfig&);
template void visit_data<Reader>(Reader&, DataConfig&);
template void visit_data<Writer>(Writer&, DataConfig&);
template void visit_data<Documenter>(Documenter&, DataConfig&);
template void visit_parallel<Reader>(Reader&, ParallelConfig&);
template void visit_parallel<Writer>(Writer&, ParallelConfig&);
template void visit_parallel<Documenter>(Documenter&, ParallelConfig&);

}  // namespace moezero::config_detail
