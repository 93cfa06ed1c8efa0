// The avx2 tier's kernels (AVX2 + FMA + F16C + BMI2, no AVX-512): decode_library.h's entry points on
// the AVX2 vectors (simd_avx2.h), block unpackers and int8 dot product (blocks_avx2.h), plus this
// tier's CPU checks.
//
// Build: g++ -O3 -mavx2 -mfma -mf16c -mbmi2 -ffp-contract=off -fopenmp (-ffp-contract=off keeps
// dequantization bit-exact with gguf-py: s * q, then + o, two roundings).

#include "simd_avx2.h"
#include "blocks_avx2.h"
#include "attention_pages.h"
#include "tier.h"
#include "decode_library.h"

extern "C" {

// The tier hearth/kernels/tiers.py chose (CpuTier): this library runs the avx2 tier only.
int hk_set_tier(int level) {
  if (level != TIER_AVX2) return -1;
  cpu_tier() = level;
  return 0;
}

int hk_cpu_ok() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("bmi2");
}

}  // extern "C"
