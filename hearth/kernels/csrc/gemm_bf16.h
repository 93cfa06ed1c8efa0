// Prefill-sized matmuls on AMX bf16 tiles, y[M, N] = x[M, K] @ W.T: W is expanded from its GGUF blocks
// one 32-row panel at a time, straight into the tiles' layout in L1/L2, and every activation row passes
// that panel before the next one is expanded. So there is no bf16 copy of W in memory and each weight
// is expanded once per call (the torch path wrote whole expanded weights to a DRAM temporary and read
// them back in torch.mm).
//
// Tiles: C (tmm0-3) f32 [16 activation rows][16 weight rows], 2 x 2 of them around A (tmm4-5) bf16
// activation rows [16][32 k], loaded in place from x, and B (tmm6-7) the panel's two halves of 16
// weight rows in the VNNI layout [16 k pairs][16 weight rows x 2].
#pragma once

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "amx.h"
#include "blocks.h"

namespace {

constexpr int64_t PANEL = 32;  // weight rows per panel: two B tiles

bool amx_bf16_usable() {
  static const bool ok = [] {
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    return amx_usable() && ((d >> 22) & 1);  // AMX-BF16
  }();
  return ok;
}

void load_bf16_tile_config() {
  TileConfig cfg;
  for (int i = 0; i < 8; ++i) cfg.rows[i] = 16, cfg.colsb[i] = 64;
  _tile_loadconfig(&cfg);
}

// 16 weight rows (f32, row stride ld) -> their B tiles, one per 32 values of K:
// tiles[ks * 512 + 32 r + 2 i + t] = bf16(w[i][32 ks + 2 r + t]).
void vnni_half(const float* w, int64_t ld, int64_t K, uint16_t* tiles) {
  alignas(64) uint32_t pairs[16][16];  // [row i][k pair r] of one K step
  for (int64_t ks = 0; ks < K / 32; ++ks) {
    for (int i = 0; i < 16; ++i) {
      const float* src = w + i * ld + 32 * ks;
      const __m256i lo = to_bf16(_mm512_loadu_ps(src)), hi = to_bf16(_mm512_loadu_ps(src + 16));
      _mm512_store_si512(pairs[i], _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
    }
    uint32_t* t = reinterpret_cast<uint32_t*>(tiles + ks * 512);
    for (int r = 0; r < 16; ++r)
      for (int i = 0; i < 16; ++i) t[16 * r + i] = pairs[i][r];
  }
}

// A C tile's values (c: f32 [16][16]) -> y rows m0 .. m0 + rows, columns n0 .. n0 + cols (f32, or
// bf16 with y_bf16)
void copy_c(const float (*c)[16], void* y, int64_t ldy, int y_bf16, int64_t m0, int64_t rows, int64_t n0,
            int64_t cols) {
  const __mmask16 k = tail_mask(cols);
  for (int64_t i = 0; i < rows; ++i) {
    const __m512 v = _mm512_load_ps(c[i]);
    if (y_bf16)
      _mm256_mask_storeu_epi16(static_cast<uint16_t*>(y) + (m0 + i) * ldy + n0, k, to_bf16(v));
    else
      _mm512_mask_storeu_ps(static_cast<float*>(y) + (m0 + i) * ldy + n0, k, v);
  }
}

// C tile TILE (an immediate) -> y, straight from the tile when it is whole and y is f32
#define HK_STORE_C(TILE, m0, rows, n0, cols)                                      \
  if (!y_bf16 && (rows) == 16 && (cols) == 16) {                                 \
    _tile_stored(TILE, static_cast<float*>(y) + (m0) * ldy + (n0), ldy * 4);     \
  } else {                                                                       \
    _tile_stored(TILE, cbuf, 64);                                                \
    copy_c(cbuf, y, ldy, y_bf16, m0, rows, n0, cols);                            \
  }

// One panel (B tiles pv: [2][K / 32][512]) times every row of x: y[:, n0 .. n0 + cols).
// x rows m0 .. M - 1 with a partial last block of 16 are read from xtail ([16][K], zero-padded).
void panel_gemm(const uint16_t* pv, int64_t K, const uint16_t* x, int64_t M, int64_t ldx, const uint16_t* xtail,
                void* y, int64_t ldy, int y_bf16, int64_t n0, int64_t cols) {
  const int64_t ksn = K / 32, full = M / 16 * 16;
  const uint16_t* b1 = pv + ksn * 512;
  const int64_t c0 = std::min<int64_t>(16, cols), c1 = cols - c0;
  auto rows_at = [&](int64_t m) { return m < full ? x + m * ldx : xtail; };
  const int64_t lda = ldx * 2, ldt = K * 2;
  for (int64_t m = 0; m < M; m += 32) {
    const bool two = m + 16 < M;
    const uint16_t* a0 = rows_at(m);
    const uint16_t* a1 = two ? rows_at(m + 16) : a0;
    const int64_t s0 = m < full ? lda : ldt, s1 = m + 16 < full ? lda : ldt;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t ks = 0; ks < ksn; ++ks) {
      _tile_loadd(4, a0 + 32 * ks, s0);
      _tile_loadd(6, pv + ks * 512, 64);
      _tile_loadd(7, b1 + ks * 512, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      if (two) {
        _tile_loadd(5, a1 + 32 * ks, s1);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    alignas(64) float cbuf[16][16];
    const int64_t r0 = std::min<int64_t>(16, M - m);
    HK_STORE_C(0, m, r0, n0, c0)
    if (c1 > 0) { HK_STORE_C(1, m, r0, n0 + 16, c1) }
    if (two) {
      const int64_t r1 = std::min<int64_t>(16, M - m - 16);
      HK_STORE_C(2, m + 16, r1, n0, c0)
      if (c1 > 0) { HK_STORE_C(3, m + 16, r1, n0 + 16, c1) }
    }
  }
}

}  // namespace
