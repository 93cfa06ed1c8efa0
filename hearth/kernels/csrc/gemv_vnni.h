// The AVX-512 GEMV's per-row dot product (dot_row: VNNI over a superblock's codes in the GEMV's lane
// or group order, gemv_groups.h), the decoded superblocks it keeps across a verify step's passes, and
// how many activation rows a pass takes. Included by blocks.h after the block types, Act and
// gemv_groups.h, inside its namespace; includes the row loop (rows_dot.h) after dot_row.
#pragma once

// A weight row's superblocks as dot_row reads them (codes in the GEMV's order, scales): kept per
// thread after a pass over rows that more passes will read (a verify step's 9-16 activation rows),
// so those load them instead of decoding again. Keyed by the weights alone (a file's rows never
// change during them), dropped after the last pass.
struct alignas(64) DecodedSB {
  __m512i q[4];
  __m512 s, o;
};
struct DecodedRows {
  const uint8_t* row = nullptr;
  int64_t wstep = 0, nsb = 0;
  int rows = 0;
  std::vector<DecodedSB> sbs;  // [rows][nsb]
};
thread_local DecodedRows decoded_rows;

// Which types' passes read decoded_rows: where a superblock's decode costs more than its 6 loads from
// L1. Zen 4, one thread, every row summed as in a verify step: Q6_K (then ~30 vector ops a superblock, 22 since), the
// 1.5B's down 0.92x the time at 16 rows (0.96x at 12), its head 0.95x (0.97x); Q4_K (nibble_groups,
// ~14 ops) gained nothing. Only where 3 passes or more read the rows (9 rows on): with 2 the copy's
// stores and loads cost what they saved (down at 5-8 rows 1.00-1.06x). The types decoded through
// to_groups (Q5_K, Q3_K, the 32-wide blocks): not measured
template <class T>
constexpr bool keeps_decoded() {
  return std::is_same<T, TQ6_K>::value;
}

enum : int { DECODE = 0, DECODE_KEEP = 1, LOAD_DECODED = 2 };

// y[m][n + r] for rows m0 .. m0 + MT of the activations (codes, d16 and a16 in the type's Order: lanes,
// groups or transposed, group_codes) and R weight rows (row + r * wstep -> y[.. + r * ystep]): the rows' codes side by
// side share each activation load, and their chains interleave (each row's arithmetic is the one-row pass's)
template <class T, int MT, int R, int SRC>
void dot_row_from(const uint8_t* row, int64_t nb, const Act& act, int64_t m0, float* y, int64_t ldy, int64_t wstep,
                  int64_t ystep, DecodedSB* dec) {
  const Layout& a = act.gemv(gemv_layout<T>());
  __m512 acc[R][MT], off[R][MT];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MT; ++m) acc[r][m] = off[r][m] = _mm512_setzero_ps();
  const int64_t g = act.Kp / 16, nsb = act.Kp / SB;
  for (int64_t sb = 0; sb < nsb; ++sb) {
    __m512 vs[R], vo[R];
    __m512i q[R][4];
    for (int r = 0; r < R; ++r) {
      if constexpr (SRC == LOAD_DECODED) {
        const DecodedSB& d = dec[r * nsb + sb];
        vs[r] = d.s, vo[r] = d.o;
        for (int c = 0; c < 4; ++c) q[r][c] = d.q[c];
        continue;
      }
      const uint8_t* w = row + r * wstep;
      int nch;
      if constexpr (T::order != Order::groups) {  // in the GEMV's order
        nch = T::template scales<true>(w, sb, nb, vs[r], vo[r]);
      } else {
        nch = T::scales(w, sb, nb, vs[r], vo[r]);
      }
      grouped_codes<T>(w, sb, nb, nch, q[r]);
      if constexpr (SRC == DECODE_KEEP) {
        DecodedSB& d = dec[r * nsb + sb];
        d.s = vs[r], d.o = vo[r];
        for (int c = 0; c < 4; ++c) d.q[c] = q[r][c];
      }
    }
    for (int m = 0; m < MT; ++m) {
      const int8_t* qa = a.q + (m0 + m) * act.Kp + sb * SB;
      const int64_t at = (m0 + m) * g + 16 * sb;  // per group: weight scale x activation scale; offsets
      const __m512 d16 = _mm512_loadu_ps(a.d16 + at), a16 = _mm512_loadu_ps(a.a16 + at);
      __m512i dp[R];
      for (int r = 0; r < R; ++r) dp[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[r][0], _mm512_loadu_si512(qa));
      for (int c = 1; c < 4; ++c) {
        const __m512i x = _mm512_loadu_si512(qa + 64 * c);
        for (int r = 0; r < R; ++r) dp[r] = _mm512_dpbusd_epi32(dp[r], q[r][c], x);
      }
      for (int r = 0; r < R; ++r) {
        acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp[r]), _mm512_mul_ps(vs[r], d16), acc[r][m]);
        off[r][m] = _mm512_fmadd_ps(vo[r], a16, off[r][m]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < MT; ++m) {
      const __m512 v = _mm512_add_ps(acc[r][m], off[r][m]);
      y[(m0 + m) * ldy + r * ystep] = sum_groups(in_group_order<T>(v));
    }
}

