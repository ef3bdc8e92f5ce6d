// kernels/cpu/cpu_gemm_library.cpp — one tile of a CPU GEMM through the GEMM library
// (oneDNN's dnnl_sgemm and bf16 matmuls, or OpenBLAS/CBLAS's cblas_sgemm), what the library
// is, and whether bf16 matmuls are available. The overview: cpu_gemm.cpp.
#if MOEZERO_HAVE_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#else
#include <cblas.h>
#endif

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_gemm_tile.h"

#if !MOEZERO_HAVE_ONEDNN && MOEZERO_HAVE_OPENBLAS
extern "C" char* openblas_get_corename(void);
#endif

namespace moezero::cpu {
namespace {

#if MOEZERO_HAVE_ONEDNN
// Once per calling thread: OpenMP regions started from this thread get a team of one.
inline void pin_to_one_openmp_thread() {
  thread_local const bool pinned = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)pinned;
}

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_mic: return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_all: return "all";
  }
  return "unknown";
}

void dnnl_check(dnnl_status_t st, const char* what) {
  MOEZERO_CHECK(st == dnnl_success, what, " failed with oneDNN status ", static_cast<int>(st));
}

dnnl_engine_t cpu_engine() {
  static const dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    dnnl_check(dnnl_engine_create(&e, dnnl_cpu, 0), "dnnl_engine_create");
    return e;
  }();
  return engine;
}

// One bf16 matmul shape: its primitive, made once per process and run by any thread (a
// primitive runs concurrently on several threads when each passes its own scratchpad; every
// thread that makes or runs one is pinned to one OpenMP thread first).
//
// m == 0 keys a primitive whose rows and depth (M, K) are run-time dimensions: one serves every
// M and K, but oneDNN 2.6 then has only its generic "gemm:jit" kernels. Fixed dimensions get
// the brgemm kernels (AMX tiles where the CPU has them: 2-3x the rate on this machine's
// shapes), made per shape. So run_bf16_matmul splits a tile into a fixed part, its rows and
// depth rounded down to multiples of kFixedRows and fixed_depth(k), and run-time remainders;
// expert GEMMs, whose rows (and, for weight gradients, depth) change every step, then reuse a
// small set of primitives. The split is a function of the shape only, as every tile boundary.
struct MatmulKey {
  int64_t m, n, k, lda, ldb, ldc;
  bool ta, tb;
  float alpha, beta;
  bool c16;  // C is bf16 (rounded by the primitive), else fp32
  auto operator<=>(const MatmulKey&) const = default;
};
struct Matmul {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_desc_t scratch{};
  Matmul() = default;
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;
  ~Matmul() {
    if (prim) dnnl_primitive_destroy(prim);
  }
};

constexpr int64_t kFixedRows = 32;
// Primitives kept at most; past it the cache starts over (runs in flight keep theirs alive).
constexpr size_t kMaxMatmuls = 2048;

