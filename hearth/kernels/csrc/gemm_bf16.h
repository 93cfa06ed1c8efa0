// Prefill-sized matmuls on AMX bf16 tiles, y[M, N] = x[M, K] @ W.T: W is expanded from its GGUF blocks
// one 32-row panel at a time, straight into the tiles' layout in L1/L2, and every activation row passes
// that panel before the next one is expanded. So there is no bf16 copy of W in memory and each weight
// is expanded once per call (a torch matmul needs the whole expanded weight written to memory first).
//
// W is the tiles' A operand and x the B operand, so the products come out transposed: C (tmm0-3) f32
// [16 weight rows][16 activation rows], 2 x 2 of them around A (tmm4-5) the panel's two halves of 16
// weight rows [16][32 k] and B (tmm6-7) activation rows in the VNNI layout [16 k pairs][16 rows x 2].
// A weight row's 32 values are one A tile row as they dequantize: no transposing per weight (a
// 16 x 16 transpose of every weight panel cost ~30% of the expansion); x is transposed once per call
// as it is packed, and each 16 x 16 block of y once, in registers, on the way out.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "amx.h"
#include "blocks.h"
#include "simd.h"

namespace {

constexpr int64_t PANEL = 32;  // weight rows per panel: two B tiles

// 64-byte aligned vectors (tile loads, aligned vector stores). A buffer of 1 MB or more (a prefill
// layer's scratch: q|k|v rows, packed activations, the MLP's middle) gets its own mapping in 2 MB
// pages: a few TLB entries instead of hundreds each (gemma3 prefill ~4% faster; each such buffer
// rounds up to 2 MB). The buffers only grow (scratch()), so mappings are rarely made.
template <class T>
struct AlignedAlloc {
  using value_type = T;
  static constexpr size_t HUGE_PAGE = 2 << 20;
  AlignedAlloc() = default;
  template <class U>
  AlignedAlloc(const AlignedAlloc<U>&) {}
  static size_t mapped_bytes(size_t n) {  // 0: from malloc
    return n * sizeof(T) >= (1 << 20) ? (n * sizeof(T) + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE : 0;
  }
  T* allocate(size_t n) {
    if (const size_t bytes = mapped_bytes(n)) {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      madvise(p, bytes, MADV_HUGEPAGE);  // advice only: where THP is off, 4 KB pages as before
      return static_cast<T*>(p);
    }
    if (void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64)) return static_cast<T*>(p);
    throw std::bad_alloc();
  }
  void deallocate(T* p, size_t n) {
    if (const size_t bytes = mapped_bytes(n))
      munmap(p, bytes);
    else
      std::free(p);
  }
  template <class U>
  bool operator==(const AlignedAlloc<U>&) const { return true; }
  template <class U>
  bool operator!=(const AlignedAlloc<U>&) const { return false; }
};

// v's first n elements: v grows when shorter and never shrinks (a layer's matmuls want different
// sizes of the same buffers, and each regrow zero-filled up to ~0.4 MB anew)
template <class V>
auto* scratch(V& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(n);
  return v.data();
}

bool amx_bf16_usable() {
  if (!tier_allows_amx()) return false;  // hk_set_tier: a lower tier than the CPU's
  static const bool ok = [] {
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    const bool amx = amx_usable() && ((d >> 22) & 1);  // AMX-BF16
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(1));
    return amx && ((a >> 5) & 1);  // and AVX512-BF16 (the expansion, GLU's readout); every AMX CPU has it
  }();
  return ok;
}

void load_bf16_tile_config() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.rows[i] = 16, cfg.colsb[i] = 64;
  _tile_loadconfig(&cfg);
}

