// This CPU's ceilings as the kernels meet them, for `hearth plan`'s roofline (hearth/memory/bandwidth.py
// times these passes): the read rate of memory, streamed the way rows_dot streams weights, and the
// rate of the int8 dot products the GEMV and the GEMMs are built on. Included by every library; the
// dot is the one its own kernels take (AVX-512 VNNI; AVX-VNNI or vpmaddubsw + vpmaddwd; NEON sdot
// or widening multiplies). AMX tiles are not measured here: an AMX machine's bf16 matmul (oneDNN on
// tiles, measured beside this) is its compute ceiling. Included after the library's own headers (the
// intrinsics; the avx2 library's gemm_avx2.h for gemm_avx_vnni and dpbusd_vex).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace peaks {

#if defined(__AVX512F__)
constexpr int VEC_BYTES = 64;
#elif defined(__AVX2__)
constexpr int VEC_BYTES = 32;
#else
constexpr int VEC_BYTES = 16;
#endif
typedef uint64_t Vec __attribute__((vector_size(VEC_BYTES)));  // the ISA's widest integer vector
typedef Vec LooseVec __attribute__((aligned(1), may_alias));  // loads from any address (unaligned loads)
constexpr int PER_LINE = 64 / VEC_BYTES;

// One thread's read of n bytes (a multiple of 64) at p as `streams` runs side by side, a 64-byte line
// of each in turn (a run's lines in ascending order, as the prefetchers follow them), folded by xor
inline uint64_t read_runs(const uint8_t* p, int64_t n, int64_t streams) {
  const LooseVec* v = reinterpret_cast<const LooseVec*>(p);
  const int64_t lines = n / 64, per = lines / std::max<int64_t>(streams, 1);
  Vec fold[PER_LINE] = {};
  for (int64_t i = 0; i < per; ++i)
    for (int64_t s = 0; s < streams; ++s)
      for (int j = 0; j < PER_LINE; ++j) fold[j] ^= v[(s * per + i) * PER_LINE + j];
  for (int64_t at = per * streams; at < lines; ++at)  // what the runs leave over
    for (int j = 0; j < PER_LINE; ++j) fold[j] ^= v[at * PER_LINE + j];
  uint64_t out = 0;
  for (const Vec& f : fold)
    for (int j = 0; j < VEC_BYTES / 8; ++j) out ^= f[j];
  return out;
}

constexpr int DOT_CHAINS = 12;  // independent accumulators: more than a dot's latency x its throughput
constexpr int DOTS = 4;  // dot instructions per chain and round: the avx2 GEMM's int16 run (gemm_chain)

// One thread's `iters` rounds of DOT_CHAINS x DOTS int8 dot instructions on all-ones operands: every
// product is 1, so the accumulators' lanes add up to the multiply-adds done (the caller's op count).
// u "changes" before each dot (an empty asm), so every product is computed: none shared or hoisted.
inline int64_t dot_rounds(int64_t iters) {
  int64_t total = 0;
#if defined(__AVX512VNNI__)
  __m512i acc[DOT_CHAINS], u = _mm512_set1_epi8(1), s = _mm512_set1_epi8(1);
  for (auto& a : acc) a = _mm512_setzero_si512();
  for (int64_t i = 0; i < iters; ++i)
    for (int d = 0; d < DOTS; ++d)  // chain after chain: each dot's latency hidden behind 11 others
      for (auto& a : acc) {
        __asm__ volatile("" : "+v"(u));
        a = _mm512_dpbusd_epi32(a, u, s);
      }
  for (auto& a : acc) {  // in int64: the int32 reduce of all 16 lanes overflows first
    alignas(64) int32_t lanes[16];
    _mm512_store_si512(lanes, a);
    for (int32_t v : lanes) total += v;
  }
#elif defined(__AVX2__)
  __m256i acc[DOT_CHAINS], u = _mm256_set1_epi8(1), s = _mm256_set1_epi8(1);
  const __m256i ones = _mm256_set1_epi16(1);
  for (auto& a : acc) a = _mm256_setzero_si256();
  const bool vnni = gemm_avx_vnni();  // the GEMM's own choice (gemm_avx2.h)
  for (int64_t i = 0; i < iters; ++i)
    for (auto& a : acc) {
      __m256i run = _mm256_setzero_si256();  // the pair's way: int16 sums of DOTS vpmaddubsw, one vpmaddwd
      for (int d = 0; d < DOTS; ++d) {
        __asm__ volatile("" : "+x"(u));
        if (vnni)
          a = dpbusd_vex(a, u, s);
        else
          run = _mm256_add_epi16(run, _mm256_maddubs_epi16(u, s));
      }
      if (!vnni) a = _mm256_add_epi32(a, _mm256_madd_epi16(run, ones));
    }
  for (auto& a : acc) {
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
    for (int32_t v : lanes) total += v;
  }
#elif defined(__aarch64__)
  int32x4_t acc[DOT_CHAINS];
  int8x16_t u = vdupq_n_s8(1), s = vdupq_n_s8(1);
  for (auto& a : acc) a = vdupq_n_s32(0);
  for (int64_t i = 0; i < iters; ++i)
    for (int d = 0; d < DOTS; ++d)
      for (auto& a : acc) {
        __asm__ volatile("" : "+w"(u));
#if defined(__ARM_FEATURE_DOTPROD)
        a = vdotq_s32(a, u, s);
#else
        a = vpadalq_s16(vpadalq_s16(a, vmull_s8(vget_low_s8(u), vget_low_s8(s))), vmull_high_s8(u, s));
#endif
      }
  for (auto& a : acc) total += vaddlvq_s32(a);  // widened: the lanes' sum past int32
#endif
  return total;
}

}  // namespace peaks

extern "C" {

// Every thread reads its share of buf (bytes: a multiple of 64) as `streams` interleaved runs; the
// xor of all its 8-byte words, folded (a test checks it against numpy: every byte read once)
uint64_t hk_read_pass(const uint8_t* buf, int64_t bytes, int64_t streams) {
  uint64_t fold = 0;
#pragma omp parallel reduction(^ : fold)
  {
    const int64_t lines = bytes / 64, n = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t l0 = lines * t / n, l1 = lines * (t + 1) / n;
    fold ^= peaks::read_runs(buf + 64 * l0, 64 * (l1 - l0), streams);
  }
  return fold;
}

// Every thread runs `iters` rounds of dot_rounds (iters <= 2^22 keeps each int32 lane exact): the
// multiply-adds done by all of them, counted from their accumulators
int64_t hk_int8_dot_pass(int64_t iters) {
  int64_t macs = 0;
#pragma omp parallel reduction(+ : macs)
  macs += peaks::dot_rounds(iters);
  return macs;
}

}  // extern "C"
