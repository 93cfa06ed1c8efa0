// The AVX-512 GEMV's wide passes: a verify step's rows (WIDE_FROM or more activation rows) over pairs
// of weight rows, every row summed as dot_row sums it (the same operations on the same values in the
// same order: a decode row's bits). Included by gemv_vnni.h after dot_row, inside blocks.h's namespace;
// rows_dot.h takes them first (rows_dot_wide).
//
// What differs from dot_row's passes is only where values wait:
// - each (activation row, weight row)'s offset chain (vo x a16, one FMA a superblock) runs in a loop of its
//   own after the codes' chain (they meet only in the final add), so a pass holds MT x 2 accumulators,
//   not 2 MT x 2: 8 activation rows x 2 weight rows a pass (16 + 8 codes + scales: 31 zmm, no spill)
//   instead of 4 x 2 with spills, each weight superblock decoded once for 8 rows instead of 4;
// - the activations are copied once per call with their rows interleaved per superblock (Act::wide):
//   a pass finds every row's codes at a constant offset from one pointer (no per-row address registers);
// - the weight rows go in blocks of WIDE_BLOCK pairs, each pass over a block's pairs in turn: a pass's
//   activations (8 rows at K = 1536: 15 KB) are read from L1 by every pair of the block, where the
//   passes of 16 rows over one pair (36 KB) read them from L2.
// Measured (Zen 4, one thread, every row summed as a verify step's, docs/speculative.md 2026-12-06,
// thirteenth session): the 1.5B's Q4_K matrices at 8-16 rows 0.78-0.87x the time, its Q6_K head
// 0.75-0.92x; whole verify steps 4 rows 0.89x, 8 rows 0.83x, 12-16 rows 0.90x.
#pragma once

constexpr int WIDE_ROWS = 8;  // activation rows a pass (31 zmm, see above)
constexpr int64_t WIDE_FROM = 2;  // activation rows from which a call takes the wide passes
constexpr int64_t WIDE_MAX_PASSES = 4;  // up to 32 rows (more: rows_dot's own passes)
constexpr int64_t WIDE_MAX_SB = 128;  // K <= 32768 (a pass's offset scales on its stack: 16 KB)
constexpr int64_t WIDE_BLOCK = 4;  // pairs of weight rows a block
// Unchunked, a call of more rows than one pass holds takes the wide passes only where a pass's activations
// (codes, d16: 1.25 Kp bytes a row) stay in L1 across a block: the 1.5B's down (K = 8960: 90 KB a pass) at
// 12-16 rows was 1.00-1.06x the time of rows_dot's pairs of 4 rows (Q6_K keeping its decoded superblocks);
// past it, K in chunks (below)
constexpr int64_t WIDE_PASS_BYTES = 20480;

// Calls whose pass's activations do not stay in L1 (the 1.5B's down, K = 8960) take the wide passes in
// K chunks of WIDE_CHUNK_SB superblocks (8 rows x 6: 19 KB, from L1 for each pair of a block of
// WIDE_CHUNK_BLOCK), every (row, weight row)'s accumulators kept in memory between chunks, each going on
// in the same order; with the next block's weight rows prefetched into L2 a share each chunk (without it
// the weights, read a chunk at a time, stream worse: 0.95-1.05x the time of rows_dot at 9-16 rows).
// Zen 4, one thread, the 1.5B's Q6_K down: 0.85-0.97x the time of the unchunked wide passes at 5-8
// rows (one run 1.07x at 8; 0.91-1.10x at 2-4: not taken), 0.78-0.97x of rows_dot's at 9-33; whole verify
// steps 0.95-0.98x at 5-16 rows (docs/speculative.md). Only Q6_K (wide_chunks): Q4_K's down was
// 1.08-1.46x at 2-8 rows, 1.10-1.27x at 9-32 (its rows_dot passes decode cheaply)
constexpr int64_t WIDE_CHUNK_FROM = 5;
constexpr int64_t WIDE_CHUNK_SB = 6;
constexpr int64_t WIDE_CHUNK_BLOCK = 2;

