// core/config_keys_runtime.cpp — the key tables of the runtime sections: zero, moe, prefetch,
// shard_cache, comm_emulation, comm and profile. A key is added in exactly one place: its visit
// line (config_visitors.h: the visitors that walk these tables).
#include "core/config_visitors.h"
#include "core/step_list.h"

namespace moezero::config_detail {

template <class V>
void visit_zero(V& v, ZeroConfig& c) {
  v.field("stage", c.stage,
          "0 data parallel, 1 shard optimizer states, 2 + gradients, 3 + parameters",
          in_range<int64_t>(0, 3));
  v.field("param_persistence_threshold", c.param_persistence_threshold,
          "parameter groups with fewer elements stay replicated", at_least<int64_t>(0));
  v.bytes("keep_dense_bytes", c.keep_dense_bytes,
          "stage 3: bytes of dense parameter groups kept gathered from one micro-batch to the next "
          "within a step (per gather communicator); 0 regathers them every micro-batch; auto: "
          "every one when they fit in the memory a rank has beside the rest of the run's estimate "
          "and the shard cache's experts (which come first), else what is left; docs/zero.md");
  v.field("shard_single_rank", c.shard_single_rank,
          "stage 3: gather groups held by one rank too (by default they stay resident)");
  v.bytes("prefetch_bucket_size", c.prefetch_bucket_size,
          "bytes of parameters fetched ahead of use");
  v.bytes("max_live_parameters", c.max_live_parameters,
          "bytes of gathered parameters alive at once");
  v.bytes("reduce_bucket_size", c.reduce_bucket_size, "bytes per gradient reduce-scatter bucket");
  v.choice(
      "moe_gather", c.moe_gather,
      Choices<MoeGather>{
          {"experts", MoeGather::Experts}, {"leaf", MoeGather::Leaf}, {"fsdp", MoeGather::Fsdp}},
      "stage-3 expert gathers: experts (active ones, prefetch policy, shard cache), leaf "
      "(DeepSpeed leaf module: the block's experts coalesced, every pass, nothing cached), fsdp "
      "(coalesced, kept from forward to backward; across micro-batches within "
      "shard_cache.capacity_bytes)");
  v.choice(
      "grad_accum_dtype", c.grad_accum_dtype,
      Choices<GradAccumDtype>{{"fp32", GradAccumDtype::Fp32}, {"param", GradAccumDtype::Param}},
      "stages 1-2: dtype of a rank's gradient accumulator over a step's micro-batches: fp32, "
      "or param (the compute dtype, as DeepSpeed's grad_accum_dtype; half the bytes in "
      "bf16). Stage 1 sums the full gradients on the rank; stages 2-3 reduce every "
      "micro-batch into the gradient shard, which is in the compute dtype either way");
  v.choice("expert_grads", c.expert_grads,
           Choices<ExpertGrads>{{"active", ExpertGrads::Active}, {"all", ExpertGrads::All}},
           "which local experts' gradients a backward reduces: active (the agreed-active ones; "
           "an expert no rank routed to has a zero gradient everywhere) or all (the inactive "
           "ones as zeros, as DeepSpeed-MoE, FSDP2 and Megatron-Core reduce them; the bench's "
           "incumbent rows); the same losses either way");
  v.field("reshard_after_forward", c.reshard_after_forward,
          "moe_gather=experts: release an active expert after forward (true) or keep it until "
          "its backward in the same micro-batch (false)");
  v.field("quantized_gradients", c.quantized_gradients,
          "stages 1-3 (ZeRO++ qgZ): reduce-scatter gradients in full precision inside each node "
          "(comm_emulation.ranks_per_node), then in int8 with one scale per block across the "
          "nodes; nothing is quantised when a group's ranks share one node");
  v.field("quantized_weights", c.quantized_weights,
          "stage 3: parameter all-gathers send block-wise int8 values with one fp32 scale per "
          "zero.quantization_block elements (ZeRO++ qwZ); fp32 masters are never quantised");
  v.field("quantization_block", c.quantization_block,
          "zero.quantized_weights and zero.quantized_gradients: elements per int8 scale (ZeRO++ "
          "quantises in blocks of a few thousand elements)",
          greater_than<int64_t>(0));
  v.field("hpz_partition_size", c.hpz_partition_size,
          "stage 3, hpZ (ZeRO++): ranks per secondary partition (normally the ranks per node); "
          "a gathered group freed within a step leaves this rank its slice of it over the "
          "partition, and the step's later gathers of it stay inside the partition; 1: off",
          at_least<int64_t>(1));
}

template <class V>
void visit_moe(V& v, MoeConfig& c) {
  v.field("aux_loss_coef", c.aux_loss_coef, "load-balancing loss coefficient (HF Mixtral form)",
          at_least(0.0));
  v.field("z_loss_coef", c.z_loss_coef, "router z-loss coefficient", at_least(0.0));
  v.field("router_jitter", c.router_jitter, "multiplicative input jitter of the router (0: off)",
          below(0.0, 1.0));
  v.field("capacity_factor", c.capacity_factor, "expert capacity factor (0: dropless)",
          at_least(0.0));
  v.field("normalize_top_k", c.normalize_top_k,
          "renormalise top-k weights (Mixtral); false keeps raw probabilities");
  v.choice("score_function", c.score_function,
           Choices<ScoreFunction>{{"softmax", ScoreFunction::Softmax},
                                  {"sigmoid", ScoreFunction::Sigmoid}},
           "router scores: softmax of the logits (Mixtral) or sigmoid (DeepSeek-V3; README, "
           "MoE layers)");
  v.field("expert_bias_update_rate", c.expert_bias_update_rate,
          "auxiliary-loss-free balancing (DeepSeek-V3): per-expert selection bias += rate * "
          "sign(mean load - load) after each optimizer step; 0: off",
          at_least(0.0));
  v.field("routing_replay", c.routing_replay,
          "a routing trace (profile.routing_trace) whose per-rank per-expert token counts the "
          "training micro-batches are forced to (README, MoE layers of today); empty: off");
}

template <class V>
void visit_prefetch(V& v, PrefetchConfig& c) {
  v.registered("policy", c.policy, "expert prefetch policy (prefetch/policy_registry.cpp)");
  v.field("ema_decay", c.ema_decay, "decay of the per-expert activation frequency average",
          below(0.0, 1.0));
  v.field("min_probability", c.min_probability, "prefetch experts predicted at least this likely",
          in_range(0.0, 1.0));
  v.bytes("budget_bytes", c.budget_bytes,
          "bytes of expert parameters prefetched per layer (auto: no per-layer limit; what is "
          "gathered ahead stays within zero.max_live_parameters)");
  v.field("lookahead_layers", c.lookahead_layers,
          "0: no expert prefetch before the router; n >= 1: a MoE layer's experts are planned "
          "while its attention block runs, and those of the next n - 1 layers ahead of time (from "
          "marginal statistics)",
          in_range<int64_t>(0, 64));
  v.field("link_gbps", c.link_gbps,
          "link bandwidth in Gbit/s the cost policy prices a gathered byte at (0: "
          "comm_emulation.link_gbps; both 0: the cost policy is frequency)",
          at_least(0.0));
  v.choice("speculate", c.speculate,
           Choices<Speculate>{{"idle", Speculate::Idle}, {"priced", Speculate::Priced}},
           "what the cost policy counts as the gain of an expert gathered before routing: `idle` "
           "only link time that fits in the link's idle time measured in the previous step and "
           "agreed by all ranks (none measured: nothing is speculated); `priced` the whole "
           "on-demand gather it would save (the rule before issue 27)");
  v.field(
      "pregate", c.pregate,
      "pre-gating: each MoE layer also applies the next MoE layer's router to its own input; "
      "the agreed top-k counts predict the next layer's active experts, and the expert plan "
      "ranks and prices them by how often such predictions came true (docs/prefetch.md); stage 3 "
      "with moe_gather=experts only, not on the simulated backend");
}

template <class V>
void visit_shard_cache(V& v, ShardCacheConfig& c) {
  v.bytes("capacity_bytes", c.capacity_bytes,
          "bytes of gathered expert parameters kept resident (0: off; auto: every local expert "
          "when they fit in the memory a rank has beside the rest of the run's estimate, else "
          "the whole experts that do; the smallest over the ranks; docs/prefetch.md)");
  v.registered("eviction", c.eviction, "eviction order (prefetch/shard_cache.cpp)");
}

template <class V>
void visit_comm_emulation(V& v, CommEmulationConfig& c) {
  v.field("link_gbps", c.link_gbps,
          "emulated link bandwidth in Gbit/s (10^9 bits/s) for ranks-as-threads (0: off)",
          at_least(0.0));
  v.field("latency_us", c.latency_us,
          "emulated latency per algorithm step over the link, in microseconds", at_least(0.0));
  v.field("ranks_per_node", c.ranks_per_node,
          "ranks per node for a two-tier emulated network (0: one tier, every link the NIC)",
          at_least<int64_t>(0));
  v.field("intra_node_gbps", c.intra_node_gbps,
          "emulated link between ranks of one node in Gbit/s (0: no bandwidth cost)",
          at_least(0.0));
  v.field("intra_node_latency_us", c.intra_node_latency_us,
          "emulated latency per algorithm step inside a node, in microseconds", at_least(0.0));
  v.field("nics_per_node", c.nics_per_node,
          "NICs per node: a ring's node crossings spread over them as NCCL's channels do "
          "(ranks_per_node: one NIC per GPU; 0: a crossing uses the NICs of the two ranks at "
          "that hop)",
          at_least<int64_t>(0));
}

template <class V>
void visit_comm(V& v, CommConfig& c) {
  v.field("timeout_s", c.timeout_s,
          "a collective whose peers do not arrive fails after this many seconds",
          greater_than(0.0));
  v.field("check_divergence", c.check_divergence,
          "check that all ranks of a group issue the same collectives (debug)");
}

template <class V>
void visit_profile(V& v, ProfileConfig& c) {
  v.field("trace", c.trace, "Chrome trace-event JSON output (empty: none)");
  v.field("steps", c.steps, "steps to trace, e.g. \"3-5,10\" (empty: all)",
          std::function<std::string(const std::string&)>([](const std::string& s) {
            StepList parsed;
            return StepList::parse_into(s, parsed);
          }));
  v.field("routing_trace", c.routing_trace,
          "JSON lines: per step, micro-batch, MoE layer and rank the tokens routed to every "
          "expert (README, MoE layers of today); empty: none");
  v.field("grad_norms", c.grad_norms, "per-shard and per-group gradient norms in the metrics");
  v.field("check_finite", c.check_finite, "check gradients for NaN/Inf every step");
}

template void visit_zero<Reader>(Reader&, ZeroConfig&);
template void visit_zero<Writer>(Writer&, ZeroConfig&);
template void visit_zero<Documenter>(Documenter&, ZeroConfig&);
template void visit_moe<Reader>(Reader&, MoeConfig&);
template void visit_moe<Writer>(Writer&, MoeConfig&);
template void visit_moe<Documenter>(Documenter&, MoeConfig&);
template void visit_prefetch<Reader>(Reader&, PrefetchConfig&);
template void visit_prefetch<Writer>(Writer&, PrefetchConfig&);
template void visit_prefetch<Documenter>(Documenter&, PrefetchConfig&);
template void visit_shard_cache<Reader>(Reader&, ShardCacheConfig&);
template void visit_shard_cache<Writer>(Writer&, ShardCacheConfig&);
template void visit_shard_cache<Documenter>(Documenter&, ShardCacheConfig&);
template void visit_comm_emulation<Reader>(Reader&, CommEmulationConfig&);
template void visit_comm_emulation<Writer>(Writer&, CommEmulationConfig&);
template void visit_comm_emulation<Documenter>(Documenter&, CommEmulationConfig&);
template void visit_comm<Reader>(Reader&, CommConfig&);
template void visit_comm<Writer>(Writer&, CommConfig&);
template void visit_comm<Documenter>(Documenter&, CommConfig&);
template void visit_profile<Reader>(Reader&, ProfileConfig&);
template void visit_profile<Writer>(Writer&, ProfileConfig&);
template void visit_profile<Documenter>(Documenter&, ProfileConfig&);

}  // namespace moezero::config_detail
