// The GEMV's lane order (gemv_vnni.h dot_row): the rearrangement of a superblock's codes, the fixed sum
// of a row's 16 group sums, and the weights' codes read straight into that order. Included by
// blocks.h after the block types and Act, inside its namespace.
#pragma once

// The GEMV's lanes are scale groups: a superblock's 4 chunks of 64 codes (chunk order) are
// rearranged so that lane l of every chunk holds 4 of group g = LANE_GROUP[l]'s 16 codes (chunk c,
// lane l: codes 16 g + 4 c .. + 3). Each lane then sums one group's 16 products exactly in int32
// across the chunks, and a group's scales apply once per superblock instead of once per chunk (with
// a permute each): ~14 instructions per superblock and activation row instead of ~24, what a verify
// step's rows cost. Weights are rearranged per row as read; activations (codes, d16, a16) once, in place.
// The lane order is the one 4-bit nibbles fall into with in-lane shuffles (nibble_groups): 128-bit
// lane L of a 64-byte load of Q4_K's qs holds one group's low nibbles and another's high ones, so
// its lanes take groups g0 = 4 (L / 2) + L % 2, g0 + 2 (bytes 0-63) and g0 + 8, g0 + 10 (64-127).
// A group's sum is the same int32 in any lane, and the scales are the same floats, so every row's
// bits are those of group order (2026-12-05, Zen 4: Q4_K's four vpermt2d per superblock -> vshufps).
constexpr int LANE_GROUP[16] = {0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15};

inline __m512 groups_to_lanes(__m512 v) {  // lane l = v[LANE_GROUP[l]]
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15), v);
}
inline __m512 lanes_to_groups(__m512 v) {  // the inverse: lane g = v[l] where LANE_GROUP[l] = g
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15), v);
}

// chunks N_0..3 (chunk order) -> G_c[l] = N_{g/4}[4 (g % 4) + c] for g = LANE_GROUP[l] (LANES), else g =
// l, in dwords. Lanes: lanes 0-7 take groups of N_0 and N_2, lanes 8-15 of N_1 and N_3
template <bool LANES>
inline void to_groups(__m512i q[4]) {
  const __m512i base = LANES ? _mm512_setr_epi32(0, 8, 16, 24, 4, 12, 20, 28, 0, 8, 16, 24, 4, 12, 20, 28)
                             : _mm512_set_epi32(28, 24, 20, 16, 12, 8, 4, 0, 28, 24, 20, 16, 12, 8, 4, 0);
  __m512i g[4];
  for (int c = 0; c < 4; ++c) {
    const __m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32(c));
    g[c] = _mm512_mask_mov_epi32(_mm512_permutex2var_epi32(q[0], idx, q[LANES ? 2 : 1]), 0xFF00,
                                 _mm512_permutex2var_epi32(q[LANES ? 1 : 2], idx, q[3]));
  }
  for (int c = 0; c < 4; ++c) q[c] = g[c];
}

// The 16 group sums of a row (in group order: lanes_to_groups), added in a fixed tree (the AMX
// epilogue repeats it across rows):
// a_j = v_{j+8} + v_j, b_j = a_{j+4} + a_j, then (b_0 + b_2) + (b_1 + b_3)
inline float sum_groups(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), _mm512_castps512_ps256(v));
  const __m128 b = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));  // c_0 = b_0 + b_2, c_1 = b_1 + b_3
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

thread_local std::vector<uint8_t> grouped_buf;

// A layout's codes into the GEMV's lane order (to_groups, with d16 and a16: groups_to_lanes), or group
// order, in place
template <bool LANES>
void order_codes(const Act& act, Layout& l) {
  const int64_t g = act.Kp / 16;
  for (int64_t m = 0; m < act.M; ++m)
    for (int64_t sb = 0; sb < act.Kp / SB; ++sb) {
      int8_t* at = l.q + m * act.Kp + sb * SB;
      __m512i q[4];
      for (int c = 0; c < 4; ++c) q[c] = _mm512_loadu_si512(at + 64 * c);
      to_groups<LANES>(q);
      for (int c = 0; c < 4; ++c) _mm512_storeu_si512(at + 64 * c, q[c]);
      if (LANES)
        for (float* f : {l.d16 + m * g + 16 * sb, l.a16 + m * g + 16 * sb})
          _mm512_storeu_ps(f, groups_to_lanes(_mm512_loadu_ps(f)));
    }
}

// An Act's layouts into the GEMV's orders, after tile_acts has read them: paired and natural in lane
// order, and where `grouped` (a part reads group order: T::lanes false) natural's copy in group order
void group_codes(Act& act, bool grouped) {
  if (act.paired.q) order_codes<true>(act, act.paired);
  if (!act.natural.q) return;
  if (grouped) {
    const int64_t g = act.Kp / 16;
    const size_t floats = static_cast<size_t>(act.M * g) * sizeof(float), codes = static_cast<size_t>(act.M * act.Kp);
    if (grouped_buf.size() < 2 * floats + codes + 64) grouped_buf.resize(2 * floats + codes + 64);
    uint8_t* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(grouped_buf.data()) + 63) & ~uintptr_t{63});
    Layout& l = act.grouped;
    l.d16 = reinterpret_cast<float*>(p), l.a16 = l.d16 + act.M * g, l.q = reinterpret_cast<int8_t*>(l.a16 + act.M * g);
    std::memcpy(l.d16, act.natural.d16, floats);
    std::memcpy(l.a16, act.natural.a16, floats);
    std::memcpy(l.q, act.natural.q, codes);
    order_codes<false>(act, l);
  }
  order_codes<true>(act, act.natural);
}

