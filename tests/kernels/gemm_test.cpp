// tests/kernels/gemm_test.cpp — gemm (plain, batched, every transpose, alpha/beta, bf16 with
// f32 or bf16 C) and grouped_gemm (uneven and empty problems) against a float64 reference, plus
// the shape/dtype validation of both.
#include <bit>
#include <limits>

#include "tests/kernels/kernel_test_util.h"

namespace moezero::test {
namespace {

class GemmTest : public KernelTest {
 protected:
  // c (m, n) = alpha op(a) op(b) + beta c, in double, on the given (already rounded) values.
  static DVec ref_gemm(const Vec& a, const Vec& b, const Vec& c, int64_t m, int64_t n, int64_t k,
                       bool ta, bool tb, double alpha, double beta) {
    DVec out(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          const double av = ta ? a[p * m + i] : a[i * k + p];
          const double bv = tb ? b[j * k + p] : b[p * n + j];
          acc += av * bv;
        }
        out[i * n + j] = alpha * acc + (beta == 0.0 ? 0.0 : beta * c[i * n + j]);
      }
    }
    return out;
  }

  // One (optionally batched) gemm case; checks the result against ref_gemm.
  void run_case(DType at, DType ct, int64_t batch, bool b_shared, int64_t m, int64_t n, int64_t k,
                bool ta, bool tb, float alpha, float beta) {
    SCOPED_TRACE(::testing::Message()
                 << "A " << dtype_name(at) << " C " << dtype_name(ct) << " batch " << batch
                 << (b_shared ? " (b shared)" : "") << " m " << m << " n " << n << " k " << k
                 << " ta " << ta << " tb " << tb << " alpha " << alpha << " beta " << beta);
    const int64_t nb = std::max<int64_t>(batch, 1);  // batch 0 = unbatched (2-D)
    const int64_t bb = b_shared ? 1 : nb;
    Vec a = round_to(at, rand_vec(static_cast<size_t>(nb * m * k)));
    Vec b = round_to(at, rand_vec(static_cast<size_t>(bb * k * n)));
    Vec c = round_to(ct, rand_vec(static_cast<size_t>(nb * m * n)));
    if (beta == 0.0f && !c.empty()) c[0] = std::numeric_limits<float>::quiet_NaN();
    auto shape3 = [&](int64_t bt, int64_t r, int64_t cl) {
      return batch == 0 ? Shape{r, cl} : Shape{bt, r, cl};
    };
    TensorBuffer ta_buf = upload(a, at, shape3(batch, ta ? k : m, ta ? m : k));
    TensorBuffer tb_buf = upload(
        b, at, b_shared ? Shape{tb ? n : k, tb ? k : n} : shape3(bb, tb ? n : k, tb ? k : n));
    TensorBuffer tc_buf = upload(c, ct, shape3(batch, m, n));
    GemmArgs args{ta_buf,
                  tb_buf,
                  tc_buf,
                  ta ? Transpose::Yes : Transpose::No,
                  tb ? Transpose::Yes : Transpose::No,
                  alpha,
                  beta};
    ops().gemm(s(), args);
    const Vec got = download(tc_buf);
    DVec ref;
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t bi = b_shared ? 0 : i;
      Vec ai(a.begin() + i * m * k, a.begin() + (i + 1) * m * k);
      Vec bi_(b.begin() + bi * k * n, b.begin() + (bi + 1) * k * n);
      Vec ci(c.begin() + i * m * n, c.begin() + (i + 1) * m * n);
      DVec r = ref_gemm(ai, bi_, ci, m, n, k, ta, tb, alpha, beta);
      ref.insert(ref.end(), r.begin(), r.end());
    }
    // Output scale ~ sqrt(k) / 3 for U(-1, 1) inputs. The error is set by C's dtype: with an f32
    // C only fp32 accumulation error remains (bf16 inputs were rounded before the reference).
    const Tol t = tol_for(ct, k, 1.0 + std::sqrt(static_cast<double>(k)));
    EXPECT_TRUE(all_close(got, ref, t.rtol, t.atol));
  }
};

