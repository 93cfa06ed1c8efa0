// Batch-sized matmuls without AMX, y[M, N] = x[M, K] @ W.T on AVX-512 VNNI: x's rows quantized to
// 8 bits with a scale per 16 values (quantize's scale16, natural layout: the GEMV's activations), W's
// codes unpacked once per 32-row panel into a layout where one vector holds 16 output features x 4
// consecutive k, and every activation row passes that panel before the next one is unpacked
// (gemm_bf16.h's scheme).
//
// Where it runs: from VNNI_GEMM_MIN_ROWS rows on (decode batches, verified drafts, prefills). A zmm
// vpdpbusd (64 MACs) issues as often as a vdpbf16ps (32): measured ~1/cycle each on Zen 4; this loop
// spends 3 vector ops per 16 weights on turning int32 sums into f32 (4 vpdpbusd) and 1 per scale
// group of the weights on the offsets. On Zen 4 the multiply and both FMAs share vpdpbusd's two
// pipes: that bounds the loop at ~279 GOP/s (Q4_K) / ~259 (Q6_K) at 3.5 GHz, and it runs there
// (measured 2026-12-05, docs/performance.md; other register blocks or ymm issue the same ops). Prefills
// took an AVX512-BF16 GEMM (W expanded to bf16 panels per call) until 2026-12-05: on Sapphire Rapids
// with the AMX tier forced off this loop ran the 1.5B model's prefill shapes 1.7-2.9x faster, on
// Zen 4 ~1.3x (an earlier measurement), and with a scale per 16 (the GEMV's rounding, blocks.h
// quantize) its prefill logits stay within the fidelity bound (tests/models/test_fidelity.py at the
// avx512 tier), so batches and prefills keep the fidelity of single-row decodes. Below 64 rows its
// panels are half the bytes to unpack of bf16's.
//
// Register block: 2 vectors of output features (the panel's 32) x MR activation rows; per 4 k a
// weight vector is loaded and each row's 4 codes broadcast (the vpdpbusd memory operand). Per 16 k
// the int32 sums become f32 as the GEMV's math does (GS: the weights' scale group, 16 or 32 k):
//   acc += float(sum q_w q_x) * (s_w d_x) + o_w * (sum over GS of d_x q_x)
// so a row's result depends on its panel's sums alone, not on the other rows of the call.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "amx.h"  // AMX_MIN_ROWS
#include "blocks.h"
#include "gemm_bf16.h"  // transpose16, AlignedAlloc, scratch
#include "simd.h"

namespace {

// From this many rows on, where AMX is not usable, matmuls run here instead of the GEMV (rows_dot):
// the row count where the AMX tiles take over, so the runner's row regimes stay the same at every tier.
// Measured (one thread, Zen 4): the GEMM's time is 0.6-1.0x the GEMV's at 4 rows, 0.7-0.9x at 8,
// 0.5-0.9x at 10 (K = 8960 the least), 0.4-0.5x at 16 and ~0.3x from 64 (q|k|v, down of SmolLM2-135M
// and Qwen2.5-Coder-1.5B): the GEMV decodes every weight once per 4 rows, this once per call.
constexpr int VNNI_GEMM_MIN_ROWS = AMX_MIN_ROWS;

constexpr int64_t VNNI_PANEL = 32;  // output features per panel: two vectors of 16
constexpr int VNNI_MR = 6;  // activation rows per register block: 12 f32 + 12 int32 accumulators

// A panel of 32 output features over K: codes[K / 4][32][4] (u8, vector h of quad j at 128 j + 64 h),
// s, o[K / 16][32] (f32: each 16 weights' scale and offset, w = s q + o, per feature)
struct VnniPanel {
  uint8_t* codes;
  float *s, *o;
  int gs;  // 32 when every feature's scales cover 32 weights (offsets read every other 16-group), else 16
};

inline int64_t vnni_panel_bytes(int64_t K) { return VNNI_PANEL * K + 2 * (K / 16) * VNNI_PANEL * 4; }

inline VnniPanel vnni_panel_at(uint8_t* base, int64_t K, int gs) {
  float* s = reinterpret_cast<float*>(base + VNNI_PANEL * K);
  return {base, s, s + (K / 16) * VNNI_PANEL, gs};
}

// The scale group (16 or 32 weights) a type's (s, o) cover: 32 for the 32-wide block types and for
// the k-quants whose scales and mins cover 32 (Q4_K, Q5_K: LEVELS set), 16 for Q2_K, Q3_K, Q6_K.
template <class T>
constexpr int vnni_group() {
  if constexpr (T::paired) {
    return 32;
  } else {
    return T::LEVELS > 0 ? 32 : 16;
  }
}

// The staging path (where gemm_vnni_panels.h's direct builders do not apply: Q2_K, Q3_K, 16 features
// across parts or past N): one weight row -> its codes in natural order (codes[k], u8; Kp = K rounded
// up to 256 bytes) and each 16 weights' scale and offset (s16, o16: Kp / 16). Blocks past the row's
// last read as zeros.
template <class T>
void vnni_row(const uint8_t* row, int64_t K, int64_t nb, uint8_t* codes, float* s16, float* o16) {
  for (int64_t sb = 0; sb < (K + SB - 1) / SB; ++sb) {
    __m512 vs, vo;
    const int nch = T::scales(row, sb, nb, vs, vo);
    if constexpr (T::paired) {  // chunk order (group 4c + k: block 2c + k % 2) -> natural (2c + k / 2)
      const __m512i natural = _mm512_setr_epi32(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15);
      vs = _mm512_permutexvar_ps(natural, vs);
      vo = _mm512_permutexvar_ps(natural, vo);
    }
    _mm512_storeu_ps(s16 + 16 * sb, vs);
    _mm512_storeu_ps(o16 + 16 * sb, vo);
    for (int c = 0; c < 4; ++c) {
      __m512i v = _mm512_setzero_si512();
      if (c < nch) {
        v = T::codes(row, sb, c, nb);
        if constexpr (T::paired) v = _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));  // paired -> natural
      }
      _mm512_storeu_si512(codes + sb * SB + 64 * c, v);
    }
  }
}

