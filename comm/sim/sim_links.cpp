// comm/sim/sim_links.cpp — link profiles (links.json, compiled in) and topologies.
#include "comm/sim/sim_links.h"

#include <nlohmann/json.hpp>

#include "comm/sim/links_json.h"  // generated: embedded::links_json
#include "core/error.h"

namespace moezero::comm {

namespace {

std::vector<LinkProfile> load() {
  const nlohmann::json doc = nlohmann::json::parse(embedded::links_json);
  std::vector<LinkProfile> out;
  for (const nlohmann::json& l : doc.at("links")) {
    LinkProfile p;
    p.name = l.at("name").get<std::string>();
    p.description = l.at("description").get<std::string>();
    const std::string tier = l.at("tier").get<std::string>();
    MOEZERO_CHECK(tier == "intra" || tier == "inter", "links.json: link '", p.name, "' has tier '",
                  tier, "' (intra or inter)");
    p.intra_node = tier == "intra";
    p.gbps = l.at("gbps").get<double>();
    p.efficiency = l.at("efficiency").get<double>();
    p.latency_us = l.at("latency_us").get<double>();
    MOEZERO_CHECK(p.gbps > 0 && p.efficiency > 0 && p.efficiency <= 1 && p.latency_us >= 0,
                  "links.json: link '", p.name, "' has a bad gbps, efficiency or latency_us");
    MOEZERO_CHECK(l.contains("source"), "links.json: link '", p.name, "' has no source");
    out.push_back(std::move(p));
  }
  return out;
}

const std::vector<LinkProfile>& all() {
  static const std::vector<LinkProfile> links = load();
  return links;
}

}  // namespace

std::vector<std::string> link_profile_names() {
  std::vector<std::string> names;
  for (const LinkProfile& l : all()) names.push_back(l.name);
  return names;
}

LinkProfile link_profile(const std::string& name) {
  std::string known;
  for (const LinkProfile& l : all()) {
    if (l.name == name) return l;
    known += (known.empty() ? "" : ", ") + l.name;
  }
  MOEZERO_USER_ERROR("unknown link '", name, "' (known: ", known, ")");
}

SimNetworkSpec topology_network(const SimTopology& t) {
  MOEZERO_REQUIRE(t.nodes >= 1, "cluster: nodes must be >= 1, got ", t.nodes);
  MOEZERO_REQUIRE(t.gpus_per_node >= 1, "cluster: gpus_per_node must be >= 1, got ",
                  t.gpus_per_node);
  MOEZERO_REQUIRE(t.nics_per_node >= 0,
                  "cluster: nics_per_node must be >= 0 (0: one per GPU), got ", t.nics_per_node);
  const LinkProfile intra = link_profile(t.intra_link);
  const LinkProfile inter = link_profile(t.inter_link);
  MOEZERO_REQUIRE(intra.intra_node, "cluster: intra-node link '", intra.name,
                  "' is a link between nodes");
  MOEZERO_REQUIRE(!inter.intra_node, "cluster: inter-node link '", inter.name,
                  "' is a link inside a node");
  CommEmulation e;
  e.ranks_per_node = t.gpus_per_node;
  e.intra_node_gbps = intra.effective_gbps();
  e.intra_node_latency_us = intra.latency_us;
  e.link_gbps = inter.effective_gbps();
  e.latency_us = inter.latency_us;
  return SimNetworkSpec{e, t.nics_per_node > 0 ? t.nics_per_node : t.gpus_per_node};
}

}  // namespace moezero::comm
