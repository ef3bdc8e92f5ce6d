// core/param_group.h — the layout of a parameter group and the interface through which
// modules reach their parameters and gradients (ParamProvider).
//
// A ParamGroup is one module's parameters in one flat buffer (one group per dense block, one
// per expert): the unit that ZeRO-3 shards, gathers and reduce-scatters. Inside the buffer,
// parameter i sits at offsets[i] (elements, each aligned to kParamAlignElems), in the order it
// was added. The buffer is padded so that every rank of the owning group holds an equal shard.
//
// Modules never own parameters. In forward they call acquire(g) and get the full, flat
// parameters of group g in the compute dtype, ready on the compute stream; they slice them with
// GroupLayout::view and call release(g) when done. In backward they acquire again, accumulate
// weight gradients (+=, fp32) into grad(g) and call grad_ready(g), after which the provider may
// reduce them (ZeRO: reduce-scatter into gradient shards on the reduce stream).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace moezero {

constexpr int64_t kParamAlignElems = 16;

// How a parameter is initialised. Values are a pure function of (seed, parameter name), so
// every world size and stage starts from identical weights.
enum class ParamInit : uint8_t {
  Normal,  // N(0, std^2)
  Ones,    // norm weights
  Zeros,
};

struct ParamSpec {
  std::string name;  // Hugging Face Mixtral name: "model.layers.0.self_attn.q_proj.weight"
  Shape shape;
  ParamInit init = ParamInit::Normal;
  float init_std = 0.02f;
  bool weight_decay = true;  // false for norm weights
};

// A linear layer's weight (out, in): N(0, std^2), weight decay on.
inline ParamSpec linear_weight(std::string name, int64_t out, int64_t in, float std) {
  return ParamSpec{std::move(name), Shape{out, in}, ParamInit::Normal, std, true};
}
// A norm's weight (width): ones, no weight decay.
inline ParamSpec norm_weight(std::string name, int64_t width) {
  return ParamSpec{std::move(name), Shape{width}, ParamInit::Ones, 0.0f, false};
}

// Which family a group belongs to (decides its sharding group: world or expert-data-parallel).
enum class GroupKind : uint8_t { Dense, Expert };

struct GroupSpec {
  std::string name;  // "layers.3.attn", "layers.3.experts.5"
  GroupKind kind = GroupKind::Dense;
  int layer = -1;   // -1 for embedding / head
  int expert = -1;  // expert id for GroupKind::Expert
  std::vector<ParamSpec> params;
};

class GroupLayout {
 public:
  GroupLayout() = default;
  explicit GroupLayout(GroupSpec spec);

  const GroupSpec& spec() const { return spec_; }
  int64_t numel() const { return numel_; }  // unpadded, alignment gaps included
  int64_t offset(size_t i) const { return offsets_[i]; }
  size_t param_count() const { return spec_.params.size(); }
  // Index of the parameter called `name`; throws naming the group when absent.
  size_t index_of(const std::string& name) const;
  // Parameter i as a view of the flat group buffer `flat` (numel >= numel()).
  Tensor view(const Tensor& flat, size_t i) const;
  // numel rounded up so that `shards` ranks hold equal shards (and each shard is aligned).
  int64_t padded_numel(int shards) const;

 private:
  GroupSpec spec_;
  std::vector<int64_t> offsets_;
  int64_t numel_ = 0;
};

// The parameters of a model as groups, and the protocol modules use to reach them.
class ParamProvider {
 public:
  virtual ~ParamProvider() = default;

  virtual int group_count() const = 0;
  virtual const GroupLayout& layout(int group) const = 0;
  // Compute dtype of acquired parameters (f32 or bf16).
  virtual DType compute_dtype() const = 0;

  // Full flat parameters of `group` (compute dtype, numel >= layout.numel()), ready for work
  // enqueued on `compute` after this call. No host synchronisation.
  virtual Tensor acquire(int group, Stream& compute) = 0;
  // compute has enqueued its last use of the acquired parameters.
  virtual void release(int group, Stream& compute) = 0;
  // Full flat gradient of `group`, f32, zeroed before the first use in this backward pass;
  // ops accumulate into it (+=) on `compute`.
  virtual Tensor grad(int group, Stream& compute) = 0;
  // compute has enqueued its last write into grad(group) for this micro-batch.
  virtual void grad_ready(int group, Stream& compute) = 0;

