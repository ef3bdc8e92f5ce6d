// core/param_group.cpp — parameter group layout: offsets, padding to equal shards (param_group.h).
#include "core/param_group.h"

#include "core/error.h"

namespace moezero {

namespace {
int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
}  // namespace

GroupLayout::GroupLayout(GroupSpec spec) : spec_(std::move(spec)) {
  MOEZERO_CHECK(!spec_.params.empty(), "parameter group '", spec_.name, "' has no parameters");
  int64_t off = 0;
  for (const auto& p : spec_.params) {
    off = align_up(off, kParamAlignElems);
    offsets_.push_back(off);
    off += p.shape.numel();
  }
  numel_ = off;
}

size_t GroupLayout::index_of(const std::string& name) const {
  for (size_t i = 0; i < spec_.params.size(); ++i)
    if (spec_.params[i].name == name) return i;
  MOEZERO_THROW("parameter group '", spec_.name, "' has no parameter '", name, "'");
}

Tensor GroupLayout::view(const Tensor& flat, size_t i) const {
  MOEZERO_CHECK(i < spec_.params.size(), "group '", spec_.name, "': parameter index ", i,
                " out of range (", spec_.params.size(), " parameters)");
  MOEZERO_CHECK(flat.numel() >= numel_, "group '", spec_.name, "': flat buffer ", flat.str(),
                " is smaller than the group (", numel_, " elements)");
  return flat.view_elems(offsets_[i], spec_.params[i].shape);
}

int64_t GroupLayout::padded_numel(int shards) const {
  MOEZERO_CHECK(shards >= 1, "padded_numel: shards must be >= 1, got ", shards);
  return align_up(numel_, shards * kParamAlignElems);
}

}  // namespace moezero
