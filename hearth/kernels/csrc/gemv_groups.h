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

// Q6_K's order (Order::transposed): lane 4L + k holds group 4k + L, the order its codes fall into with
// in-lane shuffles (grouped_codes<TQ6_K>). Its own inverse: lane l = v[4 (l % 4) + l / 4]
template <class V>
inline V transpose16(V v) {
  const __m512i at = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  if constexpr (std::is_same<V, __m512>::value) {
    return _mm512_permutexvar_ps(at, v);
  } else {
    return _mm512_permutexvar_epi32(at, v);
  }
}

// A row's 16 group values v in T's GEMV order -> group order
template <class T>
inline __m512 in_group_order(__m512 v) {
  if constexpr (T::order == Order::lanes) return lanes_to_groups(v);
  if constexpr (T::order == Order::transposed) return transpose16(v);
  return v;
}

// Which of Act's layouts (Act::gemv) T's GEMV reads: natural (Q4_K's lanes), paired, grouped, transposed
template <class T>
constexpr int gemv_layout() {
  return T::paired ? 1 : T::order == Order::lanes ? 0 : T::order == Order::groups ? 2 : 3;
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

// A layout's codes into the GEMV's order O (to_groups, then for the transposed order transpose16; d16 and
// a16 alike), in place
template <Order O>
void order_codes(const Act& act, Layout& l) {
  const int64_t g = act.Kp / 16;
  for (int64_t m = 0; m < act.M; ++m)
    for (int64_t sb = 0; sb < act.Kp / SB; ++sb) {
      int8_t* at = l.q + m * act.Kp + sb * SB;
      __m512i q[4];
      for (int c = 0; c < 4; ++c) q[c] = _mm512_loadu_si512(at + 64 * c);
      to_groups<O == Order::lanes>(q);
      for (int c = 0; c < 4; ++c) _mm512_storeu_si512(at + 64 * c, O == Order::transposed ? transpose16(q[c]) : q[c]);
      if (O != Order::groups)
        for (float* f : {l.d16 + m * g + 16 * sb, l.a16 + m * g + 16 * sb}) {
          const __m512 v = _mm512_loadu_ps(f);
          _mm512_storeu_ps(f, O == Order::lanes ? groups_to_lanes(v) : transpose16(v));
        }
    }
}

// An Act's layouts into the GEMV's orders, after tile_acts has read them: paired and natural in lane
// order, and where a part reads group order (`grouped`: Order::groups) or the transposed order
// (`transposed`), natural's copies in those
void group_codes(Act& act, bool grouped, bool transposed) {
  if (act.paired.q) order_codes<Order::lanes>(act, act.paired);
  if (!act.natural.q) return;
  const int64_t g = act.Kp / 16;
  const size_t floats = static_cast<size_t>(act.M * g) * sizeof(float), codes = static_cast<size_t>(act.M * act.Kp);
  const size_t per = 2 * floats + codes, need = per * (grouped + transposed) + 64;
  if (grouped_buf.size() < need) grouped_buf.resize(need);
  uint8_t* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(grouped_buf.data()) + 63) & ~uintptr_t{63});
  auto copy = [&](Layout& l) {  // natural's values (chunk order), at p
    l.d16 = reinterpret_cast<float*>(p), l.a16 = l.d16 + act.M * g, l.q = reinterpret_cast<int8_t*>(l.a16 + act.M * g);
    p += per;  // a multiple of 64: the codes' rows stay 64-byte aligned
    std::memcpy(l.d16, act.natural.d16, floats);
    std::memcpy(l.a16, act.natural.a16, floats);
    std::memcpy(l.q, act.natural.q, codes);
  };
  if (grouped) copy(act.grouped), order_codes<Order::groups>(act, act.grouped);
  if (transposed) copy(act.transposed), order_codes<Order::transposed>(act, act.transposed);
  order_codes<Order::lanes>(act, act.natural);
}

