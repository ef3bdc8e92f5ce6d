// api/api.cpp — the conveniences of include/moezero/api.h, written on core/config and the model.
#include "moezero/api.h"

#include "model/transformer.h"

namespace moezero {

Config make_config(const std::string& json_text, const std::vector<std::string>& overrides) {
  return parse_config(json_text.empty() ? std::string("{}") : json_text, "<make_config>",
                      overrides);
}

Config validate_config(const Config& cfg) {
  return parse_config(config_to_json(cfg), "<validate_config>");
}

int64_t parameter_count(const ModelConfig& cfg) {
  int64_t n = 0;
  for (const auto& g : model::Transformer(cfg).param_groups())
    for (const auto& p : g.params) n += p.shape.numel();
  return n;
}

}  // namespace moezero
