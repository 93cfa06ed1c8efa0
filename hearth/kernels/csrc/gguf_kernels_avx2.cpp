// The avx2 tier's kernels (AVX2 + FMA + F16C + BMI2, no AVX-512): decode_library.h's entry points on
// the AVX2 vectors (simd_avx2.h), block unpackers and int8 dot product (blocks_avx2.h), its many-row
// GEMM (gemm_avx2.h), plus this tier's CPU checks.
//
// Build: g++ -O3 -mavx2 -mfma -mf16c -mbmi2 -ffp-contract=off -fopenmp (-ffp-contract=off keeps
// dequantization bit-exact with gguf-py: s * q, then + o, two roundings).

#include "simd_avx2.h"
#include "blocks_avx2.h"
#include "gemm_avx2.h"
#include "attention_pages.h"
#include "tier.h"

namespace {

// the block types this library reads, by GGML id (decode_library.h's entry points take them)
template <template <class> class F, class... Args>
bool dispatch(int qtype, Args&&... args) {
  switch (qtype) {
    case Q4_0: F<B32<FQ4_0>>::run(args...); return true;
    case Q4_1: F<B32<FQ4_1>>::run(args...); return true;
    case Q5_0: F<B32<FQ5_0>>::run(args...); return true;
    case Q5_1: F<B32<FQ5_1>>::run(args...); return true;
    case Q8_0: F<B32<FQ8_0>>::run(args...); return true;
    case Q2_K: F<K2>::run(args...); return true;
    case Q3_K: F<K3>::run(args...); return true;
    case Q4_K: F<K4>::run(args...); return true;
    case Q5_K: F<K5>::run(args...); return true;
    case Q6_K: F<K6>::run(args...); return true;
    case IQ4_NL: F<IQ4NL32>::run(args...); return true;
    case IQ4_XS: F<IQ4XS>::run(args...); return true;
    case MXFP4: F<MX32>::run(args...); return true;
    default: return false;
  }
}

}  // namespace

#include "decode_library.h"
#include "peaks.h"

extern "C" {

// The tier hearth/kernels/tiers.py chose (CpuTier): this library runs the avx2 tier only.
int hk_set_tier(int level) {
  if (level != TIER_AVX2) return -1;
  cpu_tier() = level;
  return 0;
}

// 1: from a plan's gemm_min_rows on, matmuls run on the int8 GEMM (gemm_avx2.h), prefills included
int hk_many_rows() { return 1; }

// Whether the GEMM's integer dots take AVX-VNNI (1) or vpmaddubsw + vpmaddwd (0): on = -1 asks, 0 or
// 1 sets (1 only where the CPU has it; tests compare the two, which give the same bits)
int hk_avx_vnni(int on) {
  if (on >= 0) gemm_avx_vnni() = on != 0 && avx_vnni_usable();
  return gemm_avx_vnni() ? 1 : 0;
}

// Activation bytes per chunk of the GEMM (its rows' bits do not depend on it): bytes <= 0 asks
int64_t hk_gemm_chunk_bytes(int64_t bytes) {
  if (bytes > 0) gemm_chunk_bytes() = bytes;
  return gemm_chunk_bytes();
}

int hk_cpu_ok() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("bmi2");
}

}  // extern "C"
