// The AVX2 GEMV's per-row dot product (dot_row): u8 codes x s8 activations by vpmaddubsw, summed per
// 16-weight group in integers across the superblock (lanes_dot; words_dot for the k-quants whose
// scales come as int16 words), and how many activation rows a pass takes. Included by blocks_avx2.h
// after the block types and Act, inside its namespace; includes the row loop (rows_dot.h) after dot_row.
#pragma once

// How many levels of the hadd tree (dot_row) add a format's vpmaddubsw pairs in int16 before vpmaddwd
// widens them: level l sums 2^(l + 1) products, each |code| x |x| <= QMAX x 127, below 2^15 (4- and
// 5-bit codes: 2, Q6_K: 1, Q8_0: 0). The sums are exact either way
template <class T>
constexpr int hadd16_levels() {
  return 8 * T::QMAX * 127 <= 32767 ? 2 : 4 * T::QMAX * 127 <= 32767 ? 1 : 0;
}

// A superblock's group dots, exact, in two steps per half (chunks 4h .. 4h + 3; chunk j's vpmaddubsw
// pairs hold group 2j in the low 128 bits, 2j + 1 in the high): pair_dots(p_j, p_j+1) adds adjacent
// values of two chunks, group_dots(pair_0, pair_1) again and widens: lane l of the result sums group l
// of to_lanes order (+ 8 h). Sums by vphaddw while int16 holds them (hadd16_levels), then vpmaddwd,
// then vphaddd
template <int L16>
inline __m256i pair_dots(__m256i p0, __m256i p1) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (L16 >= 1) return _mm256_hadd_epi16(p0, p1);
  return _mm256_hadd_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones));
}

template <int L16>
inline __m256i group_dots(__m256i q0, __m256i q1) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (L16 == 2) return _mm256_madd_epi16(_mm256_hadd_epi16(q0, q1), ones);
  if constexpr (L16 == 1) return _mm256_hadd_epi32(_mm256_madd_epi16(q0, ones), _mm256_madd_epi16(q1, ones));
  return _mm256_hadd_epi32(q0, q1);
}

// Half h of superblock sb (chunks 4h .. 4h + 3) for R weight rows and MT activation rows: q[r][m][k]
// = pair_dots of chunks 4h + 2k, 4h + 2k + 1's vpmaddubsw pairs (codes of row r x activations of m).
// FULL: all 8 chunks (constant indices); else chunks from nch on add nothing (a short superblock, the
// rows' last, the same in every row)
template <class T, int MT, int R, bool FULL, int L16>
__attribute__((always_inline)) inline void half_dots(const uint8_t* row, int64_t wstep, int64_t sb, int nch, const Act& a,
                                                     int64_t m0, int h, __m256i (&q)[R][MT][2]) {
#pragma GCC unroll 2
  for (int k = 0; k < 2; ++k) {
    __m256i p[R][MT][2];
#pragma GCC unroll 2
    for (int c = 0; c < 2; ++c) {  // unrolled: each chunk's shifts are constants
      const int j = 4 * h + 2 * k + c;
      if (!FULL && j >= nch) {  // no codes to read
        for (int r = 0; r < R; ++r)
          for (int m = 0; m < MT; ++m) p[r][m][c] = _mm256_setzero_si256();
        continue;
      }
      __m256i codes[R], ua[R];
      for (int r = 0; r < R; ++r) {
        codes[r] = T::codes(row + r * wstep, sb, j);
        ua[r] = T::SIGNED ? _mm256_sign_epi8(codes[r], codes[r]) : codes[r];  // |codes| for int8 codes
      }
      for (int m = 0; m < MT; ++m) {
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q + (m0 + m) * a.Kp + sb * SB + 32 * j));
        for (int r = 0; r < R; ++r) {
          const __m256i qa = T::SIGNED ? _mm256_sign_epi8(x, codes[r]) : x;  // |w| x sign(w) x: the u8 x s8 product stays exact
          p[r][m][c] = _mm256_maddubs_epi16(ua[r], qa);
        }
      }
    }
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < MT; ++m) q[r][m][k] = pair_dots<L16>(p[r][m][0], p[r][m][1]);
  }
}

