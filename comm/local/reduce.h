// comm/local/reduce.h — the elementwise reduction used by reduce_scatter and all_reduce.
//
// out[i] = op(inputs[0][i], inputs[1][i], ..., inputs[n-1][i]) for i in [0, count_elems),
// applied in input order (group-rank order), so the result is deterministic and the same on
// every rank. Floating types accumulate in fp32 and are rounded to the dtype once; Avg is the
// sum divided by n (integers: truncated toward zero). Integer sums wrap (two's complement),
// as NCCL's do. Max keeps the first of equal values; a NaN input propagates only where it
// compares greater (a < b ? b : a).
#pragma once

#include <cstddef>
#include <span>

#include "core/communicator.h"

namespace moezero::comm {

// [out] out: count_elems of dtype (may alias inputs[k] only when out == inputs[k] exactly
// and no other rank reads it concurrently); [in] inputs: n pointers, each count_elems.
void reduce_elems(void* out, std::span<const void* const> inputs, size_t count_elems, DType dtype,
                  ReduceOp op);

}  // namespace moezero::comm