// A superblock's codes in the GEMV's lane order: decoded chunk by chunk, then rearranged (to_groups)
template <class T>
inline void decoded_groups(const uint8_t* row, int64_t sb, int64_t nb, int nch, __m512i q[4]) {
  for (int c = 0; c < 4; ++c)  // a short last superblock's missing chunks: zero codes (and zero activations)
    q[c] = c < nch ? T::codes(row, sb, c, nb) : _mm512_setzero_si512();
  to_groups<T::lanes>(q);
}

// The same, read straight into group order where a type has a way (specializations below)
template <class T>
inline void grouped_codes(const uint8_t* row, int64_t sb, int64_t nb, int nch, __m512i q[4]) {
  decoded_groups<T>(row, sb, nb, nch, q);
}

// 128 bytes of nibbles laid out as Q4_K's qs (a, b: bytes 0-63, 64-127) straight into lane order:
// chunk c, 128-bit lane L takes dword 4 L + c of a twice (low nibbles, then high) and of b twice:
// an in-lane shuffle (vshufps), a shift and a mask per chunk instead of a cross-lane vpermt2d (group
// order, before 2026-12-05). With k4_lane_scales, Zen 4, one thread, the 1.5B's Q4_K matrices at one
// row: 0.91-0.93x the time (8 rows: 0.97x)
inline void nibble_groups(__m512i a, __m512i b, __m512i q[4]) {
  const __m512i shift = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
  const __m512 v[4] = {_mm512_shuffle_ps(fa, fb, 0x00), _mm512_shuffle_ps(fa, fb, 0x55), _mm512_shuffle_ps(fa, fb, 0xAA),
                       _mm512_shuffle_ps(fa, fb, 0xFF)};  // [a, a, b, b] dword c of each 128-bit lane
  for (int c = 0; c < 4; ++c)
    q[c] = _mm512_and_si512(_mm512_srlv_epi32(_mm512_castps_si512(v[c]), shift), _mm512_set1_epi8(0x0F));
}

template <>
inline void grouped_codes<TQ4_K>(const uint8_t* row, int64_t sb, int64_t, int, __m512i q[4]) {
  const uint8_t* qs = row + sb * TQ4_K::TS + 16;
  nibble_groups(_mm512_loadu_si512(qs), _mm512_loadu_si512(qs + 64), q);
}

// Q4_0/Q4_1: the 8 blocks' 16 bytes of nibbles side by side are Q4_K's layout in the chunk order's
// pairs (chunk p: low nibbles of blocks 2p, 2p + 1, then their high ones); a short superblock (the
// row's last, K % 256 != 0) the generic way, which reads no block past the row
template <class B>
inline void nibble_block_groups(const uint8_t* row, int64_t sb, int64_t nb, int nch, __m512i q[4]) {
  if (nb - sb * 8 < 8) return decoded_groups<Blocks32<B>>(row, sb, nb, nch, q);
  const uint8_t* x = row + sb * 8 * B::TS + B::QS;
  auto blocks4 = [&](const uint8_t* p) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + B::TS)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * B::TS)), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 3 * B::TS)), 3);
  };
  nibble_groups(blocks4(x), blocks4(x + 4 * B::TS), q);
}

template <>
inline void grouped_codes<Blocks32<TQ4_0>>(const uint8_t* row, int64_t sb, int64_t nb, int nch, __m512i q[4]) {
  nibble_block_groups<TQ4_0>(row, sb, nb, nch, q);
}

template <>
inline void grouped_codes<Blocks32<TQ4_1>>(const uint8_t* row, int64_t sb, int64_t nb, int nch, __m512i q[4]) {
  nibble_block_groups<TQ4_1>(row, sb, nb, nch, q);
}

// Q6_K straight into group order (its lanes = false: the lane order's scales cost it a shuffle, which
// its codes do not win back): group i = 8h + 2s + u (weights 128h + 32s + 16u ..) takes, for chunk c,
// ql's dword 16h + 8 (s & 1) + 4u + c (nibble s >> 1) and qh's dword 8h + 4u + c (bits 2s, rotated to
// 4-5 of each byte)
template <>
inline void grouped_codes<TQ6_K>(const uint8_t* row, int64_t sb, int64_t, int, __m512i q[4]) {
  const uint8_t* b = row + sb * TQ6_K::TS;
  const __m512i l0 = _mm512_loadu_si512(b), l1 = _mm512_loadu_si512(b + 64), qh = _mm512_loadu_si512(b + 128);
  const __m512i at_l = _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 16, 20, 24, 28, 16, 20, 24, 28);
  const __m512i at_h = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 8, 12, 8, 12, 8, 12, 8, 12);
  const __m512i nib = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
  const __m512i rot = _mm512_setr_epi32(4, 4, 2, 2, 0, 0, 30, 30, 4, 4, 2, 2, 0, 0, 30, 30);
  for (int c = 0; c < 4; ++c) {
    const __m512i cc = _mm512_set1_epi32(c);
    const __m512i lo = _mm512_srlv_epi32(_mm512_permutex2var_epi32(l0, _mm512_add_epi32(at_l, cc), l1), nib);
    const __m512i hi = _mm512_and_si512(_mm512_rolv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(at_h, cc), qh), rot),
                                        _mm512_set1_epi8(0x30));
    q[c] = _mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi8(0x0F), 0xE4);  // low nibble of lo, bits 4-5 of hi
  }
}
