// zero/int8_codec.h — BlockInt8Codec: block-wise int8 parameter gathers (ZeRO++ qwZ, "ZeRO++:
// Extremely Efficient Collective Communication for Giant Model Training", Wang et al. 2023).
//
// One rank's wire part for a shard of s elements (wire dtype i8, bytes):
//   [0, s)                      the shard's int8 values (Ops::quantize_int8_blocks)
//   [s, align4(s))              zero padding, so that the scales are 4-byte aligned
//   [align4(s), +4 ceil(s / b)) the fp32 scales, one per block of b elements of the shard
// Every part is a multiple of 4 bytes, so the parts of several groups and ranks packed side by
// side keep every scale aligned. Blocks are counted inside each rank's shard, so a rank's
// scales depend only on its own shard.
//
// encode quantises the compute-dtype shard (FetchCoordinator passes GroupState::param_source():
// the bf16 copy, or in fp32 mode the fp32 master, read only: the master itself is never
// written with quantised values). decode dequantises one rank's part into that rank's slice of
// the full parameters. The coordinator decodes every part, this rank's own included, so every
// rank holds the same full parameters, and a group gathered twice in one step (forward and
// backward) gets the same values: the shard does not change between optimizer steps.
// Wire bytes: (s + pad + 4 ceil(s / b)) per rank, about (1 + 4 / b) / 4 of fp32's 4 s.
#pragma once

#include <cstdint>

#include "zero/gather_codec.h"

namespace moezero {

class BlockInt8Codec final : public GatherCodec {
 public:
  // [in] block_elems: elements per scale (>= 1; zero.quantization_block).
  explicit BlockInt8Codec(int64_t block_elems);
  const char* name() const override { return "int8-blocks"; }
  WireShape wire_shape(int64_t shard_elems, DType param) const override;
  void encode(Ops& ops, Stream& s, const Tensor& shard, const Tensor& wire) const override;
  void decode(Ops& ops, Stream& s, const Tensor& wire, const Tensor& slice) const override;
  int64_t block_elems() const { return block_; }

  // Byte offset of the scales in a part of a shard of shard_elems (the values, padded to 4).
  static int64_t scales_offset(int64_t shard_elems) { return (shard_elems + 3) / 4 * 4; }

 private:
  int64_t blocks(int64_t shard_elems) const { return (shard_elems + block_ - 1) / block_; }
  int64_t block_;
};

}  // namespace moezero
