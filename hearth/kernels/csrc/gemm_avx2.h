// Prefill-sized matmuls on the avx2 tier, y[M, N] = a @ W.T on the GEMV's 8-bit activations
// (blocks_avx2.h quantize: a scale per 16), as gemm_vnni.h does with AVX-512: W's codes are unpacked
// once per chunk of activation rows into 8-feature panels where one vector holds 8 output features x
// 4 consecutive k, and every GEMM_MR-row block of the chunk passes the panel, each row's 4 codes
// broadcast. Per 16 k the int32 sums become f32 as the GEMV's math does:
//   acc += float(sum q_w q_x) * (s_w d_x) + o_w * (d_x sum q_x)
// so a row's result depends on its panel alone, not on the other rows of the call. Per 16 k, 8
// features and a row: 4 integer dots (vpdpbusd on AVX-VNNI; else 4 vpmaddubsw whose int16 pairs add up
// in int16 as far as the codes' range allows, gemm_chain, then one vpmaddwd) and 4 ops of epilogue,
// against the GEMV's 4 vpmaddubsw, 3 vphaddw, 1 vpmaddwd and ~3.5 f32 ops per 128 k of one feature
// (4-bit codes; gemv_avx2.h dot_row): the GEMV sums lanes of k, so every (row, feature) pair pays
// its own reduction and epilogue. Those 4 are the limit here: on Sapphire Rapids
// vpdpbusd ymm and the f32 ops issue on the same 2 ports (measured: 8 dpbusd + 8 FMA take the time of
// both alone), so the epilogue holds half the ALU slots (~196 GOP/s a core of ~380). On Zen 4 (no
// AVX-VNNI) vpmaddubsw, vpmaddwd, vmulps and FMA share its 2 multiply pipes: 4 + 1 + 1 + 2 = 8 of them
// per row and 16 k, 4 cycles (4 + 4 + 3 = 11 with a vpmaddwd per vpmaddubsw, as before 2026-12-06).
// Fewer per k (activation scales per 32, or ggml's integer sub-scales per 256) is the way past it.
//
// The activation rows of a chunk (~gemm_chunk_bytes() of codes and scales, repacked in blocks of
// GEMM_MR rows: gemm_pack_rows) stay in L2 while all of a thread's panels pass; the weights are read
// and unpacked once per chunk. 1 MB chunks against 384 KB (Sapphire Rapids, 2 MB L2): the Q6_K down
// projection (K = 8960) 123 -> 156 GOP/s a core, the K = 1536 shapes +3-8%. At K = 8960 1 MB is 78
// rows, so the panels' unpacking was paid 7 times at 512 rows (~5% of down's time): chunks count a
// row as at most GEMM_CHUNK_ROW_BYTES, 144 rows a MB at K = 8960 (1.9 MB, from L3 as much as L2; Zen 4,
// 1 MB L2: down 0.93-0.95x the time, 2026-12-06), while the K <= ~4800 shapes keep their 1 MB (2 MB
// cost them 0-3% there). A chunk's bytes set small (tests) still cut it small.
// Runs from a plan's gemm_min_rows (the runner's prefill regime), so decode batches keep the GEMV's sums.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>  // std::memcpy
#include <vector>

#define HK_ROWS_GEMM 1  // decode_library.h's run() takes rows_gemm from a plan's gemm_min_rows

namespace {

constexpr int64_t GEMM_NP = 8;  // output features per panel: one vector
constexpr int GEMM_MR = 6;  // activation rows per register block: 6 f32 accumulators beside 4 code vectors

constexpr int64_t GEMM_CHUNK_ROW_BYTES = 7 * 1024;  // a row counts as at most this in a chunk (the header: K = 8960)

inline int64_t& gemm_chunk_bytes() {  // activation bytes per chunk (hk_gemm_chunk_bytes sets it: benchmarks)
  static int64_t bytes = 1024 * 1024;
  return bytes;
}

// AVX-VNNI (Alder Lake, Sapphire Rapids, Zen 5 on): CPUID.(7, 1):EAX bit 4. Its vpdpbusd adds the
// same four u8 x s8 products as vpmaddubsw + vpmaddwd do (no int16 step to saturate here: |codes| <=
// 127 against |x| <= 127 fits either way), so the sums, and every bit after, are the same.
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
// the library builds with the avx2 tier's flags alone (avx_vnni_usable guards it)
inline __m256i dpbusd_vex(__m256i acc, __m256i u, __m256i s) {
  __asm__("%{vex%} vpdpbusd %2, %1, %0" : "+x"(acc) : "x"(u), "x"(s));
  return acc;
}

inline void transpose8(__m256i* r) {  // 8 x 8 u32: r[j] lane i <- r[i] lane j
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]), t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]), u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]), u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x20);
    r[j + 4] = _mm256_permute2x128_si256(u[j], u[j + 4], 0x31);
  }
}