// y[m] for rows m0 .. m0 + MT of the activations and R weight rows (row + r * wstep -> y[.. + r * ystep]):
// per superblock and half (chunks 0-3, 4-7) the integer dots of codes and activations (vpmaddubsw per
// 32 weights), summed per 16-weight group exactly in integers (group_dots: one int32 lane per group),
// then once per group weight scale x activation scale, in to_lanes order; the offsets o x d x sum(q)
// per group (per 32 weights where the type's offsets are: T::OFFSETS, Act::a32; none for the codebook
// formats, C = 0) into the same accumulator. Per 32 weights no conversion, permute or FMA (before 2026-12-06: one each): Zen 4,
// one thread, all of the 1.5B's GEMVs of a decode step 0.84-0.86x the time, 2 rows 0.85-0.89x. The R
// rows share each activation load; each row's arithmetic is the one-row pass's, so every row of a
// call has its one-row bits. Types with WORDS take words_dot instead
template <class T, int MT, int R = 1>
void lanes_dot(const uint8_t* row, int64_t nb, const Act& a, int64_t m0, float* y, int64_t ldy, int64_t wstep,
               int64_t ystep) {
  constexpr int L16 = hadd16_levels<T>();
  __m256 acc[R][MT];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MT; ++m) acc[r][m] = _mm256_setzero_ps();
  const int64_t g = a.Kp / 16;
  for (int64_t sb = 0; sb < a.Kp / SB; ++sb) {
    __m256 sl[R][2];
    int nch = 8;
    for (int r = 0; r < R; ++r) {
      __m256 o[2];
      nch = T::lanes(row + r * wstep, sb, nb, sl[r], o);
      for (int m = 0; m < MT; ++m) {
        if constexpr (T::OFFSETS == 32) {
          acc[r][m] = _mm256_fmadd_ps(o[0], _mm256_loadu_ps(a.a32 + (m0 + m) * g / 2 + 8 * sb), acc[r][m]);
        } else if constexpr (T::OFFSETS == 16) {
          const int64_t at = (m0 + m) * g + 16 * sb;
          acc[r][m] = _mm256_fmadd_ps(o[0], _mm256_loadu_ps(a.a16l + at), acc[r][m]);
          acc[r][m] = _mm256_fmadd_ps(o[1], _mm256_loadu_ps(a.a16l + at + 8), acc[r][m]);
        }
      }
    }
    // the chunks: a full superblock's with constant indices, a short one's (the rows' last) apart
    auto chunks = [&](auto full) {
      constexpr bool FULL = decltype(full)::value;
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        if (!FULL && 4 * h >= nch) break;  // a short superblock without chunks 4-7: nothing to add
        __m256i q[R][MT][2];
        half_dots<T, MT, R, FULL, L16>(row, wstep, sb, nch, a, m0, h, q);
        for (int m = 0; m < MT; ++m) {
          const __m256 d = _mm256_loadu_ps(a.d16l + (m0 + m) * g + 16 * sb + 8 * h);
          for (int r = 0; r < R; ++r)
            acc[r][m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(group_dots<L16>(q[r][m][0], q[r][m][1])), _mm256_mul_ps(sl[r][h], d),
                                        acc[r][m]);
        }
      }
    };
    if (nch == 8)
      chunks(std::true_type{});
    else
      chunks(std::false_type{});
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MT; ++m) y[(m0 + m) * ldy + r * ystep] = hsum(acc[r][m]);
}

// The same for the k-quants whose scales come as int16 words (T::WORDS: Q4_K, Q5_K, Q6_K): per half
// superblock the pairs' sums add up once more in int16 (8 products each), so each 16-weight group
// holds 2 words, and vpmaddwd with the scale words gives its scale x dot in one int32 lane (to_lanes
// order); then one convert and one FMA by the activations' d16 x the superblock's d. The offsets: mins
// per 32 weights one FMA per superblock (T::OFFSETS 32, Act::a32), Q6_K's constant code - 32 in the
// integers (T::C): its sums of 8 code x activation products wrap in int16 (to 8 x 63 x 127), 32 x the
// activations' sums (Act::z8) subtracted leaves sum((code - 32) x), within 8 x 32 x 127 < 2^15, so
// exact despite the wrap. Against lanes_dot per superblock and row: 2 vpmaddwd fewer (its 2 vphaddd
// now vphaddw), no float scales (converts, multiplies, permutes), for Q6_K no offset FMAs; the same
// arithmetic at any MT and R (a sum of the halves before x d spilled at 3-4 rows). Zen 4, one thread:
// the 1.5B's Q6_K down 0.88x, head 0.94x, Q4_K 0.96-0.98x at 1 row; decode step 0.975x
// (docs/performance.md, eleventh session)
// Bytes of L1 up to which words_dot's pass of 2 weight rows and 1 activation row reads both rows
// together: their weights (2 x row) and what the pass reads of the activations each row (the codes, d16l,
// Q6_K's z8, the mins' a32) stay in a 32 KB L1D. Past it the rows go one after the other: Zen 4, one
// thread, the 1.5B's Q6_K down (K = 8960: 2 x 7350 + 13,440 bytes) from DRAM 0.925-0.933x the time,
// its Q4_K down (2 x 5040 + 12,320) 1.03-1.05x (so it stays in pairs); Q5_K rows that long (2 x 6160 +
// 12,320) go one at a time too, not measured (no model here has them); at 2 activation rows pairs win
// either way (one row at a time 1.30-1.35x)
constexpr int64_t PAIR_L1_BYTES = 24 * 1024;

