// kernels/cpu/cpu_gemm_tile.h — internal to the CPU GEMM: one tile of an fp32 GEMM (F32Gemm,
// cpu_common.h), the unit that run_f32_gemms (cpu_gemm.cpp) hands to its parallel loop.
//   cpu_gemm.cpp          tiling, bf16 staging, gemm and grouped_gemm
//   cpu_gemm_library.cpp  one tile through oneDNN (fp32 sgemm, bf16 matmuls) or CBLAS
//   cpu_gemm_profile.cpp  the per-tile timing of `moezero train --gemm-profile`
#pragma once

#include <cstdint>

#include "kernels/cpu/cpu_common.h"

namespace moezero::cpu {

// One tile [i0, i1) x [j0, j1) of g's C, through its fp32 working copy when C is bf16
// (cpu_gemm_library.cpp).
void run_tile_untimed(const F32Gemm& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1);

// The same, timed when the GEMM profile is on (cpu_gemm_profile.cpp).
void run_tile(const F32Gemm& g, int64_t i0, int64_t i1, int64_t j0, int64_t j1);

}  // namespace moezero::cpu
