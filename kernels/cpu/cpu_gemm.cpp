// kernels/cpu/cpu_gemm.cpp — gemm, batched gemm and grouped gemm on the CPU.
//
// Everything funnels into fp32 GEMMs run by single-threaded library calls (oneDNN's dnnl_sgemm,
// or OpenBLAS's cblas_sgemm when the build has no oneDNN), one per fixed tile of C
// (kTileM x kTileN), in parallel over TBB. bf16 x bf16 products run as oneDNN bf16 matmuls
// (fp32 accumulation into an fp32 C) where the CPU has bf16 dot products; otherwise bf16
// operands are widened to fp32 copies first. A bf16 C is computed in an fp32 working buffer
// (pooled per calling thread) and rounded once, tile by tile, by the task that computed the tile.
// Tile boundaries depend only on the shapes, and every call runs on one thread, so results are
// bit-identical run to run and do not depend on the number of cores. grouped_gemm (the MoE
// layer's experts: every ready expert's row blocks in one call) puts the tiles of all its
// problems in one parallel loop; each problem is computed exactly as a gemm of its own.
//
// One thread per call: Debian's oneDNN runs its parallel regions on GNU OpenMP, whose team size
// is the calling thread's nthreads ICV. Every thread that calls dnnl_sgemm first sets that ICV
// to 1 (omp_set_num_threads(1), once per thread: TBB workers, stream threads, rank threads), so
// a call never forks an OpenMP team under our own TBB parallelism (tests/kernels/
// gemm_threads_test.cpp counts the process's threads). OpenBLAS is pinned to one thread by
// CpuDevice (openblas_set_num_threads(1)).
//
// Files: this one (tiling, bf16 staging, gemm, grouped_gemm), cpu_gemm_library.cpp (one tile
// through the library), cpu_gemm_profile.cpp (--gemm-profile's tile timing); cpu_gemm_tile.h
// joins them.
#include <algorithm>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_gemm_tile.h"