template <class T>
inline bool pair_in_l1(int64_t nb, const Act& a) {
  const int64_t act = a.Kp + a.Kp / 4 + (T::C ? a.Kp / 4 : 0) + (T::OFFSETS == 32 ? a.Kp / 8 : 0);
  return 2 * nb * T::TS + act <= PAIR_L1_BYTES;
}

template <class T, int MT, int R = 1>
void words_dot(const uint8_t* row, int64_t nb, const Act& a, int64_t m0, float* y, int64_t ldy, int64_t wstep,
               int64_t ystep) {
  if constexpr (R == 2 && MT == 1)
    if (!pair_in_l1<T>(nb, a)) {  // each row's one-row pass: the same arithmetic as in the pair
      words_dot<T, 1, 1>(row, nb, a, m0, y, ldy, 0, 0);
      words_dot<T, 1, 1>(row + wstep, nb, a, m0, y + ystep, ldy, 0, 0);
      return;
    }
  static_assert(8 * (T::C ? T::C : T::QMAX) * 127 <= 32767 && 4 * T::QMAX * 127 <= 32767 && (T::C == 0 || T::C == 32),
                "the int16 sums exact (mod 2^16 before z8's subtraction); Act::z8 is 32 x the sums");
  __m256 acc[R][MT];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MT; ++m) acc[r][m] = _mm256_setzero_ps();
  const int64_t g = a.Kp / 16;
  for (int64_t sb = 0; sb < a.Kp / SB; ++sb) {
    __m256i w[R][2];
    __m256 dsb[R];
    for (int r = 0; r < R; ++r) {
      __m256 o;
      T::template words<MT == 1>(row + r * wstep, sb, nb, w[r], &dsb[r], &o);
      if constexpr (T::OFFSETS == 32)
        for (int m = 0; m < MT; ++m)
          acc[r][m] = _mm256_fmadd_ps(o, _mm256_loadu_ps(a.a32 + (m0 + m) * g / 2 + 8 * sb), acc[r][m]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      __m256i q[R][MT][2];
      half_dots<T, MT, R, true, 1>(row, wstep, sb, 8, a, m0, h, q);
      for (int m = 0; m < MT; ++m) {
        const __m256 d = _mm256_loadu_ps(a.d16l + (m0 + m) * g + 16 * sb + 8 * h);
        const int16_t* z8 = a.z8 + (m0 + m) * a.Kp / 8 + 32 * sb;
        for (int r = 0; r < R; ++r) {
          __m256i s = _mm256_hadd_epi16(q[r][m][0], q[r][m][1]);
          if constexpr (T::C != 0) s = _mm256_sub_epi16(s, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(z8 + 16 * h)));
          const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s, w[r][h]));
          acc[r][m] = _mm256_fmadd_ps(f, _mm256_mul_ps(d, dsb[r]), acc[r][m]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MT; ++m) y[(m0 + m) * ldy + r * ystep] = hsum(acc[r][m]);
}

template <class T, int MT, int R = 1>
void dot_row(const uint8_t* row, int64_t nb, const Act& a, int64_t m0, float* y, int64_t ldy, int64_t wstep = 0,
             int64_t ystep = 0) {
  if constexpr (T::WORDS)
    words_dot<T, MT, R>(row, nb, a, m0, y, ldy, wstep, ystep);
  else
    lanes_dot<T, MT, R>(row, nb, a, m0, y, ldy, wstep, ystep);
}

// Activation rows per pass of dot_row: what 16 ymm registers hold beside the codes and scales
constexpr int GEMV_ROWS = 4;
// Two weight rows per pass (rows_dot.h) at up to 2 activation rows: at 3-4 in pairs the 1.5B's whole
// step is the same, at 8 1.07-1.10x the time (16 ymm registers)
constexpr int GEMV_PAIR_ROWS = 2;
constexpr int64_t GEMV_PAIR_UPTO = 2;
// No wide passes here (the AVX-512 library's gemv_wide.h): rows_dot's own passes at every row count
template <class T>
bool rows_dot_wide(const uint8_t*, int64_t, int64_t, int64_t, int64_t, const Act&, float*, int64_t) {
  return false;
}
#include "rows_dot.h"  // after dot_row and Act: the row loop every library shares