// A superblock's codes in the GEMV's lane order: decoded chunk by chunk, then rearranged (to_groups)
template <class T>
inline void decoded_groups(const uint8_t* row, int64_t sb, int64_t nb, int nch, __m512i q[4]) {
  for (int c = 0; c < 4; ++c)  // a short last superblock's missing chunks: zero codes (and zero activations)
    q[c] = c < nch ? T::codes(row, sb, c, nb) : _mm512_setzero_si512();
  static_assert(T::order != Order::transposed, "the transposed order's types read their codes themselves");
  to_groups<T::order == Order::lanes>(q);
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

// IQ4_XS straight into Q4_K's lane order: 32-group s's 16 bytes of indices are qs dwords 4s .. 4s + 3 (low
// nibbles its first 16 weights, high the next), so chunk c, 128-bit lane L takes dword c of 32-groups
// (s0, s1, s0 + 4, s1 + 4), (s0, s1) = (0, 1) for L < 2, else (2, 3): one vpermt2d, the low nibbles for even
// L and the high for odd (lane l: group LANE_GROUP[l]), then the codebook's vpshufb
template <>
inline void grouped_codes<TIQ4_XS>(const uint8_t* row, int64_t sb, int64_t, int, __m512i q[4]) {
  const uint8_t* qs = row + sb * TIQ4_XS::TS + TIQ4_XS::QS;
  const __m512i a = _mm512_loadu_si512(qs), b = _mm512_loadu_si512(qs + 64);
  const __m512i at = _mm512_setr_epi32(0, 4, 16, 20, 0, 4, 16, 20, 8, 12, 24, 28, 8, 12, 24, 28);
  const __m512i shift = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
  for (int c = 0; c < 4; ++c) {
    const __m512i v = _mm512_permutex2var_epi32(a, _mm512_add_epi32(at, _mm512_set1_epi32(c)), b);
    q[c] = _mm512_shuffle_epi8(IQ4_CODES, _mm512_and_si512(_mm512_srlv_epi32(v, shift), _mm512_set1_epi8(0x0F)));
  }
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

// IQ4_NL: Q4_0's nibbles, then the codebook's vpshufb (a short superblock: decoded_groups, codes already)
template <>
inline void grouped_codes<Blocks32<TIQ4_NL>>(const uint8_t* row, int64_t sb, int64_t nb, int nch, __m512i q[4]) {
  if (nb - sb * 8 < 8) return decoded_groups<Blocks32<TIQ4_NL>>(row, sb, nb, nch, q);
  nibble_block_groups<TIQ4_NL>(row, sb, nb, nch, q);
  for (int c = 0; c < 4; ++c) q[c] = _mm512_shuffle_epi8(IQ4_CODES, q[c]);
}

// MXFP4: the same, through its own codebook
template <>
inline void grouped_codes<Blocks32<TMXFP4>>(const uint8_t* row, int64_t sb, int64_t nb, int nch, __m512i q[4]) {
  if (nb - sb * 8 < 8) return decoded_groups<Blocks32<TMXFP4>>(row, sb, nb, nch, q);
  nibble_block_groups<TMXFP4>(row, sb, nb, nch, q);
  for (int c = 0; c < 4; ++c) q[c] = _mm512_shuffle_epi8(MXFP4_CODES, q[c]);
}

// Q6_K straight into its transposed order (lane 4L + k: group 4k + L; chunk c: the group's codes 4c .. 4c + 3)
// with in-lane shuffles only. 128-bit lane L of ql's half h (64 bytes) holds group 8h + L's low 4 bits in its
// low nibbles and group 8h + 4 + L's in its high ones (nibble n: group 8h + 4n + L, its 2-bit highs at bits
// 2s, s = 2n + L / 2, of qh[32h + 16 (L % 2) ..]). So chunk c, lane L takes dword c of ql0 twice (low nibbles,
// then high: k = 0, 1) and of ql1 twice (k = 2, 3), one vshufps as nibble_groups takes Q4_K's, and the same
// vshufps takes the highs' dword c from qh's halves, each broadcast to both 256-bit halves (lane L: qh's lane
// 2h + L % 2) and masked to its lane's planes (lanes 0-1: s = 0, 2; lanes 2-3: s = 1, 3), so that a rotate by
// dword puts the wanted plane at bits 4-5 with bits 6-7 clear; one ternlog joins them. 22 vector ops a
// superblock, where the group order took 24, 8 of them cross-lane permutes (Zen 4, one thread, a synthetic
// Q6_K head: 0.78-0.85x the time at 4 rows, 0.92-0.98x at 8 and 16; the 1.5B's down 0.92-0.97x at 1-16 rows;
// whole verify steps 0.97-1.00x, docs/speculative.md; combining the codes first and transposing them by
// unpacks, 20 ops but a longer chain before the first vpdpbusd, was 1.03-1.11x at 8 rows)
template <>
__attribute__((always_inline)) inline void grouped_codes<TQ6_K>(const uint8_t* row, int64_t sb, int64_t, int, __m512i q[4]) {
  const uint8_t* b = row + sb * TQ6_K::TS;
  const __m512 fa = _mm512_castsi512_ps(_mm512_loadu_si512(b)), fb = _mm512_castsi512_ps(_mm512_loadu_si512(b + 64));
  const __m512i planes = _mm512_setr_epi64(0x3333333333333333ll, 0x3333333333333333ll, 0x3333333333333333ll,
                                           0x3333333333333333ll, static_cast<long long>(0xCCCCCCCCCCCCCCCCull),
                                           static_cast<long long>(0xCCCCCCCCCCCCCCCCull),
                                           static_cast<long long>(0xCCCCCCCCCCCCCCCCull),
                                           static_cast<long long>(0xCCCCCCCCCCCCCCCCull));
  auto highs = [&](const uint8_t* qh) {  // 32 bytes of qh in both 256-bit halves, each lane's planes
    const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh)));
    return _mm512_castsi512_ps(_mm512_and_si512(v, planes));
  };
  const __m512 h0 = highs(b + 128), h1 = highs(b + 160);
  const __m512i nibble = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  // plane s to bits 4-5: lanes 0-1 s = 0 (k even: left 4), 2 (odd: in place); lanes 2-3 s = 1 (left 2), 3 (right 2)
  const __m512i to_45 = _mm512_setr_epi32(4, 0, 4, 0, 4, 0, 4, 0, 2, 30, 2, 30, 2, 30, 2, 30);
  auto chunk = [&](auto c) {  // vshufps' immediate: dword c of each 128-bit lane
    constexpr int imm = decltype(c)::value * 0x55;
    const __m512i lo = _mm512_srlv_epi32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, imm)), nibble);
    const __m512i hi = _mm512_rolv_epi32(_mm512_castps_si512(_mm512_shuffle_ps(h0, h1, imm)), to_45);
    return _mm512_ternarylogic_epi32(lo, hi, _mm512_set1_epi8(0x0F), 0xE4);  // C ? A : B: lo's bits 0-3, hi's 4-7
  };
  q[0] = chunk(std::integral_constant<int, 0>{}), q[1] = chunk(std::integral_constant<int, 1>{});
  q[2] = chunk(std::integral_constant<int, 2>{}), q[3] = chunk(std::integral_constant<int, 3>{});
}
