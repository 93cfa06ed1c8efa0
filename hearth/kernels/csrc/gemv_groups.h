// The GEMV's scale-group order (blocks.h dot_row): the rearrangement of a superblock's codes, the fixed
// sum of a row's 16 group sums, and the weights' codes read straight into that order. Included by
// blocks.h after the block types and Act, inside its namespace.
#pragma once

// The GEMV's lanes are scale groups: a superblock's 4 chunks of 64 codes (chunk order) are
// rearranged so that lane i of every chunk holds 4 of group i's 16 codes (chunk c, lane i: codes
// 16 i + 4 c .. + 3). Each lane then sums one group's 16 products exactly in int32 across the
// chunks, and a group's scales apply once per superblock instead of once per chunk (with a
// permute each): ~14 instructions per superblock and activation row instead of ~24, what a
// verify step's rows cost. Weights are rearranged per row as read; activations once, in place.
inline void to_groups(__m512i q[4]) {  // G_c[i] = N_{i/4}[4 (i % 4) + c], in dwords
  const __m512i base = _mm512_set_epi32(28, 24, 20, 16, 12, 8, 4, 0, 28, 24, 20, 16, 12, 8, 4, 0);
  __m512i g[4];
  for (int c = 0; c < 4; ++c) {
    const __m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32(c));
    g[c] = _mm512_mask_mov_epi32(_mm512_permutex2var_epi32(q[0], idx, q[1]), 0xFF00,
                                 _mm512_permutex2var_epi32(q[2], idx, q[3]));
  }
  for (int c = 0; c < 4; ++c) q[c] = g[c];
}

// The 16 group sums of a row, added in a fixed tree (the AMX epilogue repeats it across rows):
// a_j = v_{j+8} + v_j, b_j = a_{j+4} + a_j, then (b_0 + b_2) + (b_1 + b_3)
inline float sum_groups(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), _mm512_castps512_ps256(v));
  const __m128 b = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));  // c_0 = b_0 + b_2, c_1 = b_1 + b_3
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

// An Act's codes into the GEMV's group order (to_groups), in place; after tile_acts has read them
void group_codes(Act& act) {
  for (Layout* l : {&act.natural, &act.paired}) {
    if (!l->q) continue;
    for (int64_t m = 0; m < act.M; ++m)
      for (int64_t sb = 0; sb < act.Kp / SB; ++sb) {
        int8_t* at = l->q + m * act.Kp + sb * SB;
        __m512i q[4];
        for (int c = 0; c < 4; ++c) q[c] = _mm512_loadu_si512(at + 64 * c);
        to_groups(q);
        for (int c = 0; c < 4; ++c) _mm512_storeu_si512(at + 64 * c, q[c]);
      }
  }
}

// A superblock's codes in the GEMV's group order: decoded chunk by chunk, then rearranged (to_groups)
template <class T>
inline void decoded_groups(const uint8_t* row, int64_t sb, int64_t nb, int nch, __m512i q[4]) {
  for (int c = 0; c < 4; ++c)  // a short last superblock's missing chunks: zero codes (and zero activations)
    q[c] = c < nch ? T::codes(row, sb, c, nb) : _mm512_setzero_si512();
  to_groups(q);
}

// The same, read straight into group order where a type has a way (specializations below)
template <class T>
inline void grouped_codes(const uint8_t* row, int64_t sb, int64_t nb, int nch, __m512i q[4]) {
  decoded_groups<T>(row, sb, nb, nch, q);
}

// 128 bytes of nibbles laid out as Q4_K's qs (a, b: bytes 0-63, 64-127) straight into group order:
// lane i = 4C + r of chunk c is dword 8C + 4 (r % 2) + c, its low nibbles for r < 2 and high ones
// after (a permute, a shift and a mask per chunk instead of a decode and to_groups' two permutes and
// a blend)
inline void nibble_groups(__m512i a, __m512i b, __m512i q[4]) {
  const __m512i at = _mm512_setr_epi32(0, 4, 0, 4, 8, 12, 8, 12, 16, 20, 16, 20, 24, 28, 24, 28);
  const __m512i shift = _mm512_setr_epi32(0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4);
  for (int c = 0; c < 4; ++c) {
    const __m512i v = _mm512_permutex2var_epi32(a, _mm512_add_epi32(at, _mm512_set1_epi32(c)), b);
    q[c] = _mm512_and_si512(_mm512_srlv_epi32(v, shift), _mm512_set1_epi8(0x0F));
  }
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

// Q6_K straight into group order: group i = 8h + 2s + u (weights 128h + 32s + 16u ..) takes, for
// chunk c, ql's dword 16h + 8 (s & 1) + 4u + c (nibble s >> 1) and qh's dword 8h + 4u + c (bits 2s,
// rotated to 4-5 of each byte)
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