// r[i] (16 x 16 u32, row i) -> r[j] = column j, in registers
inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4q + j], lane l: rows 4q .. 4q + 3 of column 4l + j
  for (int q = 0; q < 4; ++q) {
    u[4 * q] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i a = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88), b = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
    const __m512i c = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88), d = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
    r[j] = _mm512_shuffle_i32x4(a, c, 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(a, c, 0xdd);
    r[4 + j] = _mm512_shuffle_i32x4(b, d, 0x88);
    r[12 + j] = _mm512_shuffle_i32x4(b, d, 0xdd);
  }
}

// r[i] = 32 bf16 values of row i (16 pairs) -> one VNNI tile: tile[32 p + 2 i + t] = value 2 p + t of row i
inline void store_vnni(__m512i r[16], uint16_t* tile) {
  transpose16(r);  // r[p] = pair p of every row
  for (int p = 0; p < 16; ++p) _mm512_store_si512(tile + 32 * p, r[p]);
}

// Two rows of 16 values (f32) -> one VNNI tile row, rounded to bf16: [a0, b0, a1, b1, ..]
// (AVX512-BF16: callers check amx_bf16_usable() or avx512_bf16_usable())
inline __m512i pair_rows_bf16(__m512 a, __m512 b) {
  const __m512i pairs = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(pairs, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a)));  // a's 16, b's 16
}

// Up to 16 rows (bf16, or f32 rounded to bf16; row stride ldx; rows past `rows` read as zeros) -> their
// VNNI tiles, one per 32 values of K: tiles[ks * 512 + 32 p + 2 i + t] = row i's value 32 ks + 2 p + t.
// norm_w (f32 only): each row RMS-normed on the way, as rmsnorm_row (no normed copy in between).
// AVX512-BF16: callers check amx_bf16_usable() or avx512_bf16_usable().
template <class X>
void pack_rows16(const X* x, int64_t ldx, int64_t rows, int64_t K, uint16_t* tiles, const float* norm_w = nullptr,
                 float eps = 0.0f) {
  float inv[16];
  for (int64_t i = 0; i < rows; ++i) {
    inv[i] = 1.0f;
    if constexpr (sizeof(X) == 4)
      if (norm_w) inv[i] = inv_rms(x + i * ldx, K, eps);
  }
  for (int64_t ks = 0; ks < K / 32; ++ks) {
    __m512i r[16];
    for (int64_t i = 0; i < 16; ++i) {
      if (i >= rows) {
        r[i] = _mm512_setzero_si512();
      } else if constexpr (sizeof(X) == 2) {
        r[i] = _mm512_loadu_si512(x + i * ldx + 32 * ks);
      } else {
        const float* src = x + i * ldx + 32 * ks;
        __m512 lo = _mm512_loadu_ps(src), hi = _mm512_loadu_ps(src + 16);
        if (norm_w) {
          const __m512 rv = _mm512_set1_ps(inv[i]);
          lo = _mm512_mul_ps(_mm512_mul_ps(lo, rv), _mm512_loadu_ps(norm_w + 32 * ks));
          hi = _mm512_mul_ps(_mm512_mul_ps(hi, rv), _mm512_loadu_ps(norm_w + 32 * ks + 16));
        }
        r[i] = reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
      }
    }
    store_vnni(r, tiles + ks * 512);
  }
}

// x ([M, K], row stride ldx) -> B tiles, contiguous: xb[(mb * K / 32 + ks) * 512 ..] holds rows
// 16 mb .. + 16 (zeros past M), values 32 ks .. + 32, as pack_rows16 lays them out (and norms them).
// Call from every thread of a parallel region: the blocks of 16 rows are shared out (then a barrier).
template <class X>
void pack_b(const X* x, int64_t M, int64_t K, int64_t ldx, uint16_t* xb, const float* norm_w = nullptr,
            float eps = 0.0f) {
#pragma omp for schedule(static)
  for (int64_t mb = 0; mb < (M + 15) / 16; ++mb)
    pack_rows16(x + 16 * mb * ldx, ldx, std::min<int64_t>(16, M - 16 * mb), K, xb + mb * (K / 32) * 512, norm_w, eps);
}