// The same, one pass of the passes rows_dot.h makes over these weight rows (m0 = 0 first): where more
// passes follow and the type keeps them (keeps_decoded), the first keeps its decoded superblocks and
// the rest load them. The bits are the decode's: the same vectors, from registers or from L1
template <class T, int MT, int R = 1>
void dot_row(const uint8_t* row, int64_t nb, const Act& act, int64_t m0, float* y, int64_t ldy, int64_t wstep = 0,
             int64_t ystep = 0) {
  // a single pass (1-4 rows) never reaches the thread_local (each access a call in a shared library:
  // the head at 1 row took 1.1x the time with it)
  if constexpr (keeps_decoded<T>()) {
    if (m0 > 0 || m0 + 2 * MT < act.M) {
      DecodedRows& k = decoded_rows;
      const int64_t nsb = act.Kp / SB;
      if (k.row == row && k.rows == R && k.nsb == nsb && (R == 1 || k.wstep == wstep)) {
        dot_row_from<T, MT, R, LOAD_DECODED>(row, nb, act, m0, y, ldy, wstep, ystep, k.sbs.data());
        if (m0 + MT >= act.M) k.row = nullptr;  // the last pass: kept no longer than the passes (memory reused)
        return;
      }
      if (m0 + 2 * MT < act.M) {  // 2 passes or more follow
        if (k.sbs.size() < static_cast<size_t>(R * nsb)) k.sbs.resize(R * nsb);
        k.row = row, k.rows = R, k.nsb = nsb, k.wstep = wstep;
        return dot_row_from<T, MT, R, DECODE_KEEP>(row, nb, act, m0, y, ldy, wstep, ystep, k.sbs.data());
      }
    }
  }
  dot_row_from<T, MT, R, DECODE>(row, nb, act, m0, y, ldy, wstep, ystep, nullptr);
}

// Activation rows per pass of dot_row: 8 rows' accumulators (16 zmm) beside the codes (4) and scales fit
// the 32 registers; every row summed as alone, so a verify step's rows stay a decode row's bits
constexpr int GEMV_ROWS = 8;
// Activation rows per pass of two weight rows (rows_dot.h dot_rows_pair): two rows' codes (8), scales
// (4) and 2 x 2 x MT accumulators (nearly) fit the registers. At 4 some spill, and per matrix it is
// mixed (Q4_K q|k|v and o 1.07x the time of one weight row x 4 activation rows, gate|up 0.91x, Q6_K
// down 0.70x), but a whole 4-row step of the 1.5B is 0.87x (Zen 4, one thread)
constexpr int GEMV_PAIR_ROWS = 4;
// Pairs at every row count, 4 activation rows a pass: whole verify steps of the 1.5B (one thread CPU
// time, Zen 4) against one weight row x up to 8 activation rows: 5 rows 0.95x, 6 0.91x, 8 0.92x,
// 12 0.90-0.95x, 16 0.85-0.88x
constexpr int64_t GEMV_PAIR_UPTO = INT64_MAX;
#include "gemv_wide.h"  // after dot_row and the pass sizes: rows_dot_wide, a verify step's rows
#include "rows_dot.h"  // after dot_row and Act: the row loop both libraries share
