// kernels/cpu/cpu_gemm.cpp — gemm, batched gemm and grouped gemm on the CPU.
//
// Everything funnels into fp32 GEMMs run by single-threaded cblas_sgemm calls, one per fixed
// tile of C (kTileM x kTileN), in parallel over TBB. bf16 operands are widened to fp32 copies
// first; a bf16 C is computed in an fp32 copy and rounded once at the end. Tile boundaries
// depend only on the shapes, so results are bit-identical run to run.
#include <cblas.h>

#include <algorithm>
#include <deque>
#include <memory>

#include "kernels/cpu/cpu_common.h"

namespace moezero::cpu {
namespace {

constexpr int64_t kTileM = 256;
constexpr int64_t kTileN = 256;

// One tile [i0, i1) x [j0, j1) of g's C.
void run_tile(const F32Gemm& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const int64_t ldc = g.n;
  if (g.k == 0 || g.alpha == 0.0f) {
    // C = beta * C (beta == 0 writes zeros, ignoring NaN in the old contents).
    for (int64_t i = i0; i < i1; ++i) {
      float* row = g.c + i * ldc;
      for (int64_t j = j0; j < j1; ++j) row[j] = g.beta == 0.0f ? 0.0f : g.beta * row[j];
    }
    return;
  }
  if (g.beta == 0.0f) {
    // BLAS implementations may compute 0 * NaN; the contract says beta == 0 ignores C.
    for (int64_t i = i0; i < i1; ++i) std::fill(g.c + i * ldc + j0, g.c + i * ldc + j1, 0.0f);
  }
  const int64_t lda = g.ta ? g.m : g.k;
  const int64_t ldb = g.tb ? g.k : g.n;
  const float* ap = g.ta ? g.a + i0 : g.a + i0 * lda;
  const float* bp = g.tb ? g.b + j0 * ldb : g.b + j0;
  cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(i1 - i0), static_cast<int>(j1 - j0), static_cast<int>(g.k), g.alpha,
              ap, static_cast<int>(lda), bp, static_cast<int>(ldb), g.beta, g.c + i0 * ldc + j0,
              static_cast<int>(ldc));
}

struct Tile {
  int32_t gemm;
  int64_t i0, i1, j0, j1;
};

// Fp32 views of a GEMM's tensors: the tensor's own memory when it is f32, else a widened copy
// (and, for C, a write-back after the GEMMs).
class Staging {
 public:
  const float* input(const Tensor& t) {
    if (t.dtype() == DType::F32) return t.data_as<float>();
    copies_.push_back(to_f32_vector(t));
    return copies_.back().data();
  }
  float* output(const Tensor& t, float beta) {
    if (t.dtype() == DType::F32) return t.data_as<float>();
    if (beta != 0.0f) {
      copies_.push_back(to_f32_vector(t));
    } else {
      copies_.emplace_back(static_cast<size_t>(t.numel()));
    }
    writeback_.push_back({&copies_.back(), t});
    return copies_.back().data();
  }
  void finish() {
    for (auto& [v, t] : writeback_) from_f32_vector(*v, t);
  }

 private:
  std::deque<std::vector<float>> copies_;  // deque: pointers stay valid as it grows
  std::vector<std::pair<std::vector<float>*, Tensor>> writeback_;
};

}  // namespace

void run_f32_gemm_serial(const F32Gemm& g) {
  if (g.m == 0 || g.n == 0) return;
  run_tile(g, 0, g.m, 0, g.n);
}

void run_f32_gemms(std::span<const F32Gemm> gemms) {
  std::vector<Tile> tiles;
  for (size_t gi = 0; gi < gemms.size(); ++gi) {
    const F32Gemm& g = gemms[gi];
    for (int64_t i = 0; i < g.m; i += kTileM) {
      for (int64_t j = 0; j < g.n; j += kTileN) {
        tiles.push_back(
            {static_cast<int32_t>(gi), i, std::min(g.m, i + kTileM), j, std::min(g.n, j + kTileN)});
      }
    }
  }
  parallel_for_each(static_cast<int64_t>(tiles.size()), 1, [&](int64_t t) {
    const Tile& tl = tiles[static_cast<size_t>(t)];
    run_tile(gemms[static_cast<size_t>(tl.gemm)], tl.i0, tl.i1, tl.j0, tl.j1);
  });
}

void gemm(Stream& s, const GemmArgs& args) {
  s.enqueue_host([args] {
    const Tensor &a = args.a, &b = args.b, &c = args.c;
    const bool ta = args.trans_a == Transpose::Yes, tb = args.trans_b == Transpose::Yes;
    const bool batched = a.rank() == 3;
    const int64_t batch = batched ? a.dim(0) : 1;
    const int64_t m = ta ? a.dim(-1) : a.dim(-2), k = ta ? a.dim(-2) : a.dim(-1);
    const int64_t n = tb ? b.dim(-2) : b.dim(-1);
    if (batch == 0 || m == 0 || n == 0) return;
    Staging st;
    const float* ap = st.input(a);
    const float* bp = st.input(b);
    float* cp = st.output(c, args.beta);
    const int64_t b_stride = b.rank() == 3 ? k * n : 0;
    std::vector<F32Gemm> gs;
    for (int64_t i = 0; i < batch; ++i) {
      gs.push_back({ap + i * m * k, bp + i * b_stride, cp + i * m * n, m, n, k, ta, tb, args.alpha,
                    args.beta});
    }
    run_f32_gemms(gs);
    st.finish();
  });
}

void grouped_gemm(Stream& s, std::span<const GemmProblem> problems, Transpose trans_a,
                  Transpose trans_b, float alpha, float beta) {
  std::vector<GemmProblem> ps(problems.begin(), problems.end());
  s.enqueue_host([ps = std::move(ps), trans_a, trans_b, alpha, beta] {
    const bool ta = trans_a == Transpose::Yes, tb = trans_b == Transpose::Yes;
    Staging st;
    std::vector<F32Gemm> gs;
    for (const GemmProblem& p : ps) {
      const int64_t m = ta ? p.a.dim(1) : p.a.dim(0), k = ta ? p.a.dim(0) : p.a.dim(1);
      const int64_t n = tb ? p.b.dim(0) : p.b.dim(1);
      if (m == 0 || n == 0) continue;
      gs.push_back(
          {st.input(p.a), st.input(p.b), st.output(p.c, beta), m, n, k, ta, tb, alpha, beta});
    }
    run_f32_gemms(gs);
    st.finish();
  });
}

}  // namespace moezero::cpu