// Whether a pass's activations (codes, d16: 1.25 Kp bytes a row) miss L1
inline bool past_l1(int64_t Kp) {
  return WIDE_ROWS * (Kp + Kp / 4) > WIDE_PASS_BYTES;
}

template <class T>
constexpr bool wide_chunks() {
  return std::is_same<T, TQ6_K>::value;
}

// Whether a call of M rows with K padded to Kp takes the wide passes (and so the interleaved layout; a
// part of another type than Q6_K past L1 and past one pass leaves it unread)
inline bool wide_call(int64_t M, int64_t Kp) {
  const int64_t passes = (M + WIDE_ROWS - 1) / WIDE_ROWS;
  return M >= WIDE_FROM && passes <= WIDE_MAX_PASSES && Kp / SB <= WIDE_MAX_SB;
}

thread_local std::vector<uint8_t> wide_buf;

// Act::wide: the layouts the GEMV reads, their rows interleaved per superblock (codes [Kp / 256][M][256],
// d16 and a16 [Kp / 256][M][16])
void by_superblock(Act& act) {
  const int64_t M = act.M, nsb = act.Kp / SB, g = act.Kp / 16;
  const Layout* from[4];
  for (int i = 0; i < 4; ++i) from[i] = &act.gemv(i);  // Act::gemv's order, as wide[i]
  const size_t per = static_cast<size_t>(M * act.Kp) + 2 * static_cast<size_t>(M * g) * sizeof(float);
  size_t need = 64;
  for (const Layout* l : from) need += l->q ? per : 0;
  if (wide_buf.size() < need) wide_buf.resize(need);
  uint8_t* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(wide_buf.data()) + 63) & ~uintptr_t{63});
  for (int i = 0; i < 4; ++i) {
    Layout& l = act.wide[i];
    if (!from[i]->q) {
      l = Layout{};
      continue;
    }
    l.d16 = reinterpret_cast<float*>(p), l.a16 = l.d16 + M * g, l.q = reinterpret_cast<int8_t*>(l.a16 + M * g);
    p += per;
    for (int64_t sb = 0; sb < nsb; ++sb)
      for (int64_t m = 0; m < M; ++m) {
        std::memcpy(l.q + (sb * M + m) * SB, from[i]->q + m * act.Kp + sb * SB, SB);
        std::memcpy(l.d16 + (sb * M + m) * 16, from[i]->d16 + m * g + 16 * sb, 64);
        std::memcpy(l.a16 + (sb * M + m) * 16, from[i]->a16 + m * g + 16 * sb, 64);
      }
  }
}

