// Many-row matmuls on the avx2 tier, y[M, N] = a @ W.T on the GEMV's 8-bit activations (blocks_avx2.h
// quantize: a scale per 16), register-blocked: GEMM_NR weight rows are unpacked once per chunk of
// activation rows (codes in natural order, each 16 weights' scale and offset), and every GEMM_MR-row
// block of the chunk passes them, GEMM_MR x GEMM_NR sums in registers (the integer dot on AVX-VNNI
// where the CPU has it). Each activation load serves
// GEMM_NR weight rows and each weight's codes are decoded once per chunk instead of once per 4 rows
// (rows_dot), from L1 instead of the file's pages.
//
// Every (row, weight row) sum is the GEMV's dot_row, operation for operation: the same integer dot
// per 32 weights (vpmaddubsw + vpmaddwd), the same f32 factor s_w * d_x per 16, the same FMA chain
// over superblocks and chunks, the offsets in their own chain, one hsum at the end. So a row's bits
// do not depend on how many rows the call has: prefill rows equal decode rows, and the runner's row
// regimes are one on this tier (tests/kernels/test_native_avx2.py holds that for every type).
//
// The activation rows of a chunk (~GEMM_CHUNK_BYTES of codes and scales) stay in L2 while all of a
// thread's weight rows pass; the weights are read once per chunk (M / chunk times per call: at
// K = 8960, 512 rows, 14 times, 2% of the products' time).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#define HK_ROWS_GEMM 1  // decode_library.h's RowsDot takes rows_gemm from ROWS_GEMM_MIN_ROWS rows

namespace {

constexpr int64_t ROWS_GEMM_MIN_ROWS = 8;  // from this many rows on (below: rows_dot, 4 rows a weight decode)
constexpr int GEMM_MR = 4, GEMM_NR = 2;  // 8 f32 accumulators, 2 weight code vectors, 1 activation vector
constexpr int64_t GEMM_CHUNK_BYTES = 384 * 1024;

// AVX-VNNI (Alder Lake, Sapphire Rapids, Zen 5 on): CPUID.(7, 1):EAX bit 4. Its vpdpbusd sums the
// same four u8 x s8 products into int32 as vpmaddubsw + vpmaddwd do (no int16 step to saturate here:
// |codes| <= 127 against |x| <= 127 fits either way), so the sums, and every bit after, are the same.
inline bool avx_vnni_usable() {
  static const bool ok = [] {
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
    return ((a >> 4) & 1) != 0;
  }();
  return ok;
}

inline bool& gemm_avx_vnni() {  // taken where usable; off: the AVX2 pair (tests compare the two)
  static bool on = avx_vnni_usable();
  return on;
}

// acc + the per-4-byte sums of u (u8) x s (s8): vpdpbusd in its VEX form, written as assembly so
// the library builds with the avx2 tier's flags alone (the CPU check above guards it)
inline __m256i dpbusd_vex(__m256i acc, __m256i u, __m256i s) {
  __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
  return acc;
}

// GEMM_NR weight rows unpacked: codes [GEMM_NR][Kp] (natural order; Q8_0's signed), s and o
// [GEMM_NR][Kp / 16] (each 16 weights' scale and offset as T::scales gives them), nch [Kp / 256]
// (chunks of 32 in each superblock: fewer in a 32-wide type's short last one)
struct GemmPanel {
  std::vector<uint8_t> codes;
  std::vector<float> s, o;
  std::vector<int> nch;
};

thread_local GemmPanel gemm_panel;

template <class T>
void gemm_unpack(const uint8_t* w, int64_t row_bytes, int64_t n, int rows, int64_t nb, int64_t Kp, GemmPanel& p) {
  const int64_t g = Kp / 16;
  for (int i = 0; i < rows; ++i) {
    const uint8_t* row = w + (n + i) * row_bytes;
    for (int64_t sb = 0; sb < Kp / SB; ++sb) {
      __m256 s[2], o[2];
      const int nch = T::scales(row, sb, nb, s, o);
      float* ps = p.s.data() + i * g + 16 * sb;
      float* po = p.o.data() + i * g + 16 * sb;
      _mm256_storeu_ps(ps, s[0]), _mm256_storeu_ps(ps + 8, s[1]);
      _mm256_storeu_ps(po, o[0]), _mm256_storeu_ps(po + 8, o[1]);
      p.nch[sb] = nch;
      uint8_t* c = p.codes.data() + i * Kp + sb * SB;
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {  // unrolled: each chunk's shifts are constants (as dot_row)
        if (j >= nch) break;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + 32 * j), T::codes(row, sb, j));
      }
    }
  }
}

