// kernels/cpu/cpu_elementwise.cpp — elementwise ops and reductions on the CPU: add, scale,
// axpy, fill, cast, sum_squares, SwiGLU forward/backward, and the fp32 <-> storage copies used
// by the other CPU kernels.
//
// Flat loops in blocks of kBlockElems elements, one TBB task per block; fp32 arithmetic.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_math.h"

namespace moezero::cpu {
namespace {

constexpr int64_t kBlockElems = 16384;
constexpr int64_t kStage = 1024;  // fp32 staging of bf16 operands (on the stack, in L1)

// f(begin, end) over [0, n) in blocks of kBlockElems (boundaries fixed by n).
template <typename F>
void for_blocks(int64_t n, F&& f) {
  const int64_t nb = (n + kBlockElems - 1) / kBlockElems;
  parallel_for_each(nb, 1,
                    [&](int64_t b) { f(b * kBlockElems, std::min(n, (b + 1) * kBlockElems)); });
}

}  // namespace

std::vector<float> to_f32_vector(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  dispatch_float(t.dtype(), "to_f32", [&]<typename T>() {
    const T* p = static_cast<const T*>(t.data());
    for_blocks(t.numel(), [&](int64_t b, int64_t e) { load_f32(p + b, v.data() + b, e - b); });
  });
  return v;
}

void from_f32_vector(const std::vector<float>& v, const Tensor& t) {
  dispatch_float(t.dtype(), "from_f32", [&]<typename T>() {
    T* p = static_cast<T*>(t.data());
    for_blocks(t.numel(), [&](int64_t b, int64_t e) { store_f32(v.data() + b, p + b, e - b); });
  });
}

// po[i] = op(pa[i], pb[i]) over [lo, hi) in fp32: when any side is bf16, through kStage-sized
// fp32 staging (the row conversions of cpu_math.cpp at the CPU's widest vectors; the same values
// as an element-wise to_f32 / from_f32), else element by element. po may alias pa or pb.
template <typename A, typename B, typename O, typename Op>
void binary_rows(const A* pa, const B* pb, O* po, int64_t lo, int64_t hi, Op op) {
  if constexpr (std::is_same_v<A, bf16> || std::is_same_v<B, bf16> || std::is_same_v<O, bf16>) {
    float fa[kStage], fb[kStage];
    for (int64_t i = lo; i < hi; i += kStage) {
      const int64_t n = std::min(kStage, hi - i);
      load_f32(pa + i, fa, n);
      load_f32(pb + i, fb, n);
      for (int64_t j = 0; j < n; ++j) fa[j] = op(fa[j], fb[j]);
      store_f32(fa, po + i, n);
    }
  } else {
    for (int64_t i = lo; i < hi; ++i) po[i] = from_f32<O>(op(to_f32(pa[i]), to_f32(pb[i])));
  }
}

// out = a + b; out may alias a or b (each element is read before it is written).
void add(Stream& s, const Tensor& a, const Tensor& b, const Tensor& out) {
  s.enqueue_host([a, b, out] {
    dispatch_float(a.dtype(), "add", [&]<typename T>() {
      const T* pa = static_cast<const T*>(a.data());
      const T* pb = static_cast<const T*>(b.data());
      T* po = static_cast<T*>(out.data());
      for_blocks(a.numel(), [&](int64_t lo, int64_t hi) {
        binary_rows(pa, pb, po, lo, hi, [](float x, float y) { return x + y; });
      });
    });
  });
}

void mul(Stream& s, const Tensor& a, const Tensor& b, const Tensor& out) {
  s.enqueue_host([a, b, out] {
    dispatch_float(a.dtype(), "mul", [&]<typename T>() {
      const T* pa = static_cast<const T*>(a.data());
      const T* pb = static_cast<const T*>(b.data());
      T* po = static_cast<T*>(out.data());
      for_blocks(a.numel(), [&](int64_t lo, int64_t hi) {
        binary_rows(pa, pb, po, lo, hi, [](float x, float y) { return x * y; });
      });
    });
  });
}

void scale(Stream& s, const Tensor& x, float alpha) {
  s.enqueue_host([x, alpha] {
    dispatch_float(x.dtype(), "scale", [&]<typename T>() {
      T* p = static_cast<T*>(x.data());
      for_blocks(x.numel(), [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) p[i] = from_f32<T>(alpha * to_f32(p[i]));
      });
    });
  });
}

