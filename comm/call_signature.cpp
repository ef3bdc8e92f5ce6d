// comm/call_signature.cpp — comparison and printing of call signatures.
#include "comm/call_signature.h"

#include <sstream>

namespace moezero::comm {

bool CallSignature::matches(const CallSignature& o) const {
  if (op != o.op) return false;
  if (op == CollectiveOp::Barrier) return true;
  if (dtype != o.dtype) return false;
  switch (op) {
    case CollectiveOp::AllGather: return elems == o.elems;
    case CollectiveOp::ReduceScatter:
    case CollectiveOp::AllReduce: return elems == o.elems && reduce == o.reduce;
    case CollectiveOp::Broadcast: return elems == o.elems && root == o.root;
    case CollectiveOp::AllToAllV:  // per-peer counts are checked pairwise where possible
    case CollectiveOp::Barrier: return true;
  }
  return false;
}

CallSignature decode_signature(const int64_t* words) {
  return CallSignature{static_cast<CollectiveOp>(words[0]), static_cast<DType>(words[1]),
                       static_cast<size_t>(words[2]), static_cast<ReduceOp>(words[3]),
                       static_cast<int>(words[4])};
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "{";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "}";
}

std::string CallSignature::str() const {
  std::ostringstream os;
  os << collective_op_name(op) << "(";
  if (op == CollectiveOp::Barrier) return os.str() + ")";
  os << dtype_name(dtype) << ", " << elems
     << (op == CollectiveOp::AllToAllV ? " elems sent" : " elems");
  if (op == CollectiveOp::ReduceScatter || op == CollectiveOp::AllReduce)
    os << ", " << reduce_op_name(reduce);
  if (op == CollectiveOp::Broadcast) os << ", root " << root;
  return os.str() + ")";
}

}  // namespace moezero::comm