TEST_P(GemmTest, AllTransposesOddSizesF32AndBf16) {
  const int64_t sizes[][3] = {{1, 1, 1}, {3, 17, 129}, {129, 3, 17}, {17, 129, 3}, {5, 7, 0}};
  for (DType at : {DType::F32, DType::BF16}) {
    for (DType ct : {DType::F32, at}) {
      for (auto& sz : sizes) {
        for (int tr = 0; tr < 4; ++tr) {
          run_case(at, ct, 0, false, sz[0], sz[1], sz[2], tr & 1, tr & 2, 1.0f, 0.0f);
        }
      }
      if (at == DType::BF16 && ct == DType::BF16) break;
    }
  }
}

TEST_P(GemmTest, AlphaBetaAndTilesLargerThanOneBlock) {
  // 300 x 260 crosses the CPU backend's 256 x 256 tiles in both directions.
  for (DType at : {DType::F32, DType::BF16}) {
    run_case(at, DType::F32, 0, false, 300, 260, 33, false, true, 0.5f, 1.5f);
    run_case(at, at, 0, false, 17, 3, 65, true, false, -2.0f, 0.25f);
    run_case(at, DType::F32, 0, false, 4, 5, 0, false, false, 1.0f, 0.5f);  // k = 0: c = beta c
  }
}

// The CPU backend runs a bf16 tile as fixed-shape matmuls (rows rounded down to 32, depth to
// 64, or 256 past 1024) plus run-time remainders that add into C: shapes on both sides of each
// split, every transpose, with and without beta.
TEST_P(GemmTest, Bf16FixedAndRemainderPartsAddUp) {
  const int64_t sizes[][3] = {
      {32, 16, 64}, {33, 20, 65}, {31, 8, 127}, {64, 24, 1030}, {300, 40, 129}};
  for (auto& sz : sizes) {
    for (int tr = 0; tr < 4; ++tr) {
      run_case(DType::BF16, DType::F32, 0, false, sz[0], sz[1], sz[2], tr & 1, tr & 2, 1.0f, 0.0f);
      run_case(DType::BF16, DType::F32, 0, false, sz[0], sz[1], sz[2], tr & 1, tr & 2, 0.5f, 1.5f);
      run_case(DType::BF16, DType::BF16, 0, false, sz[0], sz[1], sz[2], tr & 1, tr & 2, 1.0f,
               tr == 3 ? 1.0f : 0.0f);
    }
  }
}

// A bf16 C at beta 0 is rounded by the bf16 matmul itself on the CPU: the same bits as the fp32
// C of the same product rounded to bf16 (RNE), at the bench config's shapes and odd ones.
TEST_P(GemmTest, Bf16CAtBetaZeroIsTheRoundedF32C) {
  const int64_t sizes[][3] = {{256, 256, 128}, {70, 128, 256}, {33, 20, 65}, {5, 7, 1030}};
  for (auto& sz : sizes) {
    for (int tr = 0; tr < 4; ++tr) {
      const int64_t m = sz[0], n = sz[1], k = sz[2];
      const bool ta = tr & 1, tb = tr & 2;
      SCOPED_TRACE(::testing::Message()
                   << "m " << m << " n " << n << " k " << k << " ta " << ta << " tb " << tb);
      TensorBuffer a = upload(round_to(DType::BF16, rand_vec(static_cast<size_t>(m * k))),
                              DType::BF16, ta ? Shape{k, m} : Shape{m, k});
      TensorBuffer b = upload(round_to(DType::BF16, rand_vec(static_cast<size_t>(k * n))),
                              DType::BF16, tb ? Shape{n, k} : Shape{k, n});
      TensorBuffer c32 = upload(Vec(static_cast<size_t>(m * n), 0.0f), DType::F32, Shape{m, n});
      TensorBuffer c16 = upload(Vec(static_cast<size_t>(m * n), 0.0f), DType::BF16, Shape{m, n});
      const Transpose tra = ta ? Transpose::Yes : Transpose::No;
      const Transpose trb = tb ? Transpose::Yes : Transpose::No;
      ops().gemm(s(), GemmArgs{a, b, c32, tra, trb, 0.75f, 0.0f});
      ops().gemm(s(), GemmArgs{a, b, c16, tra, trb, 0.75f, 0.0f});
      const Vec want = round_to(DType::BF16, download(c32));
      const Vec got = download(c16);
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i)
        differ += std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]);
      EXPECT_EQ(differ, 0u);
    }
  }
}