// 16 rows' codes and scales (vnni_row's layout, rows ld bytes / ls floats apart) -> half h of a panel:
// transposed 16 x 16 u32 at a time, so a vector holds 16 features' 4 codes or one group's 16 scales
inline void vnni_half(const uint8_t* codes, int64_t ld, const float* s16, const float* o16, int64_t ls, int64_t K,
                      int h, const VnniPanel& p) {
  __m512i r[16];
  for (int64_t c = 0; c < (K + 63) / 64; ++c) {  // 64 k: 16 quads
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(codes + i * ld + 64 * c);
    transpose16(r);  // r[j] = quad 16 c + j of the 16 rows
    for (int j = 0; j < 16 && 16 * c + j < K / 4; ++j) _mm512_store_si512(p.codes + 128 * (16 * c + j) + 64 * h, r[j]);
  }
  for (int which = 0; which < 2; ++which) {
    const float* src = which ? o16 : s16;
    float* dst = which ? p.o : p.s;
    for (int64_t sb = 0; sb < (K + SB - 1) / SB; ++sb) {  // 16 groups of 16
      for (int i = 0; i < 16; ++i) r[i] = _mm512_castps_si512(_mm512_loadu_ps(src + i * ls + 16 * sb));
      transpose16(r);  // r[j] = group 16 sb + j of the 16 rows
      for (int j = 0; j < 16 && 16 * sb + j < K / 16; ++j)
        _mm512_store_si512(dst + VNNI_PANEL * (16 * sb + j) + 16 * h, r[j]);
    }
  }
}

// The next group of panels' weight bytes (up to 4 contiguous ranges: one per part of a fused plan),
// prefetched into L2 a few lines at a time while this group's products run: the products touch no
// memory of their own, and the next group's unpacking then reads L2, not DRAM (without this, one
// thread waited ~25% of a 16-row step of Qwen2.5-Coder-1.5B at its unpacking's prefetches)
struct VnniAhead {
  const char *p[4], *e[4];
  int n = 0, i = 0;
  int64_t rate = 0, credit = 0;  // lines a step, in 1/65536ths

  void add(const uint8_t* a, int64_t bytes) {
    if (n < 4 && bytes > 0) {
      p[n] = reinterpret_cast<const char*>(a);
      e[n] = p[n] + bytes;
      ++n;
    }
  }
  // spread the ranges' lines evenly over `steps` calls of step()
  void pace(int64_t steps) {
    int64_t lines = 0;
    for (int r = 0; r < n; ++r) lines += (e[r] - p[r] + 63) / 64;
    rate = steps > 0 ? (lines << 16) / steps + 1 : lines << 16;
  }
  __attribute__((always_inline)) inline void step() {
    for (credit += rate; credit >= 65536 && i < n; credit -= 65536) {
      _mm_prefetch(p[i], _MM_HINT_T1);
      p[i] += 64;
      if (p[i] >= e[i]) ++i;
    }
  }
};

// The activations as the panels' epilogue reads them, per row m: d[m * ld + g] the q8 scale of its
// 16 values g (quantize's scale16: the GEMV's), a[m * lda + j] = the sum of d * code over the scale
// group j of GS weights (GS = 16: quantize's a16; 32: a16's pairs added)
struct VnniActs {
  const int8_t* q;  // [M][Kp]
  int64_t Kp;
  const float *d, *a;
  int64_t ld, lda;
};

