// The same matmul on AMX tiles for a batch of activation rows (a decode batch, a verify step): one
// TDPBUSD per 16 weight rows x 16 activation rows x one scale group (16 weights for the k-quants, the
// whole 32-weight block for the 32-wide types) multiplies the weights' u8 codes by the activations'
// int8 codes exactly, then AVX-512 applies the group's scales in f32. The GEMV (rows_dot.h)
// re-decodes each weight chunk for every 4 activation rows; here a tile op does 16 x 16 x 16 (or 32)
// and the unpacked codes are shared by every row of the batch.
//
// exact (a verify step, native.batch_invariant): every tile op 16 wide and the f32 sums the GEMV's
// (dot_row), operation for operation: per group a product (weight scale x activation scale), an
// fma of the exact int32 dot into the group's own accumulator and one of the offset into another,
// superblock after superblock, then the groups added in sum_groups' tree. A row then comes out
// bit-identical to its 1-row decode (batch invariance) at tile speed; the accumulators live in
// memory (16 groups x 16 weight rows), so ~30% slower than the plain epilogue, which keeps one
// accumulator per weight row in registers.
//
// Tiles: C (tmm0-3) int32 [16 weight rows][16 activation rows]; A (tmm4-5) u8 codes [16 weight
// rows][16 or 32]; B (tmm6-7) int8 activations in the VNNI layout [4 or 8][16 rows x 4]:
// B[r][4m + t] = x_m[4r + t]. The tile configuration is loaded by every call (TileRows): the bf16
// prefill tiles and oneDNN reconfigure the same threads' tiles in between.

#pragma once

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "blocks.h"
#include "tier.h"

