// zero/int8_codec.cpp — BlockInt8Codec (see int8_codec.h).
#include "zero/int8_codec.h"

#include "core/error.h"
#include "core/ops.h"

namespace moezero {

BlockInt8Codec::BlockInt8Codec(int64_t block_elems) : block_(block_elems) {
  MOEZERO_REQUIRE(block_elems >= 1, "BlockInt8Codec: block is ", block_elems,
                  " elements but must be >= 1");
}

WireShape BlockInt8Codec::wire_shape(int64_t shard_elems, DType) const {
  return WireShape{DType::I8, scales_offset(shard_elems) + 4 * blocks(shard_elems)};
}

void BlockInt8Codec::encode(Ops& ops, Stream& s, const Tensor& shard, const Tensor& wire) const {
  const int64_t n = shard.numel(), pad_at = n, scales_at = scales_offset(n);
  MOEZERO_CHECK(wire.dtype() == DType::I8 && wire.numel() == wire_shape(n, shard.dtype()).elems,
                "BlockInt8Codec: wire part ", wire.str(), " for a shard of ", n, " elements");
  const Tensor q = wire.view_elems(0, Shape{n});
  if (scales_at > pad_at) ops.fill(s, wire.view_elems(pad_at, Shape{scales_at - pad_at}), 0.0);
  const Tensor scales = wire.view_bytes(scales_at, DType::F32, Shape{blocks(n)});
  ops.quantize_int8_blocks(s, shard.reshape(Shape{n}), q, scales, block_);
}

void BlockInt8Codec::decode(Ops& ops, Stream& s, const Tensor& wire, const Tensor& slice) const {
  const int64_t n = slice.numel();
  MOEZERO_CHECK(wire.dtype() == DType::I8 && wire.numel() == wire_shape(n, slice.dtype()).elems,
                "BlockInt8Codec: wire part ", wire.str(), " for a slice of ", n, " elements");
  const Tensor q = wire.view_elems(0, Shape{n});
  const Tensor scales = wire.view_bytes(scales_offset(n), DType::F32, Shape{blocks(n)});
  ops.dequantize_int8_blocks(s, q, scales, slice.reshape(Shape{n}), block_, false);
}

}  // namespace moezero