// y[m][n0 + 0..31] for MR rows from q, over the whole panel: cols masks the two vectors' features.
// The code sums turn f32 per 16 weights (the activations' scale group); the offsets per GS (the
// weights' group: o is one value over 32 weights where GS = 32, so o a is added once for both halves).
template <int GS, int MR>
void vnni_block(const VnniPanel& p, int64_t K, const VnniActs& x, int64_t m0, float* y, int64_t ldy, __mmask16 c0,
                __mmask16 c1, VnniAhead& ahead, bool add) {
  __m512 acc[MR][2];  // add: from y's values (an earlier slice of K's sums), else from zeros
  // y's lines, stored at the end, asked for now: a prefill's y is in no cache (gate|up of the 1.5B: 18 MB
  // at 256 rows), and the stores' misses stalled the next block's start (Zen 4: ~5% of the call)
  if (!add)
    for (int r = 0; r < MR; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(y + (m0 + r) * ldy), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(y + (m0 + r) * ldy + 16), _MM_HINT_T0);
    }
  for (int r = 0; r < MR; ++r) {
    acc[r][0] = add ? _mm512_maskz_loadu_ps(c0, y + (m0 + r) * ldy) : _mm512_setzero_ps();
    acc[r][1] = add ? _mm512_maskz_loadu_ps(c1, y + (m0 + r) * ldy + 16) : _mm512_setzero_ps();
  }
  const int8_t* q = x.q + m0 * x.Kp;
  const float* d = x.d + m0 * x.ld;
  const float* a = x.a + m0 * x.lda;
  for (int64_t g = 0; g < K / GS; ++g) {
    for (int64_t g16 = g * (GS / 16); g16 < (g + 1) * (GS / 16); ++g16) {
      ahead.step();
      __m512i s[MR][2];
      for (int r = 0; r < MR; ++r) s[r][0] = s[r][1] = _mm512_setzero_si512();
      const uint8_t* cw = p.codes + g16 * 16 * 32;  // 4 quads of 128 bytes
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        const __m512i w0 = _mm512_load_si512(cw + 128 * j), w1 = _mm512_load_si512(cw + 128 * j + 64);
        for (int r = 0; r < MR; ++r) {
          int32_t v;
          std::memcpy(&v, q + r * x.Kp + g16 * 16 + 4 * j, 4);
          const __m512i xb = _mm512_set1_epi32(v);
          s[r][0] = _mm512_dpbusd_epi32(s[r][0], w0, xb);
          s[r][1] = _mm512_dpbusd_epi32(s[r][1], w1, xb);
        }
      }
      const __m512 s0 = _mm512_load_ps(p.s + VNNI_PANEL * g16), s1 = _mm512_load_ps(p.s + VNNI_PANEL * g16 + 16);
      for (int r = 0; r < MR; ++r) {
        const __m512 dr = _mm512_set1_ps(d[r * x.ld + g16]);
        acc[r][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][0]), _mm512_mul_ps(s0, dr), acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r][1]), _mm512_mul_ps(s1, dr), acc[r][1]);
      }
    }
    const int64_t og = g * (GS / 16);  // the group's offsets (the same for its 16-halves)
    const __m512 o0 = _mm512_load_ps(p.o + VNNI_PANEL * og), o1 = _mm512_load_ps(p.o + VNNI_PANEL * og + 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r * x.lda + g]);
      acc[r][0] = _mm512_fmadd_ps(o0, ar, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(o1, ar, acc[r][1]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(y + (m0 + r) * ldy, c0, acc[r][0]);
    _mm512_mask_storeu_ps(y + (m0 + r) * ldy + 16, c1, acc[r][1]);
  }
}

// Rows m0 .. m1 of x through one panel (a register block of VNNI_MR rows at a time, then the tail);
// add: onto y's values
template <int GS>
void vnni_rows(const VnniPanel& p, int64_t K, const VnniActs& x, int64_t m0, int64_t m1, float* y, int64_t ldy,
               int64_t cols, VnniAhead& ahead, bool add = false) {
  const __mmask16 c0 = tail_mask(cols), c1 = tail_mask(std::max<int64_t>(0, cols - 16));
  int64_t m = m0;
  for (; m + VNNI_MR <= m1; m += VNNI_MR) vnni_block<GS, VNNI_MR>(p, K, x, m, y, ldy, c0, c1, ahead, add);
  switch (m1 - m) {
    case 5: vnni_block<GS, 5>(p, K, x, m, y, ldy, c0, c1, ahead, add); break;
    case 4: vnni_block<GS, 4>(p, K, x, m, y, ldy, c0, c1, ahead, add); break;
    case 3: vnni_block<GS, 3>(p, K, x, m, y, ldy, c0, c1, ahead, add); break;
    case 2: vnni_block<GS, 2>(p, K, x, m, y, ldy, c0, c1, ahead, add); break;
    case 1: vnni_block<GS, 1>(p, K, x, m, y, ldy, c0, c1, ahead, add); break;
    default: break;
  }
}

}  // namespace