// y += alpha * x; x and y may have different float dtypes.
void axpy(Stream& s, float alpha, const Tensor& x, const Tensor& y) {
  s.enqueue_host([alpha, x, y] {
    dispatch_float(x.dtype(), "axpy", [&]<typename X>() {
      dispatch_float(y.dtype(), "axpy", [&]<typename Y>() {
        const X* px = static_cast<const X*>(x.data());
        Y* py = static_cast<Y*>(y.data());
        for_blocks(x.numel(), [&](int64_t lo, int64_t hi) {
          binary_rows(px, py, py, lo, hi, [alpha](float xv, float yv) { return yv + alpha * xv; });
        });
      });
    });
  });
}

void fill(Stream& s, const Tensor& x, double value) {
  s.enqueue_host([x, value] {
    auto fill_as = [&](auto v) {
      using V = decltype(v);
      V* p = static_cast<V*>(x.data());
      // All-zero bits (0.0 of every dtype here): memset, the C library's widest stores.
      bool zero = true;
      for (size_t i = 0; i < sizeof v; ++i)
        zero = zero && reinterpret_cast<const char*>(&v)[i] == 0;
      for_blocks(x.numel(), [&](int64_t lo, int64_t hi) {
        if (zero) {
          std::memset(static_cast<void*>(p + lo), 0, static_cast<size_t>(hi - lo) * sizeof v);
        } else {
          std::fill(p + lo, p + hi, v);
        }
      });
    };
    switch (x.dtype()) {
      case DType::F32: fill_as(static_cast<float>(value)); break;
      case DType::BF16: fill_as(float_to_bf16(static_cast<float>(value))); break;
      case DType::F16: fill_as(float_to_fp16(static_cast<float>(value))); break;
      case DType::I32: fill_as(static_cast<int32_t>(value)); break;
      case DType::I64: fill_as(static_cast<int64_t>(value)); break;
      case DType::I8: fill_as(static_cast<int8_t>(value)); break;
    }
  });
}

void cast(Stream& s, const Tensor& src, const Tensor& dst) {
  s.enqueue_host([src, dst] {
    if (src.dtype() == dst.dtype()) {
      if (src.data() == dst.data()) return;
      const size_t es = dtype_size_bytes(src.dtype());
      const char* ps = static_cast<const char*>(src.data());
      char* pd = static_cast<char*>(dst.data());
      for_blocks(src.numel(), [&](int64_t lo, int64_t hi) {
        std::memcpy(pd + lo * es, ps + lo * es, static_cast<size_t>(hi - lo) * es);
      });
      return;
    }
    if (src.dtype() == DType::I32) {  // i32 -> f32 (validated)
      const int32_t* ps = src.data_as<int32_t>();
      float* pd = dst.data_as<float>();
      for_blocks(src.numel(), [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) pd[i] = static_cast<float>(ps[i]);
      });
      return;
    }
    dispatch_float(src.dtype(), "cast", [&]<typename S>() {
      dispatch_float(dst.dtype(), "cast", [&]<typename D>() {
        const S* ps = static_cast<const S*>(src.data());
        D* pd = static_cast<D*>(dst.data());
        for_blocks(src.numel(), [&](int64_t lo, int64_t hi) {
          if constexpr (std::is_same_v<S, float>) {
            store_f32(ps + lo, pd + lo, hi - lo);  // f32 -> bf16: f32_to_bf16_row
          } else if constexpr (std::is_same_v<D, float>) {
            load_f32(ps + lo, pd + lo, hi - lo);  // bf16 -> f32: bf16_to_f32_row
          } else {
            for (int64_t i = lo; i < hi; ++i) pd[i] = from_f32<D>(to_f32(ps[i]));
          }
        });
      });
    });
  });
}