namespace {

constexpr int AMX_MIN_ROWS = 10;  // below this the VNNI loop is faster (SmolLM2, one thread: equal at ~10)

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

bool amx_usable() {  // the tier allows tiles, the CPU has AMX-INT8 and Linux lets this process use them
  if (!tier_allows_amx()) return false;  // checked first: a forced lower tier never asks for the tile state
  static const bool ok = [] {
    __builtin_cpu_init();
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    if (!((d >> 24) & 1) || !((d >> 25) & 1)) return false;  // AMX-TILE, AMX-INT8
    constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
  }();
  return ok;
}

// narrow: a tile op per 16 weights (K = 16: the k-quants' 16-wide scale groups, and every type when
// exact); wide: per 32 (the 32-wide block types, whose scales cover 32 weights): half the tile ops
// and f32 epilogues
void load_tile_config(bool wide) {
  TileConfig cfg;
  for (int i = 0; i < 4; ++i) cfg.rows[i] = 16, cfg.colsb[i] = 64;  // C
  for (int i = 4; i < 6; ++i) cfg.rows[i] = 16, cfg.colsb[i] = wide ? 32 : 16;  // A, double-buffered
  for (int i = 6; i < 8; ++i) cfg.rows[i] = wide ? 8 : 4, cfg.colsb[i] = 64;  // B, double-buffered
  _tile_loadconfig(&cfg);
}

// Activations of up to 16 rows rearranged for the tiles: per 16-wide group j of K, the B tile and
// the rows' scales d (of the q8 block) and sums a = d * sum(codes), as vectors over the rows.
struct TileActs {
  int64_t groups = 0;
  std::vector<uint32_t> b;  // [groups][4][16]
  std::vector<float> d, s;  // [groups][16]
};

void tile_acts(const Act& act, int64_t m0, TileActs& t) {
  const Layout& l = act.natural;
  const int64_t g = act.Kp / 16, rows = std::min<int64_t>(16, act.M - m0);
  t.groups = g;
  t.b.assign(g * 64, 0);
  t.d.assign(g * 16, 0.0f);
  t.s.assign(g * 16, 0.0f);
  for (int64_t m = 0; m < rows; ++m) {
    const uint32_t* q = reinterpret_cast<const uint32_t*>(l.q + (m0 + m) * act.Kp);
    for (int64_t w = 0; w < act.Kp / 4; ++w) t.b[w * 16 + m] = q[w];
    for (int64_t j = 0; j < g; ++j) {
      t.d[j * 16 + m] = l.d16[(m0 + m) * g + j];
      t.s[j * 16 + m] = l.a16[(m0 + m) * g + j];
    }
  }
}

// y[m0 + m][n0 + i] for 16 weight rows n0.. and the activation rows of t (count `rows`).
// Three stages run one chunk (64 weights) apart: unpack codes (AVX-512 stores), tile products (tile
// loads of those codes, tile stores of C), f32 epilogue (vector loads of C). A tile load right
// after the stores it reads, or a vector load right after a tile store, waits for the stores to
// retire (no forwarding between the units).
// `next`: weight bytes [next, next + next_bytes) the caller reads after this call (the next tile's
// rows), prefetched a slice per chunk: the weights stream from memory once per step, and the rows
// of a tile are read superblock by superblock, 16 strided streams no hardware prefetcher follows.
template <class T, bool exact>
void tile_dot(const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t nb, int64_t Kp, const TileActs& t,
              int64_t m0, int64_t rows, float* y, int64_t ldy, const uint8_t* next = nullptr, int64_t next_bytes = 0) {
  struct Chunk {
    int64_t j[4];  // each 16-weight group's activations
    int grp0, slot;  // first group of the chunk in its superblock's scales; scale slot
  };
  alignas(64) uint8_t codes[2][16][64];
  alignas(64) int32_t c[2][4][16][16];
  alignas(64) float sw[4][16][16], ow[4][16][16];  // a ring of superblocks' scales
  // plain: one accumulator per weight row (over activation rows); exact: one per superblock group
  // (the GEMV's lanes) and weight row, and as many for the offsets
  constexpr int GROUPS = exact ? 16 : 1;
  alignas(64) __m512 acc[GROUPS][16], off[exact ? 16 : 1][16];
  std::memset(acc, 0, sizeof acc);
  std::memset(off, 0, sizeof off);

  // 32-wide blocks: a chunk is 2 blocks, codes in natural order, one K = 32 tile op each (its
  // activations: the two 16-groups j, j + 1 of the block, adjacent in t.b, one scale d)
  constexpr bool wide = T::paired && !exact;
  constexpr int G = wide ? 2 : 4;  // tile ops (and scale groups) per chunk
  auto products = [&](const Chunk& q, int b) {
#define HK_GROUP(k, TA, TB)                                 \
  _tile_zero(k);                                            \
  _tile_loadd(TA, &codes[b][0][64 / G * k], 64);            \
  _tile_loadd(TB, t.b.data() + q.j[k] * 64, 64);            \
  _tile_dpbusd(k, TA, TB);
    HK_GROUP(0, 4, 6) HK_GROUP(1, 5, 7)
    if constexpr (!wide) { HK_GROUP(2, 4, 6) HK_GROUP(3, 5, 7) }
#undef HK_GROUP
    _tile_stored(0, c[b][0], 64);
    _tile_stored(1, c[b][1], 64);
    if constexpr (!wide) {
      _tile_stored(2, c[b][2], 64);
      _tile_stored(3, c[b][3], 64);
    }
  };
  auto epilogue = [&](const Chunk& q, int b) {
    for (int k = 0; k < G; ++k) {
      const __m512 d = _mm512_loadu_ps(t.d.data() + q.j[k] * 16);
      __m512 s = _mm512_loadu_ps(t.s.data() + q.j[k] * 16);
      if constexpr (wide) s = _mm512_add_ps(s, _mm512_loadu_ps(t.s.data() + (q.j[k] + 1) * 16));
      const float* sk = &sw[q.slot][0][q.grp0 + k];
      const float* ok = &ow[q.slot][0][q.grp0 + k];
      if constexpr (exact) {  // dot_row's arithmetic, with activation rows along the lanes
        __m512* ag = acc[q.grp0 + k];
        __m512* og = off[q.grp0 + k];
        for (int i = 0; i < 16; ++i) {
          const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(c[b][k][i]));
          ag[i] = _mm512_fmadd_ps(dot, _mm512_mul_ps(_mm512_set1_ps(sk[16 * i]), d), ag[i]);
          og[i] = _mm512_fmadd_ps(_mm512_set1_ps(ok[16 * i]), s, og[i]);
        }
      } else if (T::sym) {  // o = -C s: s_w (dot d - C s_x), one fma per row
        const __m512 ncs = _mm512_mul_ps(s, _mm512_set1_ps(-static_cast<float>(T::C)));
        for (int i = 0; i < 16; ++i) {
          const __m512 u = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c[b][k][i])), d, ncs);
          acc[0][i] = _mm512_fmadd_ps(u, _mm512_set1_ps(sk[16 * i]), acc[0][i]);
        }
      } else {
        for (int i = 0; i < 16; ++i) {
          const __m512 dot = _mm512_cvtepi32_ps(_mm512_load_si512(c[b][k][i]));
          acc[0][i] = _mm512_fmadd_ps(dot, _mm512_mul_ps(d, _mm512_set1_ps(sk[16 * i])), acc[0][i]);
          acc[0][i] = _mm512_fmadd_ps(s, _mm512_set1_ps(ok[16 * i]), acc[0][i]);
        }
      }
    }
  };

  const int64_t slice = (next_bytes / (Kp / 64) + 64) / 64 * 64;  // bytes of `next` to prefetch per chunk
  Chunk pending[2];
  int64_t n = 0;  // chunks unpacked so far; chunk i uses buffers i & 1
  for (int64_t sb = 0; sb < Kp / SB; ++sb) {
    const int slot = static_cast<int>(sb & 3);
    int nch = 0;
    for (int i = 0; i < 16; ++i) {
      __m512 vs, vo;
      nch = T::scales(w + (n0 + i) * row_bytes, sb, nb, vs, vo);
      _mm512_store_ps(sw[slot][i], vs);
      _mm512_store_ps(ow[slot][i], vo);
    }
    for (int ch = 0; ch < nch; ++ch, ++n) {
      const int b = static_cast<int>(n & 1);
      for (int64_t at = n * slice; at < std::min(next_bytes, (n + 1) * slice); at += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next + at), _MM_HINT_T1);
      for (int i = 0; i < 16; ++i) {
        const __m512i v = T::codes(w + (n0 + i) * row_bytes, sb, ch, nb);  // paired order for 32-wide types
        _mm512_store_si512(codes[b][i], wide ? _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0)) : v);
      }
      Chunk q{{}, 4 * ch, slot};  // wide: group 4 ch + k has block 2 ch + k's scales
      for (int k = 0; k < G; ++k) q.j[k] = (sb * SB + (wide ? 64 * ch + 32 * k : T::pos(ch, k))) / 16;
      if (n >= 2) epilogue(pending[n & 1], b);  // chunk n - 2 shares chunk n's buffer parity
      pending[b] = q;
      if (n >= 1) products(pending[(n - 1) & 1], static_cast<int>((n - 1) & 1));
    }
  }
  if (n >= 1) products(pending[(n - 1) & 1], static_cast<int>((n - 1) & 1));
  if (n >= 2) epilogue(pending[n & 1], static_cast<int>(n & 1));
  if (n >= 1) epilogue(pending[(n - 1) & 1], static_cast<int>((n - 1) & 1));

  alignas(64) float out[16][16];
  for (int i = 0; i < 16; ++i) {
    if constexpr (exact) {  // sum_groups' tree over the groups, for 16 activation rows at once
      __m512 v[16];
      for (int g = 0; g < 16; ++g) v[g] = _mm512_add_ps(acc[g][i], off[g][i]);
      for (int g = 0; g < 8; ++g) v[g] = _mm512_add_ps(v[g + 8], v[g]);
      for (int g = 0; g < 4; ++g) v[g] = _mm512_add_ps(v[g + 4], v[g]);
      _mm512_store_ps(out[i], _mm512_add_ps(_mm512_add_ps(v[0], v[2]), _mm512_add_ps(v[1], v[3])));
    } else {
      _mm512_store_ps(out[i], acc[0][i]);
    }
  }
  for (int64_t m = 0; m < rows; ++m)
    for (int i = 0; i < 16; ++i) y[(m0 + m) * ldy + n0 + i] = out[i][m];
}

}  // namespace