// Weight rows row, row + wstep against activation rows m0 .. m0 + MT over superblocks sb0 .. sb1 (<=
// sb0 + MAX_SB): the codes' chains, each superblock's offset scales kept in vob, then the offsets'
// chains, the accumulators (codes' then offsets', both rows: st[4][MT]) loaded before and stored after,
// so a call over the whole row (wide_pass) and chunks in order (wide_chunk) do the same operations in
// the same order; the last superblock's call writes y[m][0], y[m][ystep]
template <class T, int MT, int MAX_SB>
void wide_span(const uint8_t* row, int64_t wstep, int64_t nb, const Act& act, int64_t m0, int64_t sb0, int64_t sb1,
               __m512* st, float* y, int64_t ldy, int64_t ystep) {
  const Layout& a = act.gemv(gemv_layout<T>(), true);
  const int64_t M = act.M, nsb = act.Kp / SB;
  alignas(64) __m512 vob[MAX_SB][2];
  __m512 acc[2][MT];
#pragma GCC unroll 16
  for (int r = 0; r < 2; ++r)
#pragma GCC unroll 16
    for (int m = 0; m < MT; ++m) acc[r][m] = _mm512_load_ps(reinterpret_cast<const float*>(st + r * MT + m));
  const int8_t* qa = a.q + (sb0 * M + m0) * SB;
  const float* da = a.d16 + (sb0 * M + m0) * 16;
  for (int64_t sb = sb0; sb < sb1; ++sb, qa += M * SB, da += M * 16) {
    __m512 vs[2];
    __m512i q[2][4];
#pragma GCC unroll 16
    for (int r = 0; r < 2; ++r) {
      const uint8_t* w = row + r * wstep;
      int nch;
      if constexpr (T::order != Order::groups) {  // in the GEMV's order
        nch = T::template scales<true>(w, sb, nb, vs[r], vob[sb - sb0][r]);
      } else {
        nch = T::scales(w, sb, nb, vs[r], vob[sb - sb0][r]);
      }
      grouped_codes<T>(w, sb, nb, nch, q[r]);
    }
#pragma GCC unroll 16
    for (int m = 0; m < MT; ++m) {
      const __m512 d16 = _mm512_load_ps(da + 16 * m);
      __m512i dp[2];
      const __m512i x0 = _mm512_load_si512(qa + SB * m);
#pragma GCC unroll 16
      for (int r = 0; r < 2; ++r) dp[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[r][0], x0);
#pragma GCC unroll 16
      for (int c = 1; c < 4; ++c) {
        const __m512i x = _mm512_load_si512(qa + SB * m + 64 * c);
#pragma GCC unroll 16
        for (int r = 0; r < 2; ++r) dp[r] = _mm512_dpbusd_epi32(dp[r], q[r][c], x);
      }
#pragma GCC unroll 16
      for (int r = 0; r < 2; ++r) acc[r][m] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp[r]), _mm512_mul_ps(vs[r], d16), acc[r][m]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < 2; ++r) {
    __m512 off[MT];
#pragma GCC unroll 16
    for (int m = 0; m < MT; ++m) off[m] = _mm512_load_ps(reinterpret_cast<const float*>(st + (2 + r) * MT + m));
    const float* oa = a.a16 + (sb0 * M + m0) * 16;
    for (int64_t sb = sb0; sb < sb1; ++sb, oa += M * 16)
#pragma GCC unroll 16
      for (int m = 0; m < MT; ++m) off[m] = _mm512_fmadd_ps(vob[sb - sb0][r], _mm512_load_ps(oa + 16 * m), off[m]);
#pragma GCC unroll 16
    for (int m = 0; m < MT; ++m) {
      if (sb1 == nsb) {
        const __m512 v = _mm512_add_ps(acc[r][m], off[m]);
        y[(m0 + m) * ldy + r * ystep] = sum_groups(in_group_order<T>(v));
      } else {
        _mm512_store_ps(reinterpret_cast<float*>(st + r * MT + m), acc[r][m]);
        _mm512_store_ps(reinterpret_cast<float*>(st + (2 + r) * MT + m), off[m]);
      }
    }
  }
}

template <class T, int MT>
void wide_pass(const uint8_t* row, int64_t wstep, int64_t nb, const Act& act, int64_t m0, float* y, int64_t ldy,
               int64_t ystep) {
  alignas(64) __m512 st[4 * MT];
  for (auto& v : st) v = _mm512_setzero_ps();
  wide_span<T, MT, WIDE_MAX_SB>(row, wstep, nb, act, m0, 0, act.Kp / SB, st, y, ldy, ystep);
}

template <class T, int MT>
void wide_chunk(const uint8_t* row, int64_t wstep, int64_t nb, const Act& act, int64_t m0, int64_t sb0, int64_t sb1,
                __m512* st, float* y, int64_t ldy, int64_t ystep) {
  wide_span<T, MT, WIDE_CHUNK_SB>(row, wstep, nb, act, m0, sb0, sb1, st, y, ldy, ystep);
}

// f(std::integral_constant<int, mt>) for a runtime mt in 1 .. MT
template <int MT = WIDE_ROWS, class F>
inline void with_rows(int mt, F&& f) {
  if constexpr (MT > 1)
    if (mt < MT) return with_rows<MT - 1>(mt, f);
  f(std::integral_constant<int, MT>{});
}