namespace moezero::cpu {
namespace {

constexpr int64_t kTileM = 512;
constexpr int64_t kTileN = 256;

// Tiles are split (rows first, down to kMinTile) while one holds more than kTileWork
// multiply-adds: a weight gradient's depth is the tokens (an expert's can be most of the batch
// early in training), so a single 128 x 256 tile of it would be the longest task of its loop.
// Big tiles pack each operand fewer times (B once per row tile): 512 x 128 and 256 x 256 tiles
// at depth 128 were 1.3-1.5 % faster than 256 x 128 and 128 x 256 on one core and on two
// (issue 14's note).
constexpr int64_t kMinTile = 64;
constexpr int64_t kTileWork = int64_t{256} * 256 * 128;

}  // namespace

std::pair<int64_t, int64_t> gemm_tile_shape(int64_t m, int64_t n, int64_t k) {
  auto fit = [](int64_t t, int64_t len) {  // t, or len rounded up to kMinTile when smaller
    return std::min(t, std::max(kMinTile, (len + kMinTile - 1) / kMinTile * kMinTile));
  };
  int64_t tm = fit(kTileM, m), tn = fit(kTileN, n);
  while (tm * tn * k > kTileWork) {
    if (tm > kMinTile) {
      tm = fit(tm / 2, m);
    } else if (tn > kMinTile) {
      tn = fit(tn / 2, n);
    } else {
      break;
    }
  }
  return {tm, tn};
}

namespace {

struct Tile {
  int32_t gemm;
  int64_t i0, i1, j0, j1;
};

// Fp32 views of a GEMM's tensors: the tensor's own memory when it is f32, else a widened copy
// (and, for C, a write-back after the GEMMs). A bf16 C gets an fp32 working buffer that the
// tiles load and round back themselves (F32Gemm::c16, set by bind()); those buffers come from
// a pool of the calling (stream) thread, kept across calls, so that a step does not allocate
// and fault in fresh pages for every bf16 GEMM.
class Staging {
 public:
  ~Staging() {
    Pool& p = pool();
    for (size_t i = p.used - pooled_; i < p.used; ++i)
      if (p.buffers[i].size() > kKeepFloats) std::vector<float>().swap(p.buffers[i]);
    p.used -= pooled_;
  }
  const float* input(const Tensor& t) {
    if (t.dtype() == DType::F32) return t.data_as<float>();
    copies_.push_back(to_f32_vector(t));
    return copies_.back().data();
  }
  // The fp32 C to compute into; *c16 is set to the bf16 C that the tiles then load (beta != 0)
  // and round into themselves (F32Gemm::c16), else to null.
  float* output(const Tensor& t, float beta, bf16** c16) {
    *c16 = nullptr;
    if (t.dtype() == DType::F32) return t.data_as<float>();
    if (t.dtype() == DType::BF16) {
      Pool& p = pool();
      if (p.used == p.buffers.size()) p.buffers.emplace_back();
      std::vector<float>& v = p.buffers[p.used++];
      ++pooled_;
      if (v.size() < static_cast<size_t>(t.numel())) v.resize(static_cast<size_t>(t.numel()));
      *c16 = t.data_as<bf16>();
      return v.data();
    }
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
  // Working buffers above this size (64 MiB) are freed after the call rather than kept.
  static constexpr size_t kKeepFloats = size_t{16} << 20;
  struct Pool {
    std::deque<std::vector<float>> buffers;  // deque: references stay valid as it grows
    size_t used = 0;
  };
  static Pool& pool() {
    thread_local Pool p;
    return p;
  }
  std::deque<std::vector<float>> copies_;  // deque: pointers stay valid as it grows
  std::vector<std::pair<std::vector<float>*, Tensor>> writeback_;
  size_t pooled_ = 0;
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
    const auto [tm, tn] = gemm_tile_shape(g.m, g.n, g.k);
    for (int64_t i = 0; i < g.m; i += tm) {
      for (int64_t j = 0; j < g.n; j += tn) {
        tiles.push_back(
            {static_cast<int32_t>(gi), i, std::min(g.m, i + tm), j, std::min(g.n, j + tn)});
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
    const bool native16 =
        a.dtype() == DType::BF16 && b.dtype() == DType::BF16 && k > 0 && bf16_gemm_available();
    const float* ap = native16 ? nullptr : st.input(a);
    const float* bp = native16 ? nullptr : st.input(b);
    bf16* c16 = nullptr;
    float* cp = st.output(c, args.beta, &c16);
    const int64_t b_stride = b.rank() == 3 ? k * n : 0;
    std::vector<F32Gemm> gs;
    for (int64_t i = 0; i < batch; ++i) {
      F32Gemm g{nullptr, nullptr, cp + i * m * n, m, n, k, ta, tb, args.alpha, args.beta};
      if (c16) g.c16 = c16 + i * m * n;
      if (native16) {
        g.a16 = a.data_as<bf16>() + i * m * k;
        g.b16 = b.data_as<bf16>() + i * b_stride;
      } else {
        g.a = ap + i * m * k;
        g.b = bp + i * b_stride;
      }
      gs.push_back(g);
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
      if (p.a.dtype() == DType::BF16 && p.b.dtype() == DType::BF16 && k > 0 &&
          bf16_gemm_available()) {
        bf16* c16 = nullptr;
        F32Gemm g{nullptr, nullptr, st.output(p.c, beta, &c16), m, n, k, ta, tb, alpha, beta};
        g.c16 = c16;
        g.a16 = p.a.data_as<bf16>();
        g.b16 = p.b.data_as<bf16>();
        gs.push_back(g);
        continue;
      }
      bf16* c16 = nullptr;
      F32Gemm g{st.input(p.a), st.input(p.b), st.output(p.c, beta, &c16), m, n, k, ta, tb,
                alpha,         beta};
      g.c16 = c16;
      gs.push_back(g);
    }
    run_f32_gemms(gs);
    st.finish();
  });
}

}  // namespace moezero::cpu