// beta == 0 ignores C's old contents entirely: a C full of NaN and infinities, at the GEMM shapes
// of the bench config's experts and attention (the CPU backend then does not zero C first).
TEST_P(GemmTest, BetaZeroIgnoresANonFiniteC) {
  const int64_t sizes[][3] = {{256, 256, 128}, {256, 128, 256}, {128, 128, 256},
                              {300, 260, 33},  {37, 256, 128},  {128, 37, 256},
                              {1, 256, 128},   {64, 64, 32},    {16, 1, 1000}};
  for (DType at : {DType::F32, DType::BF16}) {
    for (DType ct : {DType::F32, at}) {
      for (auto& sz : sizes) {
        for (int tr = 0; tr < 4; ++tr) {
          const int64_t m = sz[0], n = sz[1], k = sz[2];
          SCOPED_TRACE(::testing::Message()
                       << "A " << dtype_name(at) << " C " << dtype_name(ct) << " m " << m << " n "
                       << n << " k " << k << " tr " << tr);
          const bool ta = tr & 1, tb = tr & 2;
          const Vec a = round_to(at, rand_vec(static_cast<size_t>(m * k)));
          const Vec b = round_to(at, rand_vec(static_cast<size_t>(k * n)));
          Vec c(static_cast<size_t>(m * n));
          for (size_t i = 0; i < c.size(); ++i)
            c[i] = i % 3 == 0   ? std::numeric_limits<float>::quiet_NaN()
                   : i % 3 == 1 ? std::numeric_limits<float>::infinity()
                                : -std::numeric_limits<float>::infinity();
          TensorBuffer ab = upload(a, at, ta ? Shape{k, m} : Shape{m, k});
          TensorBuffer bb = upload(b, at, tb ? Shape{n, k} : Shape{k, n});
          TensorBuffer cb = upload(c, ct, Shape{m, n});
          ops().gemm(s(), GemmArgs{ab, bb, cb, ta ? Transpose::Yes : Transpose::No,
                                   tb ? Transpose::Yes : Transpose::No, 1.0f, 0.0f});
          const Vec got = download(cb);
          const Tol t = tol_for(ct, k, 1.0 + std::sqrt(static_cast<double>(k)));
          EXPECT_TRUE(all_close(got, ref_gemm(a, b, c, m, n, k, ta, tb, 1.0, 0.0), t.rtol, t.atol));
        }
      }
      if (at == DType::BF16 && ct == DType::BF16) break;
    }
  }
}

TEST_P(GemmTest, Batched) {
  for (DType at : {DType::F32, DType::BF16}) {
    run_case(at, DType::F32, 3, false, 17, 5, 9, false, false, 1.0f, 0.0f);
    run_case(at, at, 2, true, 3, 129, 17, true, true, 1.0f, 1.0f);
    run_case(at, DType::F32, 1, true, 1, 1, 1, false, true, 2.0f, 0.0f);
  }
}