// y[(m0 + m) * ldy + n] for m < MR, n < NR: rows m0 .. of a against the panel's NR rows (y: its first)
template <bool SIGNED, bool VNNI, int MR, int NR>
void gemm_tile(const GemmPanel& p, const Act& a, int64_t m0, float* y, int64_t ldy) {
  const int64_t Kp = a.Kp, g = Kp / 16;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < NR; ++n) acc[m][n] = _mm256_setzero_ps();
  alignas(32) float cs[MR][NR][16];  // a superblock's factors s_w * d_x per 16 (dot_row's cs)
  for (int64_t sb = 0; sb < Kp / SB; ++sb) {
    for (int m = 0; m < MR; ++m) {
      const float* d = a.d16 + (m0 + m) * g + 16 * sb;
      for (int n = 0; n < NR; ++n) {
        const float* s = p.s.data() + n * g + 16 * sb;
        _mm256_store_ps(cs[m][n], _mm256_mul_ps(_mm256_loadu_ps(s), _mm256_loadu_ps(d)));
        _mm256_store_ps(cs[m][n] + 8, _mm256_mul_ps(_mm256_loadu_ps(s + 8), _mm256_loadu_ps(d + 8)));
      }
    }
    const int nch = p.nch[sb];
    for (int j = 0; j < nch; ++j) {
      const __m256i idx = _mm256_add_epi32(_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), _mm256_set1_epi32(2 * (j & 3)));
      const int half = j < 4 ? 0 : 8;
      __m256i wc[NR], uw[NR];
      for (int n = 0; n < NR; ++n) {
        wc[n] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.codes.data() + n * Kp + sb * SB + 32 * j));
        uw[n] = SIGNED ? _mm256_sign_epi8(wc[n], wc[n]) : wc[n];  // |codes| for int8 codes
      }
      for (int m = 0; m < MR; ++m) {
        const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + (m0 + m) * Kp + sb * SB + 32 * j));
        for (int n = 0; n < NR; ++n) {
          const __m256i qs = SIGNED ? _mm256_sign_epi8(qa, wc[n]) : qa;
          const __m256i dp = VNNI ? dpbusd_vex(_mm256_setzero_si256(), uw[n], qs)
                                  : _mm256_madd_epi16(_mm256_maddubs_epi16(uw[n], qs), ones);
          const __m256 f = _mm256_permutevar8x32_ps(_mm256_load_ps(cs[m][n] + half), idx);
          acc[m][n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), f, acc[m][n]);
        }
      }
    }
  }
  for (int m = 0; m < MR; ++m) {
    const float* a16 = a.a16 + (m0 + m) * g;
    for (int n = 0; n < NR; ++n) {  // the offsets o_w * d_x * sum(q_x), in dot_row's order
      const float* o = p.o.data() + n * g;
      __m256 off = _mm256_setzero_ps();
      for (int64_t sb = 0; sb < Kp / SB; ++sb) {
        off = _mm256_fmadd_ps(_mm256_loadu_ps(o + 16 * sb), _mm256_loadu_ps(a16 + 16 * sb), off);
        off = _mm256_fmadd_ps(_mm256_loadu_ps(o + 16 * sb + 8), _mm256_loadu_ps(a16 + 16 * sb + 8), off);
      }
      y[(m0 + m) * ldy + n] = hsum(_mm256_add_ps(acc[m][n], off));
    }
  }
}

// rows m0 .. m1 of a against the panel's NR rows: blocks of GEMM_MR rows, then the tail
template <bool SIGNED, bool VNNI, int NR>
void gemm_rows(const GemmPanel& p, const Act& a, int64_t m0, int64_t m1, float* y, int64_t ldy) {
  int64_t m = m0;
  for (; m + GEMM_MR <= m1; m += GEMM_MR) gemm_tile<SIGNED, VNNI, GEMM_MR, NR>(p, a, m, y, ldy);
  switch (m1 - m) {
    case 3: gemm_tile<SIGNED, VNNI, 3, NR>(p, a, m, y, ldy); break;
    case 2: gemm_tile<SIGNED, VNNI, 2, NR>(p, a, m, y, ldy); break;
    case 1: gemm_tile<SIGNED, VNNI, 1, NR>(p, a, m, y, ldy); break;
    default: break;
  }
}

template <bool SIGNED>
void gemm_rows_any(const GemmPanel& p, const Act& a, int64_t m0, int64_t m1, float* y, int64_t ldy, int rows) {
  const bool vnni = gemm_avx_vnni();
  if (rows == GEMM_NR)
    vnni ? gemm_rows<SIGNED, true, GEMM_NR>(p, a, m0, m1, y, ldy) : gemm_rows<SIGNED, false, GEMM_NR>(p, a, m0, m1, y, ldy);
  else
    vnni ? gemm_rows<SIGNED, true, 1>(p, a, m0, m1, y, ldy) : gemm_rows<SIGNED, false, 1>(p, a, m0, m1, y, ldy);
}

// y[m, n] for weight rows n0 .. n1 and every row of a (rows_dot's contract), chunk by chunk of rows
template <class T>
void rows_gemm(const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t n1, int64_t nb, const Act& a, float* y,
               int64_t ldy) {
  const int64_t Kp = a.Kp, g = Kp / 16;
  GemmPanel& p = gemm_panel;
  if (static_cast<int64_t>(p.codes.size()) < GEMM_NR * Kp) {
    p.codes.resize(GEMM_NR * Kp), p.s.resize(GEMM_NR * g), p.o.resize(GEMM_NR * g), p.nch.resize(Kp / SB);
  }
  const int64_t per_row = Kp + 2 * g * static_cast<int64_t>(sizeof(float));
  const int64_t chunk = std::max<int64_t>(GEMM_MR, GEMM_CHUNK_BYTES / per_row / GEMM_MR * GEMM_MR);
  for (int64_t c0 = 0; c0 < a.M; c0 += chunk) {
    const int64_t c1 = std::min(a.M, c0 + chunk);
    for (int64_t n = n0; n < n1; n += GEMM_NR) {
      const int rows = static_cast<int>(std::min<int64_t>(GEMM_NR, n1 - n));
      for (int64_t b = 0; b < rows * row_bytes; b += 64)  // the next panel's rows, while this one multiplies
        __builtin_prefetch(w + (n + GEMM_NR) * row_bytes + b, 0, 2);
      gemm_unpack<T>(w, row_bytes, n, rows, nb, Kp, p);
      gemm_rows_any<T::SIGNED>(p, a, c0, c1, y + n, ldy, rows);
    }
  }
}

}  // namespace