// out[0] += sum(x^2): per block of kBlockElems an fp32 sum over 8 fixed lanes, blocks combined
// in order in double (more accurate than the fp32 the contract asks for, and deterministic).
void sum_squares(Stream& s, const Tensor& x, const Tensor& out) {
  s.enqueue_host([x, out] {
    const int64_t n = x.numel();
    const int64_t nb = (n + kBlockElems - 1) / kBlockElems;
    std::vector<float> partial(static_cast<size_t>(nb));
    dispatch_float(x.dtype(), "sum_squares", [&]<typename T>() {
      const T* p = static_cast<const T*>(x.data());
      parallel_for_each(nb, 1, [&](int64_t b) {
        const int64_t lo = b * kBlockElems, hi = std::min(n, lo + kBlockElems);
        if constexpr (std::is_same_v<T, float>) {
          partial[static_cast<size_t>(b)] = sum_squares_f32(p + lo, hi - lo);
        } else {  // widened in kStage pieces (a multiple of 8: every element keeps its lane)
          float buf[kStage];
          F32x8 acc = {};
          for (int64_t i = lo; i < hi; i += kStage) {
            const int64_t len = std::min(kStage, hi - i);
            load_f32(p + i, buf, len);
            add_squares(buf, len, acc);
          }
          partial[static_cast<size_t>(b)] = lane_sum(acc);
        }
      });
    });
    double total = 0.0;
    for (float v : partial) total += v;
    float* o = out.data_as<float>();
    o[0] = static_cast<float>(static_cast<double>(o[0]) + total);
  });
}

// result = (first non-finite index or -1, count, kind of the first): per block of kBlockElems
// the first index and a count, blocks combined in order (exact integers, deterministic).
void find_nonfinite(Stream& s, const Tensor& x, const Tensor& result) {
  s.enqueue_host([x, result] {
    const int64_t n = x.numel();
    const int64_t nb = (n + kBlockElems - 1) / kBlockElems;
    std::vector<int64_t> first(static_cast<size_t>(nb), -1), count(static_cast<size_t>(nb), 0);
    int64_t kind = static_cast<int64_t>(NonFiniteKind::None);
    int64_t at = -1, total = 0;
    dispatch_float(x.dtype(), "find_nonfinite", [&]<typename T>() {
      const T* p = static_cast<const T*>(x.data());
      parallel_for_each(nb, 1, [&](int64_t b) {
        const int64_t lo = b * kBlockElems, hi = std::min(n, lo + kBlockElems);
        int64_t f = -1, c = 0;
        bool finite;  // the common case, checked first with a vectorised pass
        if constexpr (std::is_same_v<T, float>) {
          finite = all_finite_f32(p + lo, hi - lo);
        } else {
          uint32_t mx = 0;  // as all_finite_f32, on the fp32 value of each element
          for (int64_t i = lo; i < hi; ++i) {
            const uint32_t bits = std::bit_cast<uint32_t>(to_f32(p[i])) & 0x7fffffffu;
            mx = bits > mx ? bits : mx;
          }
          finite = mx < 0x7f800000u;
        }
        for (int64_t i = finite ? hi : lo; i < hi; ++i) {
          const bool bad = !std::isfinite(to_f32(p[i]));
          c += bad;
          if (bad && f < 0) f = i;
        }
        first[static_cast<size_t>(b)] = f;
        count[static_cast<size_t>(b)] = c;
      });
      for (int64_t b = 0; b < nb; ++b) {
        total += count[static_cast<size_t>(b)];
        if (at < 0) at = first[static_cast<size_t>(b)];
      }
      if (at >= 0) {
        const float v = to_f32(p[at]);
        kind = static_cast<int64_t>(std::isnan(v) ? NonFiniteKind::NaN
                                    : v > 0       ? NonFiniteKind::PosInf
                                                  : NonFiniteKind::NegInf);
      }
    });
    int64_t* r = result.data_as<int64_t>();
    r[0] = at;
    r[1] = total;
    r[2] = kind;
  });
}

