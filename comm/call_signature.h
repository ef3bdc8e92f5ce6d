// comm/call_signature.h — what one rank called, compared across the ranks of a group to
// detect divergent collective sequences (the bug that hangs ZeRO-3 on MoE models).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/communicator.h"

namespace moezero::comm {

struct CallSignature {
  CollectiveOp op = CollectiveOp::Barrier;
  DType dtype = DType::F32;
  size_t elems = 0;  // the op's count argument (all_to_all_v: total send elems, not compared)
  ReduceOp reduce = ReduceOp::Sum;  // reduce_scatter, all_reduce
  int root = -1;                    // broadcast
  // Same call, as far as the op's arguments must agree across ranks.
  bool matches(const CallSignature& o) const;
  std::string str() const;  // "reduce_scatter(bf16, 1024 elems, sum)"
};

// A signature read back from the int64 words ranks exchange (MPI, NCCL): op, dtype, elems,
// reduce, root, in that order.
CallSignature decode_signature(const int64_t* words);

// "{0,2,3}": ranks as error messages name them.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace moezero::comm
