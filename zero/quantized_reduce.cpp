// zero/quantized_reduce.cpp — TwoHopReduce: the two-hop gradient reduce-scatter (see the header).
#include "zero/quantized_reduce.h"

#include <vector>

#include "core/error.h"
#include "core/ops.h"

namespace moezero {

TwoHopReduce::TwoHopReduce(Communicator& intra, Communicator& cross, InterNodeHop hop,
                           int64_t block)
    : intra_(&intra), cross_(&cross), hop_(hop), block_(block) {
  MOEZERO_CHECK(block >= 1, "two-hop reduction: quantisation block must be >= 1, got ", block);
}

int64_t TwoHopReduce::send_row(int r) const {
  const int L = per_node(), M = nodes();
  MOEZERO_CHECK(r >= 0 && r < L * M, "two-hop reduction: group rank ", r, " out of range (", L * M,
                " ranks)");
  return static_cast<int64_t>(r % L) * M + r / L;
}

int64_t TwoHopReduce::int8_chunk_bytes(int64_t cols) const {
  const int64_t blocks = (cols + block_ - 1) / block_;
  return blocks * static_cast<int64_t>(sizeof(float)) + (cols + 3) / 4 * 4;  // next one aligned
}

uint64_t TwoHopReduce::reduce_scatter(Device& device, Stream& stream, const Tensor& send,
                                      const Tensor& recv) const {
  const DType dt = send.dtype();
  const int L = per_node(), M = nodes();
  const int64_t cols = recv.numel();
  MOEZERO_CHECK(recv.dtype() == dt && send.numel() == int64_t{L} * M * cols,
                "two-hop reduction: send ", send.str(), " and recv ", recv.str(), " do not match ",
                L, " x ", M, " ranks");
  const uint64_t esz = dtype_size_bytes(dt);
  uint64_t wire = 0;
  if (M == 1) {  // one node: the intra-node reduce-scatter is the whole reduction
    intra_->reduce_scatter(send.data(), recv.data(), static_cast<size_t>(cols), dt, ReduceOp::Sum,
                           stream);
    return static_cast<uint64_t>(L - 1) * static_cast<uint64_t>(cols) * esz;
  }
  // Hop 1, inside the node: partial (M, cols) = this node's sums of the rows of the ranks of
  // this local index. One member per node: the bucket already is that.
  Tensor partial = send;
  TensorBuffer node_sums;
  if (L > 1) {
    node_sums = TensorBuffer(device, dt, Shape{M * cols}, MemTag::CommBuffer, stream,
                             "reduce bucket, node sums");
    intra_->reduce_scatter(send.data(), node_sums.view().data(), static_cast<size_t>(M * cols), dt,
                           ReduceOp::Sum, stream);
    wire += static_cast<uint64_t>(L - 1) * static_cast<uint64_t>(M * cols) * esz;
    partial = node_sums.view();
  }
  // Hop 2, across the nodes.
  if (hop_ == InterNodeHop::Int8) return wire + cross_int8(device, stream, partial, recv);
  cross_->reduce_scatter(partial.data(), recv.data(), static_cast<size_t>(cols), dt, ReduceOp::Sum,
                         stream);
  return wire + static_cast<uint64_t>(M - 1) * static_cast<uint64_t>(cols) * esz;
}

uint64_t TwoHopReduce::cross_int8(Device& device, Stream& stream, const Tensor& partial,
                                  const Tensor& recv) const {
  Ops& ops = device.ops();
  const int M = nodes(), me = cross_->rank();
  const int64_t cols = recv.numel();
  const int64_t blocks = (cols + block_ - 1) / block_;
  const int64_t chunk = int8_chunk_bytes(cols);
  // One chunk per other node, in node order: its scales (4-byte aligned), then its values.
  auto scales = [&](void* base, int64_t k) {
    return Tensor(static_cast<char*>(base) + k * chunk, DType::F32, Shape{blocks}, &device);
  };
  auto values = [&](void* base, int64_t k) {
    return Tensor(static_cast<char*>(base) + k * chunk + blocks * 4, DType::I8, Shape{cols},
                  &device);
  };
  // This node's own sum first, exact, into the fp32 accumulator: once the other rows are
  // quantised, every byte of `partial` is dead, and the chunks received land there instead of
  // in a buffer of their own ((M - 1) chunks less state at the reduction's peak).
  TensorBuffer acc32;
  Tensor acc = recv;
  if (recv.dtype() != DType::F32) {
    acc32 = TensorBuffer(device, DType::F32, Shape{cols}, MemTag::CommBuffer, stream,
                         "reduce bucket, fp32 sum");
    acc = acc32.view();
  }
  ops.cast(stream, partial.view_elems(me * cols, Shape{cols}), acc);
  TensorBuffer out(device, DType::I8, Shape{(M - 1) * chunk}, MemTag::CommBuffer, stream,
                   "reduce bucket, int8 out");
  int64_t k = 0;
  for (int m = 0; m < M; ++m) {
    if (m == me) continue;
    ops.quantize_int8_blocks(stream, partial.view_elems(m * cols, Shape{cols}),
                             values(out.view().data(), k), scales(out.view().data(), k), block_);
    ++k;
  }
  TensorBuffer in_own;  // only when the chunks outgrow `partial` (int8 of a tiny bucket)
  void* in = partial.data();
  if ((M - 1) * chunk > static_cast<int64_t>(partial.size_bytes())) {
    in_own = TensorBuffer(device, DType::I8, Shape{(M - 1) * chunk}, MemTag::CommBuffer, stream,
                          "reduce bucket, int8 in");
    in = in_own.view().data();
  }
  std::vector<size_t> counts(static_cast<size_t>(M), static_cast<size_t>(chunk));
  counts[static_cast<size_t>(me)] = 0;
  cross_->all_to_all_v(out.view().data(), counts, in, counts, DType::I8, stream);
  // The other nodes' sums in node order, dequantised and added in fp32.
  for (k = 0; k < M - 1; ++k)
    ops.dequantize_int8_blocks(stream, values(in, k), scales(in, k), acc, block_, true);
  if (acc32) ops.cast(stream, acc, recv);
  return static_cast<uint64_t>(M - 1) * static_cast<uint64_t>(chunk);
}

}  // namespace moezero