// A panel of GEMM_NP features: codes [Kp / 4][8][4] (u8; Q8_0's signed), s and o [Kp / 16][8] (each
// 16 weights' scale and offset, w = s q + o); rows: the features' codes in natural order [8][Kp] and
// their scales [8][Kp / 16] before the transpose (features past the weight's last are zeros)
struct GemmPanel {
  std::vector<uint8_t> codes, rows;
  std::vector<float> s, o, rs, ro;
  void fit(int64_t Kp) {
    if (static_cast<int64_t>(codes.size()) >= GEMM_NP * Kp) return;
    codes.assign(GEMM_NP * Kp, 0), rows.assign(GEMM_NP * Kp, 0);
    s.assign(GEMM_NP * Kp / 16, 0.0f), o.assign(GEMM_NP * Kp / 16, 0.0f);
    rs.assign(GEMM_NP * Kp / 16, 0.0f), ro.assign(GEMM_NP * Kp / 16, 0.0f);
  }
};

thread_local GemmPanel gemm_panel;

// weight rows n .. n + cols (cols <= 8) -> the panel
template <class T>
void gemm_unpack(const uint8_t* w, int64_t row_bytes, int64_t n, int64_t cols, int64_t nb, int64_t Kp, GemmPanel& p) {
  const int64_t g = Kp / 16;
  for (int64_t i = 0; i < GEMM_NP; ++i) {
    uint8_t* c = p.rows.data() + i * Kp;
    float *rs = p.rs.data() + i * g, *ro = p.ro.data() + i * g;
    if (i >= cols) {  // no such feature: zero codes and scales
      std::fill(c, c + Kp, 0), std::fill(rs, rs + g, 0.0f), std::fill(ro, ro + g, 0.0f);
      continue;
    }
    const uint8_t* row = w + (n + i) * row_bytes;
    for (int64_t sb = 0; sb < Kp / SB; ++sb) {
      __m256 s[2], o[2];
      const int nch = T::scales(row, sb, nb, s, o);
      _mm256_storeu_ps(rs + 16 * sb, s[0]), _mm256_storeu_ps(rs + 16 * sb + 8, s[1]);
      _mm256_storeu_ps(ro + 16 * sb, o[0]), _mm256_storeu_ps(ro + 16 * sb + 8, o[1]);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)  // unrolled: each chunk's shifts are constants (as dot_row)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + sb * SB + 32 * j),
                            j < nch ? T::codes(row, sb, j) : _mm256_setzero_si256());
    }
  }
  __m256i r[8];
  for (int64_t k = 0; k < Kp; k += 32) {  // 8 quads of 8 features: quad j of every feature into one vector
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.rows.data() + i * Kp + k));
    transpose8(r);
    for (int j = 0; j < 8; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p.codes.data() + (k / 4 + j) * 32), r[j]);
  }
  for (int which = 0; which < 2; ++which) {
    const float* src = which ? p.ro.data() : p.rs.data();
    float* dst = which ? p.o.data() : p.s.data();
    for (int64_t k = 0; k < g; k += 8) {
      for (int i = 0; i < 8; ++i) r[i] = _mm256_castps_si256(_mm256_loadu_ps(src + i * g + k));
      transpose8(r);
      for (int j = 0; j < 8; ++j) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (k + j) * 8), r[j]);
    }
  }
}

// A chunk's activation rows in blocks of GEMM_MR, interleaved so that a register block reads one
// pointer at constant offsets (the natural layout took a pointer per row: 12 of them spilled to the
// stack and reloaded every 16 k): codes [block][Kp / 4][GEMM_MR][4], d16 and a16 [block][Kp / 16][GEMM_MR]
struct GemmRows {
  std::vector<int8_t> q;
  std::vector<float> d, s;
};