// Null prim when oneDNN has no bf16 matmul for this shape on this CPU.
std::shared_ptr<const Matmul> make_matmul(const MatmulKey& key) {
  auto mm = std::make_shared<Matmul>();
  const int64_t rows = key.m == 0 ? DNNL_RUNTIME_DIM_VAL : key.m;
  const int64_t depth = key.m == 0 ? DNNL_RUNTIME_DIM_VAL : key.k;
  const dnnl_dims_t ad = {rows, depth}, bd = {depth, key.n}, cd = {rows, key.n};
  const dnnl_dims_t as = {key.ta ? 1 : key.lda, key.ta ? key.lda : 1};
  const dnnl_dims_t bs = {key.tb ? 1 : key.ldb, key.tb ? key.ldb : 1};
  const dnnl_dims_t cs = {key.ldc, 1};
  dnnl_memory_desc_t a, b, c;
  dnnl_check(dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_bf16, as), "memory_desc a");
  dnnl_check(dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_bf16, bs), "memory_desc b");
  dnnl_check(dnnl_memory_desc_init_by_strides(&c, 2, cd, key.c16 ? dnnl_bf16 : dnnl_f32, cs),
             "memory_desc c");
  dnnl_matmul_desc_t md;
  dnnl_check(dnnl_matmul_desc_init(&md, &a, &b, nullptr, &c), "dnnl_matmul_desc_init");
  dnnl_primitive_attr_t attr = nullptr;
  dnnl_check(dnnl_primitive_attr_create(&attr), "dnnl_primitive_attr_create");
  // Scratch memory from us, kept across calls (the library's own is allocated per execution).
  dnnl_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
             "scratchpad mode");
  if (key.alpha != 1.0f)
    dnnl_check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &key.alpha), "output scales");
  if (key.beta != 0.0f) {
    dnnl_post_ops_t po = nullptr;
    dnnl_check(dnnl_post_ops_create(&po), "dnnl_post_ops_create");
    dnnl_check(dnnl_post_ops_append_sum(po, key.beta), "dnnl_post_ops_append_sum");
    dnnl_check(dnnl_primitive_attr_set_post_ops(attr, po), "dnnl_primitive_attr_set_post_ops");
    dnnl_post_ops_destroy(po);
  }
  dnnl_primitive_desc_t pd = nullptr;
  if (dnnl_primitive_desc_create(&pd, &md, attr, cpu_engine(), nullptr) == dnnl_success) {
    dnnl_check(dnnl_primitive_create(&mm->prim, pd), "dnnl_primitive_create");
    mm->scratch = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    dnnl_primitive_desc_destroy(pd);
  }
  dnnl_primitive_attr_destroy(attr);
  return mm;
}

std::shared_ptr<const Matmul> get_matmul(const MatmulKey& key) {
  static std::mutex mu;
  static std::map<MatmulKey, std::shared_ptr<const Matmul>> cache;
  {
    std::lock_guard lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  std::shared_ptr<const Matmul> mm = make_matmul(key);  // outside the lock: JIT takes a while
  std::lock_guard lock(mu);
  if (cache.size() >= kMaxMatmuls) cache.clear();
  return cache.emplace(key, std::move(mm)).first->second;  // a racing maker's if it won
}

struct ThreadStream {
  dnnl_stream_t stream = nullptr;
  std::vector<char> scratch;  // user scratchpad, grown to the largest need and kept
  ~ThreadStream() {
    if (stream) dnnl_stream_destroy(stream);
  }
};

ThreadStream& thread_stream() {
  thread_local ThreadStream ts;
  if (!ts.stream)
    dnnl_check(dnnl_stream_create(&ts.stream, cpu_engine(), dnnl_stream_default_flags),
               "dnnl_stream_create");
  return ts;
}

// Runs mm on the given operands (their m and k must equal mm's where those are fixed).
void execute_matmul(const Matmul& mm, const bf16* a, int64_t lda, const bf16* b, int64_t ldb,
                    void* c, bool c16, int64_t ldc, int64_t m, int64_t n, int64_t k, bool ta,
                    bool tb) {
  ThreadStream& ts = thread_stream();
  const size_t need = dnnl_memory_desc_get_size(&mm.scratch);
  if (need > ts.scratch.size()) ts.scratch.resize(need);
  dnnl_memory_desc_t amd, bmd, cmd;
  const dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
  const dnnl_dims_t as = {ta ? 1 : lda, ta ? lda : 1}, bs = {tb ? 1 : ldb, tb ? ldb : 1},
                    cs = {ldc, 1};
  dnnl_check(dnnl_memory_desc_init_by_strides(&amd, 2, ad, dnnl_bf16, as), "memory_desc a");
  dnnl_check(dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dnnl_bf16, bs), "memory_desc b");
  dnnl_check(dnnl_memory_desc_init_by_strides(&cmd, 2, cd, c16 ? dnnl_bf16 : dnnl_f32, cs),
             "memory_desc c");
  dnnl_memory_t am = nullptr, bm = nullptr, cm = nullptr;
  dnnl_check(dnnl_memory_create(&am, &amd, cpu_engine(), const_cast<bf16*>(a)), "memory a");
  dnnl_check(dnnl_memory_create(&bm, &bmd, cpu_engine(), const_cast<bf16*>(b)), "memory b");
  dnnl_check(dnnl_memory_create(&cm, &cmd, cpu_engine(), c), "memory c");
  dnnl_memory_t sm = nullptr;
  dnnl_check(dnnl_memory_create(&sm, &mm.scratch, cpu_engine(), ts.scratch.data()), "scratch");
  const dnnl_exec_arg_t args[] = {
      {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}, {DNNL_ARG_SCRATCHPAD, sm}};
  const dnnl_status_t st = dnnl_primitive_execute(mm.prim, ts.stream, 4, args);
  const dnnl_status_t wt = dnnl_stream_wait(ts.stream);
  dnnl_memory_destroy(am);
  dnnl_memory_destroy(bm);
  dnnl_memory_destroy(cm);
  dnnl_memory_destroy(sm);
  dnnl_check(st, "dnnl_primitive_execute (bf16 matmul)");
  dnnl_check(wt, "dnnl_stream_wait");
}

