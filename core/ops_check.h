// core/ops_check.h — internal to core/: the argument checks that every public method of the
// op table runs before it calls the backend (ops.cpp, ops_moe.cpp). Each throws
// moezero::Error naming the op, the argument and the values.
#pragma once

#include <cmath>
#include <string>

#include "core/device.h"
#include "core/error.h"
#include "core/ops.h"

namespace moezero::detail {

// "f32(3, 4)" — dtype and shape, without the device (the device is checked separately).
inline std::string desc(const Tensor& t) {
  if (!t.defined()) return "undefined";
  return std::string(dtype_name(t.dtype())) + t.shape().str();
}

inline bool is_act(DType t) { return t == DType::F32 || t == DType::BF16; }

// Common checks of one named tensor argument of op `op`.
class Check {
 public:
  Check(const char* op, Stream& s) : op_(op), dev_(&s.device()) {}

  // Defined and on the stream's device.
  void on_device(const char* name, const Tensor& t) const {
    if (!t.defined()) MOEZERO_THROW(op_, ": ", name, " is undefined (a required tensor)");
    if (t.device() != dev_) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " on ",
                    t.device() ? t.device()->name() : std::string("no device"),
                    " but the stream is on ", dev_->name());
    }
  }
  void rank(const char* name, const Tensor& t, int r) const {
    on_device(name, t);
    if (t.rank() != r) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must have rank ", r);
    }
  }
  void dtype(const char* name, const Tensor& t, DType d) const {
    if (t.dtype() != d) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must be ", dtype_name(d));
    }
  }
  void act(const char* name, const Tensor& t) const {
    if (!is_act(t.dtype())) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must be f32 or bf16");
    }
  }
  void floating(const char* name, const Tensor& t) const {
    if (!is_floating(t.dtype())) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must be a float dtype");
    }
  }
  // `t` has the shape and dtype of `ref`.
  void like(const char* name, const Tensor& t, const char* ref_name, const Tensor& ref) const {
    on_device(name, t);
    if (t.shape() != ref.shape() || t.dtype() != ref.dtype()) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must match ", ref_name, " ", desc(ref));
    }
  }
  void same_dtype(const char* name, const Tensor& t, const char* ref_name,
                  const Tensor& ref) const {
    if (t.dtype() != ref.dtype()) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but ", ref_name, " is ", desc(ref),
                    ": dtypes differ");
    }
  }
  void dim(const char* name, const Tensor& t, int i, int64_t want, const char* what) const {
    if (t.dim(i) != want) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but dim ", i, " must be ", want, " (", what,
                    ")");
    }
  }
  // Rank-`r` tensor of exactly `shape` (given as a Shape) and dtype `d`.
  void exact(const char* name, const Tensor& t, const Shape& shape, DType d) const {
    on_device(name, t);
    if (t.shape() != shape || t.dtype() != d) {
      MOEZERO_THROW(op_, ": ", name, " is ", desc(t), " but must be ", dtype_name(d), shape.str());
    }
  }
  void positive(const char* name, int64_t v) const {
    if (v < 1) MOEZERO_THROW(op_, ": ", name, " is ", v, " but must be >= 1");
  }
  void finite(const char* name, double v) const {
    if (!std::isfinite(v)) MOEZERO_THROW(op_, ": ", name, " is ", v, " but must be finite");
  }
  const char* op() const { return op_; }

 private:
  const char* op_;
  Device* dev_;
};

// Validates one (unbatched or batched) GEMM; `prefix` is e.g. "gemm" or "grouped_gemm:
// problem 3". `batched_ok` allows rank 3.
void check_gemm(const Check& ck, const std::string& prefix, const Tensor& a, const Tensor& b,
                const Tensor& c, Transpose ta, Transpose tb, bool batched_ok);

}  // namespace moezero::detail