thread_local GemmRows gemm_rows_buf;

// rows c0 .. c1 of a -> r (the same bytes and floats, moved)
inline void gemm_pack_rows(const Act& a, int64_t c0, int64_t c1, GemmRows& r) {
  const int64_t Kp = a.Kp, g = Kp / 16, blocks = (c1 - c0 + GEMM_MR - 1) / GEMM_MR;
  if (static_cast<int64_t>(r.q.size()) < blocks * GEMM_MR * Kp) r.q.resize(blocks * GEMM_MR * Kp);
  if (static_cast<int64_t>(r.d.size()) < blocks * GEMM_MR * g) r.d.resize(blocks * GEMM_MR * g), r.s.resize(blocks * GEMM_MR * g);
  for (int64_t m = c0; m < c1; ++m) {
    const int64_t b = (m - c0) / GEMM_MR, i = (m - c0) % GEMM_MR;
    const int8_t* src = a.q + m * Kp;
    int8_t* dst = r.q.data() + b * GEMM_MR * Kp + 4 * i;
    for (int64_t k4 = 0; k4 < Kp / 4; ++k4) std::memcpy(dst + k4 * 4 * GEMM_MR, src + 4 * k4, 4);
    float *d = r.d.data() + b * GEMM_MR * g + i, *s = r.s.data() + b * GEMM_MR * g + i;
    for (int64_t k16 = 0; k16 < g; ++k16) d[k16 * GEMM_MR] = a.d16[m * g + k16], s[k16 * GEMM_MR] = a.a16[m * g + k16];
  }
}

// How many vpmaddubsw results of a format's codes (|code| <= QMAX) against activations (|x| <= 127)
// add up in int16 before vpmaddwd must widen them: each is a pair of products, so n of them stay
// below 2^15 while n * 2 * QMAX * 127 does (4-bit codes: 4, a whole 16 k; Q6_K: 2; Q8_0: 1). The
// integer sums are exact either way: the same bits, with one vpmaddwd per 16 k instead of 4.
template <class T>
constexpr int gemm_chain() {
  const int n = 32767 / (2 * T::QMAX * 127);
  return n >= 4 ? 4 : n >= 2 ? 2 : 1;
}

// the int32 sums of 4 code vectors w (16 k of 8 features) against one row's 4 quads q[4 GEMM_MR j]
template <bool SIGNED, int CHAIN, bool VNNI>
inline __m256i gemm_dot16(const __m256i* w, const int8_t* q) {
  __m256i sum = _mm256_setzero_si256(), h = sum;
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i uw = SIGNED ? _mm256_sign_epi8(w[j], w[j]) : w[j];  // |codes| for int8 codes
    int32_t v;
    std::memcpy(&v, q + j * GEMM_MR * 4, 4);
    __m256i xb = _mm256_set1_epi32(v);
    if (SIGNED) xb = _mm256_sign_epi8(xb, w[j]);  // |w| x sign(w) x: the u8 x s8 product stays exact
    if (VNNI) {
      sum = dpbusd_vex(sum, uw, xb);
      continue;
    }
    const __m256i p = _mm256_maddubs_epi16(uw, xb);
    h = j % CHAIN ? _mm256_add_epi16(h, p) : p;
    if (j % CHAIN == CHAIN - 1) {
      const __m256i s = _mm256_madd_epi16(h, _mm256_set1_epi16(1));
      sum = j < CHAIN ? s : _mm256_add_epi32(sum, s);
    }
  }
  return sum;
}

