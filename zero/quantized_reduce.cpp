// zero/quantized_reduce.cpp — TwoHopReduce: the two-hop gradient reduce-scatter (see the header).
#include "zero/quantized_reduce.h"

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
  return blocks * static_cast<int64_t>(sizeof(float)) + cols;
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

uint64_t TwoHopReduce::cross_int8(Device&, Stream&, const Tensor&, const Tensor&) const {
  MOEZERO_THROW("two-hop reduction: the int8 inter-node hop needs Ops::quantize_int8_blocks");
}

}  // namespace moezero