// The fixed depth of a K: a multiple of 64 up to 1024, of 256 up to 8192, of 1024 beyond (at
// most 16 + 28 + k / 1024 primitives per GEMM shape whose K varies).
int64_t fixed_depth(int64_t k) {
  const int64_t q = k <= 1024 ? 64 : k <= 8192 ? 256 : 1024;
  return k / q * q;
}

// True when run_bf16_matmul runs depth k in one part (what a bf16 C written by the matmul
// itself needs: a depth remainder would add to a C already rounded to bf16).
bool one_depth_part(int64_t k) { return fixed_depth(k) == k || fixed_depth(k) == 0; }

// C tile (m, n) at c (ldc; fp32, or bf16 when c16, which needs one_depth_part(k)) = alpha op(A)
// op(B) + beta C with bf16 A, B. False when oneDNN has no bf16 matmul here (nothing written).
bool run_bf16_matmul(const bf16* a, int64_t lda, const bf16* b, int64_t ldb, void* c, bool c16,
                     int64_t ldc, int64_t m, int64_t n, int64_t k, bool ta, bool tb, float alpha,
                     float beta) {
  pin_to_one_openmp_thread();
  const int64_t m0 = m / kFixedRows * kFixedRows, k0 = fixed_depth(k);
  // The parts: [rows) x [depth) with their primitive; the depth remainder adds (beta 1).
  struct Part {
    int64_t i0, rows, p0, depth;
    float beta;
    std::shared_ptr<const Matmul> mm;
  };
  Part parts[4];
  int np = 0;
  auto add = [&](int64_t i0, int64_t rows, int64_t p0, int64_t depth, float pb, bool fixed) {
    if (rows == 0 || depth == 0) return true;
    auto mm =
        get_matmul({fixed ? rows : 0, n, fixed ? depth : 0, lda, ldb, ldc, ta, tb, alpha, pb, c16});
    if (!mm->prim) return false;
    parts[np++] = {i0, rows, p0, depth, pb, std::move(mm)};
    return true;
  };
  for (const bool head : {true, false}) {
    const int64_t i0 = head ? 0 : m0, rows = head ? m0 : m - m0;
    if (!add(i0, rows, 0, k0, beta, head)) return false;
    if (!add(i0, rows, k0, k - k0, k0 > 0 ? 1.0f : beta, false)) return false;
  }
  for (int i = 0; i < np; ++i) {
    const Part& p = parts[i];
    const bf16* ap = (ta ? a + p.p0 * lda + p.i0 : a + p.i0 * lda + p.p0);
    const bf16* bp = (tb ? b + p.p0 : b + p.p0 * ldb);
    void* cp = c16 ? static_cast<void*>(static_cast<bf16*>(c) + p.i0 * ldc)
                   : static_cast<void*>(static_cast<float*>(c) + p.i0 * ldc);
    execute_matmul(*p.mm, ap, lda, bp, ldb, cp, c16, ldc, p.rows, n, p.depth, ta, tb);
  }
  return true;
}
#endif