TEST_P(GemmTest, GroupedUnevenAndEmptyProblems) {
  // Expert-style: dW_e (n, c) = dY_e^T (n, m_e) @ X_e (m_e, c), m_e uneven, some 0.
  const int64_t rows[] = {5, 0, 17, 1, 0, 129, 3, 2};
  const int64_t n = 6, c = 11;
  for (DType at : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(at));
    std::vector<TensorBuffer> bufs;
    std::vector<GemmProblem> probs;
    std::vector<Vec> as, bs, cs;
    for (int64_t me : rows) {
      as.push_back(round_to(at, rand_vec(static_cast<size_t>(me * n))));
      bs.push_back(round_to(at, rand_vec(static_cast<size_t>(me * c))));
      cs.push_back(rand_vec(static_cast<size_t>(n * c)));
      bufs.push_back(upload(as.back(), at, Shape{me, n}));
      bufs.push_back(upload(bs.back(), at, Shape{me, c}));
      bufs.push_back(upload(cs.back(), DType::F32, Shape{n, c}));
      probs.push_back({bufs[bufs.size() - 3], bufs[bufs.size() - 2], bufs.back()});
    }
    ops().grouped_gemm(s(), probs, Transpose::Yes, Transpose::No, 1.0f, 1.0f);
    for (size_t e = 0; e < probs.size(); ++e) {
      const DVec ref = ref_gemm(as[e], bs[e], cs[e], n, c, rows[e], true, false, 1.0, 1.0);
      const Tol t = tol_for(DType::F32, rows[e], 1.0 + std::sqrt(double(rows[e])));
      EXPECT_TRUE(all_close(download(probs[e].c), ref, t.rtol, t.atol)) << "problem " << e;
    }
    // Forward-style: Y_e (m_e, n) = X_e (m_e, c) @ W_e^T, bf16 C, beta 0.
    std::vector<GemmProblem> fwd;
    std::vector<Vec> ws;
    for (size_t e = 0; e < probs.size(); ++e) {
      ws.push_back(round_to(at, rand_vec(static_cast<size_t>(n * c))));
      bufs.push_back(upload(ws.back(), at, Shape{n, c}));
      bufs.push_back(alloc(at, Shape{rows[e], n}));
      fwd.push_back({probs[e].b, bufs[bufs.size() - 2], bufs.back()});
    }
    ops().grouped_gemm(s(), fwd, Transpose::No, Transpose::Yes, 1.0f, 0.0f);
    for (size_t e = 0; e < fwd.size(); ++e) {
      const DVec ref = ref_gemm(bs[e], ws[e], {}, rows[e], n, c, false, true, 1.0, 0.0);
      const Tol t = tol_for(at, c, 1.0 + std::sqrt(double(c)));
      EXPECT_TRUE(all_close(download(fwd[e].c), ref, t.rtol, t.atol)) << "problem " << e;
    }
  }
}

TEST_P(GemmTest, ValidationNamesOpArgumentAndValues) {
  TensorBuffer a = alloc(DType::F32, Shape{3, 4});
  TensorBuffer b = alloc(DType::F32, Shape{5, 2});
  TensorBuffer c = alloc(DType::F32, Shape{3, 2});
  TensorBuffer bh = alloc(DType::BF16, Shape{4, 2});
  TensorBuffer ci = alloc(DType::I32, Shape{3, 2});
  EXPECT_MOEZERO_ERROR(ops().gemm(s(), {a, b, c}), "gemm: a is f32(3, 4) but b is f32(5, 2)");
  EXPECT_MOEZERO_ERROR(ops().gemm(s(), {a, b, c}), "inner dims differ (4 vs 5)");
  EXPECT_MOEZERO_ERROR(ops().gemm(s(), {a, bh, c}), "dtypes differ");
  TensorBuffer b42 = alloc(DType::F32, Shape{4, 2});
  EXPECT_MOEZERO_ERROR(ops().gemm(s(), {a, b42, ci}), "gemm: c is i32(3, 2)");
  TensorBuffer c33 = alloc(DType::F32, Shape{3, 3});
  EXPECT_MOEZERO_ERROR(ops().gemm(s(), {a, b42, c33}), "op(a) @ op(b) is (3, 2)");
  EXPECT_MOEZERO_ERROR(ops().gemm(s(), {Tensor{}, b42, c}), "gemm: a is undefined");
  TensorBuffer a3 = alloc(DType::F32, Shape{2, 3, 4});
  TensorBuffer c3 = alloc(DType::F32, Shape{3, 3, 2});
  EXPECT_MOEZERO_ERROR(ops().gemm(s(), {a3, b42, c3}), "batch sizes differ");
  std::vector<GemmProblem> probs{{a, b42, c}, {a, b, c}};
  EXPECT_MOEZERO_ERROR(ops().grouped_gemm(s(), probs, Transpose::No, Transpose::No, 1.0f, 0.0f),
                       "grouped_gemm: problem 1: a is f32(3, 4) but b is f32(5, 2)");
  // Another device's tensor.
  auto other = make_device(GetParam(), 0);
  TensorBuffer foreign(*other, DType::F32, Shape{4, 2}, MemTag::Activation,
                       other->default_stream());
  EXPECT_MOEZERO_ERROR(ops().gemm(s(), {a, foreign, c}), "gemm: b is f32(4, 2) on");
  sync();
}

MOEZERO_INSTANTIATE_BACKENDS(GemmTest);

}  // namespace
}  // namespace moezero::test