// y[r][0 .. cols) for the MR rows of packed block b of a chunk over the whole panel
template <bool SIGNED, int CHAIN, bool VNNI, int MR>
void gemm_block(const GemmPanel& p, const GemmRows& rows, int64_t b, int64_t Kp, float* y, int64_t ldy, int64_t cols) {
  const int64_t g = Kp / 16;
  const int8_t* q = rows.q.data() + b * GEMM_MR * Kp;
  const float* d = rows.d.data() + b * GEMM_MR * g;
  const float* s16 = rows.s.data() + b * GEMM_MR * g;
  __m256 acc[MR];
  for (int r = 0; r < MR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t k16 = 0; k16 < g; ++k16, q += 16 * GEMM_MR, d += GEMM_MR, s16 += GEMM_MR) {
    __m256i w[4];
    for (int j = 0; j < 4; ++j) w[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.codes.data() + (4 * k16 + j) * 32));
    const __m256 sw = _mm256_loadu_ps(p.s.data() + 8 * k16), ow = _mm256_loadu_ps(p.o.data() + 8 * k16);
    for (int r = 0; r < MR; ++r) {  // a row at a time: 4 codes, its accumulator and a few temporaries live
      const __m256i sum = gemm_dot16<SIGNED, CHAIN, VNNI>(w, q + 4 * r);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(sw, _mm256_set1_ps(d[r])), acc[r]);
      acc[r] = _mm256_fmadd_ps(ow, _mm256_set1_ps(s16[r]), acc[r]);
    }
  }
  for (int r = 0; r < MR; ++r) store8(y + r * ldy, acc[r], cols);
}

// rows c0 .. c1 of the chunk packed in `rows` through one panel: blocks of GEMM_MR rows, then the tail
template <bool SIGNED, int CHAIN, bool VNNI>
void gemm_rows(const GemmPanel& p, const GemmRows& rows, int64_t Kp, int64_t c0, int64_t c1, float* y, int64_t ldy,
               int64_t cols) {
  int64_t b = 0, m = c0;
  for (; m + GEMM_MR <= c1; m += GEMM_MR, ++b) gemm_block<SIGNED, CHAIN, VNNI, GEMM_MR>(p, rows, b, Kp, y + m * ldy, ldy, cols);
  float* yt = y + m * ldy;
  switch (c1 - m) {
    case 5: gemm_block<SIGNED, CHAIN, VNNI, 5>(p, rows, b, Kp, yt, ldy, cols); break;
    case 4: gemm_block<SIGNED, CHAIN, VNNI, 4>(p, rows, b, Kp, yt, ldy, cols); break;
    case 3: gemm_block<SIGNED, CHAIN, VNNI, 3>(p, rows, b, Kp, yt, ldy, cols); break;
    case 2: gemm_block<SIGNED, CHAIN, VNNI, 2>(p, rows, b, Kp, yt, ldy, cols); break;
    case 1: gemm_block<SIGNED, CHAIN, VNNI, 1>(p, rows, b, Kp, yt, ldy, cols); break;
    default: break;
  }
}

// y[m, n] for weight rows n0 .. n1 and every row of a (rows_dot's contract), chunk by chunk of rows
template <class T>
void rows_gemm(const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t n1, int64_t nb, const Act& a, float* y,
               int64_t ldy) {
  const int64_t Kp = a.Kp, g = Kp / 16;
  GemmPanel& p = gemm_panel;
  p.fit(Kp);
  const int64_t per_row = Kp + 2 * g * static_cast<int64_t>(sizeof(float));
  const int64_t rows = gemm_chunk_bytes() / std::min(per_row, GEMM_CHUNK_ROW_BYTES);
  const int64_t chunk = std::max<int64_t>(GEMM_MR, rows / GEMM_MR * GEMM_MR);
  const bool vnni = gemm_avx_vnni();
  for (int64_t c0 = 0; c0 < a.M; c0 += chunk) {
    const int64_t c1 = std::min(a.M, c0 + chunk);
    gemm_pack_rows(a, c0, c1, gemm_rows_buf);
    for (int64_t n = n0; n < n1; n += GEMM_NP) {
      const int64_t cols = std::min(GEMM_NP, n1 - n);
      gemm_unpack<T>(w, row_bytes, n, cols, nb, Kp, p);
      for (int64_t b = 0; b < std::min(GEMM_NP, n1 - n - GEMM_NP) * row_bytes; b += 64)  // the next panel's rows
        __builtin_prefetch(w + (n + GEMM_NP) * row_bytes + b, 0, 2);
      if (vnni)
        gemm_rows<T::SIGNED, 1, true>(p, gemm_rows_buf, Kp, c0, c1, y + n, ldy, cols);
      else
        gemm_rows<T::SIGNED, gemm_chain<T>(), false>(p, gemm_rows_buf, Kp, c0, c1, y + n, ldy, cols);
    }
  }
}

}  // namespace
