// zero/quantized_reduce.h — the two-hop gradient reduce-scatter (ZeRO++'s qgZ,
// zero.quantized_gradients): a reduce-scatter in the compute dtype inside the node, then one
// hop across the nodes between the ranks of the same local index, in block-quantised int8.
//
// A reduce communicator's group of n = M * L ranks sits on M nodes of L members each
// (core/process_groups.h NodeSplit): group rank r = m * L + l, node m, local index l.
// 1. The bucket (n rows of `cols` elements, row r is group rank r's part) is written with its
//    rows permuted (send_row): row m * L + l at position l * M + m, so that the intra-node
//    reduce-scatter (L ranks, M * cols elements each) leaves local rank l with the node's sums
//    of the M rows destined to the ranks of local index l on every node ("partial", (M, cols)).
// 2. Across the nodes (the M ranks of local index l): FullPrecision reduce-scatters `partial`
//    in the compute dtype; Int8 quantises each partial[m'] (m' != m) in blocks of `block`
//    elements (one fp32 scale max|x|/127 per block, Ops::quantize_int8_blocks), sends it to
//    node m' by one all_to_all_v of bytes (per peer: the scales, then the int8 values), and
//    sums its own partial[m] (exact) with the dequantised chunks it received, in fp32, in node
//    order. Either way rank r ends with row r summed over the group: its ZeRO shard, where the
//    one-hop reduce-scatter puts it.
// L == 1 (every member on its own node) skips the intra-node hop; M == 1 (one node) has no
// inter-node hop and quantises nothing (the session does not build a two-hop reduction then).
//
// Sum order and error: the one-hop reduce-scatter sums the n rows in group order; the two-hop
// one sums each node's L rows, then the M node sums, in node order. With L == 1 or M == 1 the
// order is the same, so the bits are (tested). Otherwise fp32 re-association only:
// |two-hop - one-hop| <= 2 (n - 1) eps sum_r |x_r| per element (eps = 2^-24). Int8 adds at most
// scale_b / 2 per other node (half a quantisation step of the block holding the element).
#pragma once

#include <cstdint>

#include "core/communicator.h"
#include "core/tensor.h"

namespace moezero {

// The wire format of the inter-node hop.
enum class InterNodeHop : uint8_t {
  FullPrecision,  // a reduce-scatter in the compute dtype (the structure without the codec)
  Int8,           // block-quantised int8 + fp32 scales, dequantised and summed in fp32
};

class TwoHopReduce {
 public:
  // [in] intra: this rank's node's members of the group (L ranks, group order); [in] cross: the
  // members of this rank's local index, one per node, node order (M ranks). Not owned.
  // [in] block: elements per int8 scale (>= 1).
  TwoHopReduce(Communicator& intra, Communicator& cross, InterNodeHop hop, int64_t block);

  int per_node() const { return intra_->size(); }  // L
  int nodes() const { return cross_->size(); }     // M
  // This rank's position in the reduce group: cross rank * L + intra rank.
  int group_rank() const { return cross_->rank() * per_node() + intra_->rank(); }
  // The row of the bucket where group rank r's part goes (step 1 above).
  int64_t send_row(int r) const;
  // [in] send: (n * cols), compute dtype, rows placed by send_row; [out] recv: (cols), the same
  // dtype: this rank's shard of the group's sum. Enqueued on `stream` (the reduce stream);
  // `send` must stay valid until the stream has passed it, and is consumed: with one member per
  // node the int8 hop receives the other nodes' chunks into its bytes. Returns the bytes this
  // rank's collectives send, as the network model counts their algorithms (ring reduce-scatter over
  // k ranks of S input bytes: S (k - 1) / k; all_to_all_v: its send bytes).
  uint64_t reduce_scatter(Device& device, Stream& stream, const Tensor& send,
                          const Tensor& recv) const;
  // The bytes one int8 chunk of `cols` elements takes on the wire: ceil(cols / block) fp32
  // scales, then the values, padded to 4 bytes (so the next chunk's scales stay aligned).
  int64_t int8_chunk_bytes(int64_t cols) const;

 private:
  uint64_t cross_int8(Device& device, Stream& stream, const Tensor& partial,
                      const Tensor& recv) const;
  Communicator* intra_;
  Communicator* cross_;
  InterNodeHop hop_;
  int64_t block_;
};

}  // namespace moezero