void run_tile_f32(const F32Gemm& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const int64_t ldc = g.row_c();
  if (g.k == 0 || g.alpha == 0.0f) {
    // C = beta * C (beta == 0 writes zeros, ignoring NaN in the old contents).
    for (int64_t i = i0; i < i1; ++i) {
      float* row = g.c + i * ldc;
      for (int64_t j = j0; j < j1; ++j) row[j] = g.beta == 0.0f ? 0.0f : g.beta * row[j];
    }
    return;
  }
#if !MOEZERO_HAVE_ONEDNN
  if (g.beta == 0.0f) {
    // BLAS implementations may compute 0 * NaN; the contract says beta == 0 ignores C.
    for (int64_t i = i0; i < i1; ++i) std::fill(g.c + i * ldc + j0, g.c + i * ldc + j1, 0.0f);
  }
#endif
  // oneDNN: with beta == 0, dnnl_sgemm does not read C (its beta-zero kernels; checked over
  // ~20k shapes, every transpose and ldc, against a NaN-filled C: the same bits as a zeroed C)
  // and the bf16 matmul has no sum post-op, so C is write-only and is not zeroed first
  // (tests/kernels/gemm_test.cpp BetaZeroIgnoresANonFiniteC).
  const int64_t lda = g.row_a();
  const int64_t ldb = g.row_b();
#if MOEZERO_HAVE_ONEDNN
  if (g.a16 && g.b16) {
    const bf16* a16 = g.ta ? g.a16 + i0 : g.a16 + i0 * lda;
    const bf16* b16 = g.tb ? g.b16 + j0 * ldb : g.b16 + j0;
    const bool done = run_bf16_matmul(a16, lda, b16, ldb, g.c + i0 * ldc + j0, false, ldc, i1 - i0,
                                      j1 - j0, g.k, g.ta, g.tb, g.alpha, g.beta);
    MOEZERO_CHECK(done, "bf16 GEMM: oneDNN has no bf16 matmul for this shape on this CPU");
    return;
  }
#endif
  const float* ap = g.ta ? g.a + i0 : g.a + i0 * lda;
  const float* bp = g.tb ? g.b + j0 * ldb : g.b + j0;
#if MOEZERO_HAVE_ONEDNN
  pin_to_one_openmp_thread();
  const dnnl_status_t st = dnnl_sgemm(g.ta ? 'T' : 'N', g.tb ? 'T' : 'N', i1 - i0, j1 - j0, g.k,
                                      g.alpha, ap, lda, bp, ldb, g.beta, g.c + i0 * ldc + j0, ldc);
  MOEZERO_CHECK(st == dnnl_success, "dnnl_sgemm failed with status ", static_cast<int>(st), " (m ",
                i1 - i0, ", n ", j1 - j0, ", k ", g.k, ")");
#else
  cblas_sgemm(CblasRowMajor, g.ta ? CblasTrans : CblasNoTrans, g.tb ? CblasTrans : CblasNoTrans,
              static_cast<int>(i1 - i0), static_cast<int>(j1 - j0), static_cast<int>(g.k), g.alpha,
              ap, static_cast<int>(lda), bp, static_cast<int>(ldb), g.beta, g.c + i0 * ldc + j0,
              static_cast<int>(ldc));
#endif
}

}  // namespace