// out = silu(gate) * up, silu(g) = g * sigmoid(g).
void swiglu_forward(Stream& s, const Tensor& gate, const Tensor& up, const Tensor& out) {
  s.enqueue_host([gate, up, out] {
    dispatch_act(gate.dtype(), "swiglu_forward", [&]<typename T>() {
      const T* pg = static_cast<const T*>(gate.data());
      const T* pu = static_cast<const T*>(up.data());
      T* po = static_cast<T*>(out.data());
      for_blocks(gate.numel(), [&](int64_t lo, int64_t hi) {
        if constexpr (std::is_same_v<T, float>) {
          swiglu_forward_f32(pg + lo, pu + lo, po + lo, hi - lo);
        } else {  // through fp32 staging, so that the vectorised fp32 kernel runs (same bits)
          float g[kStage], u[kStage], o[kStage];
          for (int64_t i = lo; i < hi; i += kStage) {
            const int64_t n = std::min(kStage, hi - i);
            load_f32(pg + i, g, n);
            load_f32(pu + i, u, n);
            swiglu_forward_f32(g, u, o, n);
            store_f32(o, po + i, n);
          }
        }
      });
    });
  });
}

// dup = dout * silu(g); dgate = dout * up * sig(g) * (1 + g * (1 - sig(g))).
void swiglu_backward(Stream& s, const Tensor& gate, const Tensor& up, const Tensor& dout,
                     const Tensor& dgate, const Tensor& dup) {
  s.enqueue_host([gate, up, dout, dgate, dup] {
    dispatch_act(gate.dtype(), "swiglu_backward", [&]<typename T>() {
      const T* pg = static_cast<const T*>(gate.data());
      const T* pu = static_cast<const T*>(up.data());
      const T* pd = static_cast<const T*>(dout.data());
      T* pdg = static_cast<T*>(dgate.data());
      T* pdu = static_cast<T*>(dup.data());
      for_blocks(gate.numel(), [&](int64_t lo, int64_t hi) {
        if constexpr (std::is_same_v<T, float>) {
          swiglu_backward_f32(pg + lo, pu + lo, pd + lo, pdg + lo, pdu + lo, hi - lo);
        } else {  // through fp32 staging (as swiglu_forward)
          float g[kStage], u[kStage], d[kStage], dg[kStage], du[kStage];
          for (int64_t i = lo; i < hi; i += kStage) {
            const int64_t n = std::min(kStage, hi - i);
            load_f32(pg + i, g, n);
            load_f32(pu + i, u, n);
            load_f32(pd + i, d, n);
            swiglu_backward_f32(g, u, d, dg, du, n);
            store_f32(dg, pdg + i, n);
            store_f32(du, pdu + i, n);
          }
        }
      });
    });
  });
}

void swiglu_backward_act(Stream& s, const Tensor& gate, const Tensor& up, const Tensor& dout,
                         const Tensor& act, const Tensor& dgate, const Tensor& dup) {
  s.enqueue_host([gate, up, dout, act, dgate, dup] {
    dispatch_act(gate.dtype(), "swiglu_backward_act", [&]<typename T>() {
      const T* pg = static_cast<const T*>(gate.data());
      const T* pu = static_cast<const T*>(up.data());
      const T* pd = static_cast<const T*>(dout.data());
      T* pa = static_cast<T*>(act.data());
      T* pdg = static_cast<T*>(dgate.data());
      T* pdu = static_cast<T*>(dup.data());
      for_blocks(gate.numel(), [&](int64_t lo, int64_t hi) {
        if constexpr (std::is_same_v<T, float>) {
          swiglu_backward_act_f32(pg + lo, pu + lo, pd + lo, pa + lo, pdg + lo, pdu + lo, hi - lo);
        } else {  // through fp32 staging (as swiglu_forward)
          float g[kStage], u[kStage], d[kStage], o[kStage], dg[kStage], du[kStage];
          for (int64_t i = lo; i < hi; i += kStage) {
            const int64_t n = std::min(kStage, hi - i);
            load_f32(pg + i, g, n);
            load_f32(pu + i, u, n);
            load_f32(pd + i, d, n);
            swiglu_backward_act_f32(g, u, d, o, dg, du, n);
            store_f32(o, pa + i, n);
            store_f32(dg, pdg + i, n);
            store_f32(du, pdu + i, n);
          }
        }
      });
    });
  });
}

}  // namespace moezero::cpu