  // Optional hints (defaults do nothing). Every rank sharing the group must give the same
  // hints in the same order (they may start collectives).
  // Why a fetch is started ahead of acquire() (only the counters differ, README "Prefetch"):
  //   Predicted: a plan made before routing (a prefetch policy's guess): a prefetch hit when
  //              acquired, waste when dropped unused;
  //   Needed:    known to be needed once routing ran, started early only so that work can run
  //              in readiness order: a miss;
  //   Exact:     backward's prefetch from the forward's routing (known, not guessed): an
  //              exact prefetch, never a hit.
  enum class FetchReason : uint8_t { Predicted, Needed, Exact };
  // Start fetching `group` now: a later acquire() finds it in flight or resident.
  virtual void prefetch(int group, Stream& compute, FetchReason reason = FetchReason::Predicted) {}
  // Start fetching all of `groups` (one block, e.g. a MoE layer's local experts) as ONE
  // coalesced transfer where the provider can; groups resident or in flight are left out.
  // The default fetches them one by one.
  virtual void prefetch_block(std::span<const int> groups, Stream& compute,
                              FetchReason reason = FetchReason::Predicted) {
    for (int g : groups) prefetch(g, compute, reason);
  }
  // Start fetching `groups` (of one gather communicator, e.g. experts of a MoE layer) in this
  // order, coalesced into as few transfers as the provider allows, within its live-parameter
  // limit: the groups resident or in flight are left out, and from the first that does not fit
  // on, none is started (acquire() fetches those: needs_fetch). Unlike prefetch_block, bounded.
  // The default fetches them one by one.
  virtual void prefetch_set(std::span<const int> groups, Stream& compute,
                            FetchReason reason = FetchReason::Predicted) {
    for (int g : groups) prefetch(g, compute, reason);
  }
  // A prefetched group will not be acquired in this pass (a wrong prediction): the provider
  // may drop it or keep it resident.
  virtual void discard_prefetch(int group) {}
  // How valuable keeping `group` resident is (e.g. its predicted activation probability);
  // used by caches that evict the least valuable entry first.
  virtual void set_keep_score(int group, double score) {}
  // True when the group is held by a residency cache: acquiring it updates that cache's
  // bookkeeping (recency), so such acquires must stay in an order that is the same on every
  // rank of the group.
  virtual bool cached(int group) const { return false; }
  // True when acquire(group) would start a transfer (a collective): such acquires must stay
  // in an order that is the same on every rank of the group.
  virtual bool needs_fetch(int group) const { return false; }
  // The position of the group's gather in the order the provider issued its transfers (one
  // FIFO gather stream: also the order they complete in); 0 when none is in flight (resident
  // or not started). Issue order follows hints and acquires, which every rank of a group gives
  // in the same order, so ordering work by ticket needs no host synchronisation and agrees
  // across ranks. Groups of one coalesced transfer share a ticket.
  virtual uint64_t fetch_ticket(int group) const { return 0; }
  // Holding an acquired group past its use (e.g. an expert from forward to its backward):
  // may_hold(group) is true when `group`, acquired now, may stay acquired without its
  // gathered bytes exceeding the live-parameter limit of its gather communicator (state that
  // is identical on every rank of the group, so every rank decides the same); otherwise the
  // caller releases it. use_held(group) records a use of a held group without an acquire
  // (counters only: neither a gather nor a cache hit or miss).
  virtual bool may_hold(int group) const { return true; }
  virtual void use_held(int group) {}
  // Holds an acquired group until its release, without a byte limit (FSDP2's
  // reshard_after_forward=False: an expert from forward to its backward): its gathered bytes
  // stop counting against the live-parameter limit, which then bounds only what is gathered
  // ahead (as DeepSpeed's stage3_max_live_parameters bounds its prefetch), so the held groups
  // of earlier layers do not turn later layers' coalesced gathers into one-at-a-time ones.
  // The caller releases it as usual after its last use.
  virtual void hold(int group) {}
};

}  // namespace moezero