// One tile [i0, i1) x [j0, j1) of g's C, through its fp32 working copy when C is bf16.
void run_tile_untimed(const F32Gemm& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  if (!g.c16) return run_tile_f32(g, i0, i1, j0, j1);
  MOEZERO_CHECK(g.lda == 0 && g.ldb == 0 && g.ldc == 0, "bf16 GEMM operands must be dense");
#if MOEZERO_HAVE_ONEDNN
  // bf16 x bf16 -> bf16 C at beta 0: the matmul rounds its fp32 accumulators into C itself (RNE,
  // as store_f32; its bf16 kernels flush subnormal accumulators to zero either way), with no
  // fp32 working tile to write, read back and round.
  if (g.a16 && g.b16 && g.beta == 0.0f && g.alpha != 0.0f && g.k > 0 && one_depth_part(g.k)) {
    const int64_t lda = g.ta ? g.m : g.k, ldb = g.tb ? g.k : g.n;
    const bf16* a16 = g.ta ? g.a16 + i0 : g.a16 + i0 * lda;
    const bf16* b16 = g.tb ? g.b16 + j0 * ldb : g.b16 + j0;
    const bool done = run_bf16_matmul(a16, lda, b16, ldb, g.c16 + i0 * g.n + j0, true, g.n, i1 - i0,
                                      j1 - j0, g.k, g.ta, g.tb, g.alpha, 0.0f);
    MOEZERO_CHECK(done, "bf16 GEMM: oneDNN has no bf16 matmul for this shape on this CPU");
    return;
  }
#endif
  if (g.beta != 0.0f)
    for (int64_t i = i0; i < i1; ++i) load_f32(g.c16 + i * g.n + j0, g.c + i * g.n + j0, j1 - j0);
  run_tile_f32(g, i0, i1, j0, j1);
  for (int64_t i = i0; i < i1; ++i) store_f32(g.c + i * g.n + j0, g.c16 + i * g.n + j0, j1 - j0);
}

bool bf16_gemm_available() {
#if MOEZERO_HAVE_ONEDNN
  // Probed once (on the first caller's thread): a 16 x 16 x 16 bf16 matmul.
  static const bool ok = [] {
    std::vector<bf16> a(256, float_to_bf16(1.0f)), b(256, float_to_bf16(0.5f));
    std::vector<float> c(256, 0.0f);
    if (!run_bf16_matmul(a.data(), 16, b.data(), 16, c.data(), false, 16, 16, 16, 16, false, false,
                         1.0f, 0.0f))
      return false;
    return std::all_of(c.begin(), c.end(), [](float v) { return v == 8.0f; });
  }();
  return ok;
#else
  return false;
#endif
}

GemmLibraryInfo gemm_library_info() {
  GemmLibraryInfo info;
#if MOEZERO_HAVE_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  info.library = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                 std::to_string(v->patch);
  info.kernels = isa_name(dnnl_get_effective_cpu_isa());
  info.avx512_class = info.kernels.rfind("avx512", 0) == 0;
  info.avx2_class = info.avx512_class || info.kernels.rfind("avx2", 0) == 0;
#elif MOEZERO_HAVE_OPENBLAS
  info.library = "OpenBLAS";
  info.kernels = openblas_get_corename();
  // OpenBLAS's x86-64 kernel families with AVX-512 / AVX2 GEMM kernels.
  for (const char* k : {"SkylakeX", "Cooperlake", "SapphireRapids"})
    if (info.kernels == k) info.avx512_class = true;
  info.avx2_class = info.avx512_class;
  for (const char* k : {"Haswell", "Zen"})
    if (info.kernels == k) info.avx2_class = true;
#else
  info.library = "CBLAS";
  info.kernels = "unknown";
#endif
  return info;
}
}  // namespace moezero::cpu

namespace moezero {

std::string cpu_gemm_description() {
  const cpu::GemmLibraryInfo info = cpu::gemm_library_info();
  std::string s = "GEMM " + info.library + ", " + info.kernels + " kernels, one thread per call";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && !info.avx512_class) {
    s += " (WARNING: this CPU has AVX-512 but these kernels do not use it";
    if (info.library == "OpenBLAS") s += "; set OPENBLAS_CORETYPE=SKYLAKEX or build with oneDNN";
    s += ")";
  }
  return s;
}

}  // namespace moezero
