// The neon tier's kernels (aarch64: Advanced SIMD, and the int8 dot-product instructions where the
// build targets them): decode_library.h's entry points on the NEON vectors (simd_neon.h), block
// unpackers and int8 dot product (blocks_neon.h), plus this tier's CPU checks.
//
// Build: g++ -O3 -ffp-contract=off -fopenmp [-march=armv8.2-a+dotprod] (hearth/kernels/native.py adds
// the dot-product flag where /proc/cpuinfo lists asimddp; -ffp-contract=off as for the avx2 tier).

#include <sys/auxv.h>

#include "simd_neon.h"
#include "blocks_neon.h"
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

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)  // Linux's arch/arm64 hwcap bit for the SDOT/UDOT instructions
#endif

extern "C" {

// The tier hearth/kernels/tiers.py chose (CpuTier): this library runs the neon tier only.
int hk_set_tier(int level) {
  if (level != TIER_NEON) return -1;
  cpu_tier() = level;
  return 0;
}

// Advanced SIMD is part of every aarch64 CPU; a build with the dot-product instructions needs them.
int hk_cpu_ok() {
#if defined(__ARM_FEATURE_DOTPROD)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
  return 1;
#endif
}

// 1 where this build's GEMV takes the dot-product instructions (vdotq_s32), 0 for plain NEON.
int hk_neon_dotprod() {
#if defined(__ARM_FEATURE_DOTPROD)
  return 1;
#else
  return 0;
#endif
}

}  // extern "C"