// C0 = A0 . B0, C1 = A0 . B1, C2 = A1 . B0, C3 = A1 . B1 (tmm0-3, from zero) over ksn steps of 32:
// A tiles at a0 / a1 + 512 ks (tmm4, 5), B tiles at b0 / b1 + 512 ks (tmm6, 7). Two by two, each
// loaded tile feeds two products; a null a1 or b1 skips its two. The matmuls pass one A panel (a
// weight panel) to many B rows, so B is loaded with the non-temporal hint: passing B does not evict
// the panel from L1, and the products stop waiting on L2 for it (K = 640: 1.7 -> 2.0 TFLOP/s per
// core; prefill +2%). The attention's scores (A: keys, B: the queries they pass) measured the same
// with the hint on either operand.
inline void tile_products_2x2(const uint16_t* a0, const uint16_t* a1, const uint16_t* b0, const uint16_t* b1,
                              int64_t ksn) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t ks = 0; ks < ksn; ++ks) {
    _tile_loadd(4, a0 + ks * 512, 64);
    _tile_stream_loadd(6, b0 + ks * 512, 64);
    _tile_dpbf16ps(0, 4, 6);
    if (b1) {
      _tile_stream_loadd(7, b1 + ks * 512, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if (a1) {
      _tile_loadd(5, a1 + ks * 512, 64);
      _tile_dpbf16ps(2, 5, 6);
      if (b1) _tile_dpbf16ps(3, 5, 7);
    }
  }
}

// A 32 x 32 block of products, as its 4 C tiles: c[2 h + g][i][j] = weight row 16 h + i of the panel
// times activation row 16 g + j of the block.
using Block = float[4][16][16];

// A plain matmul's output: a block transposed (in registers) into rows of y (f32, row
// stride ldy), columns n0 .. n_end of the panel's 32, rows m .. of M.
struct F32Rows {
  float* y;
  int64_t ldy, M, n0, n_end;
  void operator()(int64_t m, const Block& c) const {
    for (int64_t g = 0; g < 2 && m + 16 * g < M; ++g)
      for (int64_t h = 0; h < 2 && n0 + 16 * h < n_end; ++h) {
        __m512i r[16];
        for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(c[2 * h + g][i]);
        transpose16(r);  // r[j] = activation row 16 g + j
        const __mmask16 cols = tail_mask(n_end - n0 - 16 * h);
        float* dst = y + (m + 16 * g) * ldy + n0 + 16 * h;
        for (int64_t j = 0; j < std::min<int64_t>(16, M - m - 16 * g); ++j)
          _mm512_mask_storeu_ps(dst + j * ldy, cols, _mm512_castsi512_ps(r[j]));
      }
  }
};

// Every row of x (B tiles xb, pack_b) times one panel (A tiles pw: [2][K / 32][512]): each 32-row
// block's C tiles into blocks[m / 32] by tile stores alone. The caller hands the blocks out after
// all its panels' products: vector work between tile products does not overlap them on these cores,
// and each block handed out right after the next block's products (then waiting on their tile
// stores) left the q|k|v projection 4-8% slower than one pass over the blocks afterwards.
void panel_tiles(const uint16_t* pw, int64_t K, const uint16_t* xb, int64_t M, Block* blocks) {
  const int64_t ksn = K / 32;
  for (int64_t m = 0; m < M; m += 32) {
    const uint16_t* b0 = xb + (m / 16) * ksn * 512;
    const bool two = m + 16 < M;
    tile_products_2x2(pw, pw + ksn * 512, b0, two ? b0 + ksn * 512 : nullptr, ksn);
    Block& c = blocks[m / 32];
    _tile_stored(0, c[0], 64);
    _tile_stored(2, c[2], 64);
    if (two) {
      _tile_stored(1, c[1], 64);
      _tile_stored(3, c[3], 64);
    }
  }
}

}  // namespace
