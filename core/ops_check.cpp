// core/ops_check.cpp — the GEMM argument check (ops_check.h).
#include "core/ops_check.h"

namespace moezero::detail {

void check_gemm(const Check& ck, const std::string& prefix, const Tensor& a, const Tensor& b,
                const Tensor& c, Transpose ta, Transpose tb, bool batched_ok) {
  const char* op = prefix.c_str();
  ck.on_device("a", a);
  ck.on_device("b", b);
  ck.on_device("c", c);
  if (!is_act(a.dtype())) MOEZERO_THROW(op, ": a is ", desc(a), " but must be f32 or bf16");
  if (b.dtype() != a.dtype()) {
    MOEZERO_THROW(op, ": a is ", desc(a), " but b is ", desc(b), ": dtypes differ");
  }
  if (c.dtype() != DType::F32 && c.dtype() != a.dtype()) {
    MOEZERO_THROW(op, ": c is ", desc(c), " but must be f32 or a's dtype ", dtype_name(a.dtype()));
  }
  const bool batched = a.rank() == 3;
  if (!(a.rank() == 2 || (batched_ok && batched))) {
    MOEZERO_THROW(op, ": a is ", desc(a), " but must have rank 2", batched_ok ? " or 3" : "");
  }
  if (batched) {
    if (c.rank() != 3 || (b.rank() != 2 && b.rank() != 3)) {
      MOEZERO_THROW(op, ": batched a is ", desc(a), " so c must have rank 3 and b rank 2 or 3, ",
                    "but b is ", desc(b), " and c is ", desc(c));
    }
    if (c.dim(0) != a.dim(0) || (b.rank() == 3 && b.dim(0) != a.dim(0))) {
      MOEZERO_THROW(op, ": batch sizes differ: a is ", desc(a), ", b is ", desc(b), ", c is ",
                    desc(c));
    }
  } else if (b.rank() != 2 || c.rank() != 2) {
    MOEZERO_THROW(op, ": a is ", desc(a), " so b and c must have rank 2, but b is ", desc(b),
                  " and c is ", desc(c));
  }
  const bool ta_ = ta == Transpose::Yes, tb_ = tb == Transpose::Yes;
  const int64_t m = ta_ ? a.dim(-1) : a.dim(-2);
  const int64_t ka = ta_ ? a.dim(-2) : a.dim(-1);
  const int64_t kb = tb_ ? b.dim(-1) : b.dim(-2);
  const int64_t n = tb_ ? b.dim(-2) : b.dim(-1);
  if (ka != kb) {
    MOEZERO_THROW(op, ": a is ", desc(a), ta_ ? " (transposed)" : "", " but b is ", desc(b),
                  tb_ ? " (transposed)" : "", ": inner dims differ (", ka, " vs ", kb, ")");
  }
  if (c.dim(-2) != m || c.dim(-1) != n) {
    MOEZERO_THROW(op, ": c is ", desc(c), " but op(a) @ op(b) is (", m, ", ", n, ")");
  }
}

}  // namespace moezero::detail
