// zero/gather_codec.cpp — IdentityCodec (see gather_codec.h).
#include "zero/gather_codec.h"

#include "core/ops.h"

namespace moezero {

void IdentityCodec::encode(Ops& ops, Stream& s, const Tensor& shard, const Tensor& wire) const {
  ops.cast(s, shard, wire);
}

void IdentityCodec::decode(Ops& ops, Stream& s, const Tensor& wire, const Tensor& slice) const {
  ops.cast(s, wire, slice);
}

}  // namespace moezero
