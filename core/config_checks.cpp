// core/config_checks.cpp — what a single key's check cannot see: the rules between keys
// (validate), and the --set section.key=value overrides applied to the JSON before it is read.
#include <string>

#include "core/config_visitors.h"
#include "core/process_groups.h"

namespace moezero::config_detail {

namespace {
// zero.quantized_gradients: a stage that reduce-scatters, and groups (the world, the EDP groups)
// with the same number of ranks on every node (core/process_groups.h NodeSplit).
template <class Fail>
void check_quantized_gradients(const Config& c, Fail& fail) {
  if (c.zero.stage == 0)
    fail("zero.quantized_gradients needs zero.stage >= 1 (stage 0 all-reduces gradients)");
  const auto rpn = static_cast<int>(c.comm_emulation.ranks_per_node);
  const int world = static_cast<int>(c.parallel.world_size),
            ep = static_cast<int>(c.parallel.ep_size);
  std::vector<ProcessGroup> groups = {make_world_group(world)};
  const ProcessGroups pgs(world, ep,
                          c.model.num_experts > 0 ? static_cast<int>(c.model.num_experts) : ep);
  groups.insert(groups.end(), pgs.edp_groups().begin(), pgs.edp_groups().end());
  for (const ProcessGroup& g : groups)
    if (const std::string why = node_split_error(g, rpn); !why.empty())
      fail("zero.quantized_gradients with comm_emulation.ranks_per_node ", rpn,
           " and parallel.ep_size ", ep, ": ", why,
           "; the two-hop reduction needs the same number of a group's ranks on every node");
}

// zero.hpz_partition_size: whole partitions (so the world, the dense groups' sharding group,
// is split evenly), and every EDP group (the experts') split evenly by them.
template <class Fail>
void check_hpz(const Config& c, const Fail& fail) {
  const int64_t k = c.zero.hpz_partition_size;
  const int64_t world = c.parallel.world_size, ep = c.parallel.ep_size;
  if (k == 1 || world % ep != 0) return;  // off; ep_size's own error comes first
  if (world % k != 0)
    fail("zero.hpz_partition_size (", k, ") must divide parallel.world_size (", world, ")");
  if (c.model.num_experts == 0 || c.model.num_experts % ep != 0) return;  // no EDP groups
  const ProcessGroups pgs(static_cast<int>(world), static_cast<int>(ep),
                          static_cast<int>(c.model.num_experts));
  for (const ProcessGroup& g : pgs.edp_groups())
    if (secondary_partition_members(g, static_cast<int>(k)) == 0)
      fail("zero.hpz_partition_size (", k, ") splits the expert-data-parallel group ", g.str(),
           " (parallel.ep_size ", ep, ") unevenly: each partition of ", k,
           " consecutive ranks must hold as many of its ranks as every other");
}

}  // namespace

// Rules between keys, checked after every key is valid on its own.
void validate(const Config& c, const std::string& src) {
  const auto& m = c.model;
  auto fail = [&](auto&&... why) { MOEZERO_USER_ERROR(src, ": ", why...); };
  if (m.d_model % m.n_heads != 0)
    fail("model.d_model (", m.d_model, ") must be divisible by model.n_heads (", m.n_heads, ")");
  if ((m.d_model / m.n_heads) % 2 != 0)
    fail("model.d_model / model.n_heads (head dim ", m.d_model / m.n_heads,
         ") must be even for RoPE");
  if (m.n_heads % m.n_kv_heads != 0)
    fail("model.n_heads (", m.n_heads, ") must be divisible by model.n_kv_heads (", m.n_kv_heads,
         ")");
  if (m.num_experts > 0 && m.top_k > m.num_experts)
    fail("model.top_k (", m.top_k, ") must be <= model.num_experts (", m.num_experts, ")");
  if (c.train.min_lr > c.train.lr)
    fail("train.min_lr (", c.train.min_lr, ") must be <= train.lr (", c.train.lr, ")");
  const auto& ce = c.comm_emulation;
  if (ce.ranks_per_node == 0 && (ce.intra_node_gbps > 0.0 || ce.intra_node_latency_us > 0.0))
    fail(
        "comm_emulation.intra_node_gbps / intra_node_latency_us need "
        "comm_emulation.ranks_per_node > 0 (got 0: one tier)");
  if (ce.nics_per_node > 0 && ce.ranks_per_node == 0)
    fail("comm_emulation.nics_per_node (", ce.nics_per_node,
         ") needs comm_emulation.ranks_per_node > 0 (got 0: one tier)");
  const auto& p = c.parallel;
  if (p.world_size % p.ep_size != 0)
    fail("parallel.ep_size (", p.ep_size, ") must divide parallel.world_size (", p.world_size, ")");
  if (m.num_experts > 0 && m.num_experts % p.ep_size != 0)
    fail("model.num_experts (", m.num_experts, ") must be divisible by parallel.ep_size (",
         p.ep_size, ")");
  if (c.zero.quantized_gradients) check_quantized_gradients(c, fail);
  check_hpz(c, fail);
  if (c.train.micro_batch_size % p.world_size != 0)
    fail("train.micro_batch_size (", c.train.micro_batch_size,
         ") must be divisible by parallel.world_size (", p.world_size,
         "): it counts the sequences of all ranks together");
  if (m.num_experts == 0 && p.ep_size != 1)
    fail("parallel.ep_size (", p.ep_size, ") must be 1 for a dense model (model.num_experts = 0)");
  if (c.train.eval_every > 0 && c.data.val_path.empty() && c.data.val_fraction <= 0.0)
    fail("train.eval_every (", c.train.eval_every,
         ") needs held-out data: set data.val_path or data.val_fraction > 0");
  if (c.zero.quantized_weights && c.zero.stage != 3)
    fail("zero.quantized_weights needs zero.stage = 3 (got ", c.zero.stage,
         "): only stage 3 gathers parameters through the wire codec");
  if (c.data.format == DataFormat::Tokens && c.data.path.empty())
    fail("data.format \"tokens\" needs data.path (a token shard or a glob of shards)");
}

void apply_override(json& root, const std::string& item, const std::string& source) {
  auto eq = item.find('=');
  if (eq == std::string::npos || eq == 0)
    MOEZERO_USER_ERROR(source, ": override '", item, "' must look like section.key=value");
  std::string path = item.substr(0, eq), text = item.substr(eq + 1);
  auto dot = path.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == path.size() ||
      path.find('.', dot + 1) != std::string::npos)
    MOEZERO_USER_ERROR(source, ": override '", item, "': key must be section.key, got '", path,
                       "'");
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) value = text;  // not JSON: a plain string
  if (!value.is_string())  // a string key takes the text as it is: metrics_file=42 is "42"
    for (const ConfigKeyDoc& k : config_reference())
      if (k.path == path && k.type == "string") value = text;
  std::string section = path.substr(0, dot), key = path.substr(dot + 1);
  if (!root.contains(section)) root[section] = json::object();
  if (!root[section].is_object())
    MOEZERO_USER_ERROR(source, ": override '", item, "': section '", section, "' is not an object");
  root[section][key] = value;
}

}  // namespace moezero::config_detail