// Rows n0 .. n1 of w as rows_dot's two runs in pairs (n, n + len), n < n0 + (n1 - n0) / 2; false (nothing
// done) where the call is not a wide one. rows_dot does an odd count's last row
template <class T>
bool rows_dot_wide(const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t n1, int64_t nb, const Act& a, float* y,
                   int64_t ldy) {
  if (!wide_call(a.M, a.Kp) || !a.gemv(gemv_layout<T>(), true).q) return false;
  // past L1: Q6_K from WIDE_CHUNK_FROM rows in K chunks; else one unchunked pass, or rows_dot's passes
  const bool chunked = past_l1(a.Kp) && wide_chunks<T>() && a.M >= WIDE_CHUNK_FROM;
  if (past_l1(a.Kp) && !chunked && a.M > WIDE_ROWS) return false;
  const int64_t passes = (a.M + WIDE_ROWS - 1) / WIDE_ROWS;
  const int64_t len = (n1 - n0 + 1) / 2, pairs = (n1 - n0) / 2, wstep = len * row_bytes;
  int64_t m_at[WIDE_MAX_PASSES + 1] = {0};  // pass p: rows m_at[p] .. m_at[p + 1], as even as they go
  for (int64_t p = 0; p < passes; ++p) m_at[p + 1] = m_at[p] + (a.M - m_at[p]) / (passes - p);
  if (chunked) {
    const int64_t nsb = a.Kp / SB, nchunks = (nsb + WIDE_CHUNK_SB - 1) / WIDE_CHUNK_SB;
    alignas(64) __m512 st[WIDE_CHUNK_BLOCK][WIDE_MAX_PASSES][4 * WIDE_ROWS];  // acc, off of each pair's passes
    for (int64_t i0 = 0; i0 < pairs; i0 += WIDE_CHUNK_BLOCK) {
      const int64_t i1 = std::min(pairs, i0 + WIDE_CHUNK_BLOCK);
      for (int64_t i = 0; i < i1 - i0; ++i)
        for (int64_t p = 0; p < passes; ++p)
          for (int k = 0; k < 4 * WIDE_ROWS; ++k) st[i][p][k] = _mm512_setzero_ps();
      // the next block's rows (both runs) into L2, 1 / nchunks of them before each chunk
      const int64_t next = (std::min(pairs, i1 + WIDE_CHUNK_BLOCK) - i1) * row_bytes;
      for (int64_t c = 0; c < nchunks; ++c) {
        const int64_t sb0 = c * WIDE_CHUNK_SB, sb1 = std::min(nsb, sb0 + WIDE_CHUNK_SB);
        for (int r = 0; r < 2; ++r) {
          const uint8_t* at = w + (n0 + i1) * row_bytes + r * wstep;
          for (int64_t b = (next * c / nchunks) & ~int64_t{63}; b < next * (c + 1) / nchunks; b += 64)
            __builtin_prefetch(at + b, 0, 2);
        }
        for (int64_t p = 0; p < passes; ++p)
          with_rows(static_cast<int>(m_at[p + 1] - m_at[p]), [&](auto mt) {
            constexpr int MT = decltype(mt)::value;
            for (int64_t i = i0; i < i1; ++i)
              wide_chunk<T, MT>(w + (n0 + i) * row_bytes, wstep, nb, a, m_at[p], sb0, sb1, st[i - i0][p], y + n0 + i,
                                ldy, len);
          });
      }
    }
    return true;
  }
  for (int64_t i0 = 0; i0 < pairs; i0 += WIDE_BLOCK)
    for (int64_t p = 0; p < passes; ++p)
      with_rows(static_cast<int>(m_at[p + 1] - m_at[p]), [&](auto mt) {
        for (int64_t i = i0; i < std::min(pairs, i0 + WIDE_BLOCK); ++i)
          wide_pass<T, decltype(mt)::value>(w + (n0 + i) * row_bytes, wstep, nb, a, m_at[p], y + n0 + i, ldy, len);
      });
  return true;
}
