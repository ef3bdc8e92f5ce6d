// zero/gather_codec.h — the wire format of a parameter all-gather (DESIGN.md "zero/").
//
// The fetch coordinator moves a group's parameters in three steps on the gather stream, as
// FSDP2's AllGather object and DeepSpeed's quantised all-gather do:
//   encode:     this rank's shard (compute dtype, shard_elems) -> its part of the wire buffer
//   all-gather: every rank's wire part, side by side (wire_shape(): dtype and elements)
//   decode:     rank r's wire part -> rank r's slice of the full parameters (compute dtype)
// IdentityCodec sends the shard as it is (wire bytes == full bytes / ranks), and lets the
// coordinator gather a single group straight from its shard into its full buffer (in_place).
// A lossy codec (block-quantised int8: int8 values and one scale per block packed into the
// wire elements) implements the same three calls; its wire bytes are fewer than the full
// bytes, which the coordinator counts separately (wire_bytes vs full bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace moezero {

class Ops;

// One rank's part of a gather on the wire.
struct WireShape {
  DType dtype = DType::F32;
  int64_t elems = 0;
  uint64_t bytes() const { return static_cast<uint64_t>(elems) * dtype_size_bytes(dtype); }
};

class GatherCodec {
 public:
  virtual ~GatherCodec() = default;
  virtual const char* name() const = 0;
  // The wire part of one rank for a shard of `shard_elems` elements of `param` dtype. Every
  // group of one coalesced gather must use the same wire dtype.
  virtual WireShape wire_shape(int64_t shard_elems, DType param) const = 0;
  // True when the wire part IS the shard (same dtype and elements, no transformation): a single
  // group may then be gathered from its shard straight into its full buffer, no copies.
  virtual bool in_place() const { return false; }
  // True when decode(encode(shard)) is the shard bit for bit. A kept group's gathered buffer then
  // holds this rank's shard exactly, so the shard's own buffer may be given back while the group
  // stays resident (FetchCoordinator::alias_shard); a lossy codec keeps it (in fp32 mode the
  // shard is the master, which must never take dequantised values).
  virtual bool exact() const { return false; }
  // shard (param dtype, shard_elems) -> wire (wire_shape of it), enqueued on `s`.
  virtual void encode(Ops& ops, Stream& s, const Tensor& shard, const Tensor& wire) const = 0;
  // One rank's wire part -> that rank's slice of the full parameters (param dtype), on `s`.
  virtual void decode(Ops& ops, Stream& s, const Tensor& wire, const Tensor& slice) const = 0;
};

// The shard as it is: wire dtype = compute dtype, encode and decode are copies.
class IdentityCodec final : public GatherCodec {
 public:
  const char* name() const override { return "identity"; }
  WireShape wire_shape(int64_t shard_elems, DType param) const override {
    return WireShape{param, shard_elems};
  }
  bool in_place() const override { return true; }
  bool exact() const override { return true; }
  void encode(Ops& ops, Stream& s, const Tensor& shard, const Tensor& wire) const override;
  void decode(Ops& ops, Stream& s, const Tensor& wire, const Tensor& slice) const override;
};

}  // namespace moezero
