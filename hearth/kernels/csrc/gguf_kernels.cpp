// Matmul, row lookup and bf16 expansion straight on GGUF blocks (AVX-512 + VNNI), called via ctypes.
//
// Activations are quantized to 8 bits per 16 values (ggml's q8_0 rule, d = max|x| / 127, q = round(x / d),
// on groups half as wide: half the rounding error where a group's halves differ; on AMX int8 tiles per 32,
// as ggml); weights are read from the file's blocks as unsigned codes in the affine form
// w = s * q + o of hearth/layers/quant.py (one (s, o) per 16 or 32 weights), so
//   sum_k w_k x_k ~= sum_groups  s * d_x * sum(q * qx)  +  o * d_x * sum(qx)
// where sum(q * qx) is an integer dot product (vpdpbusd: u8 codes x s8 activations). Same idea as
// ggml's vec_dot kernels, written for this form; every type shares one loop and differs only in
// how a 64-weight chunk's codes and a 256-weight superblock's scales are unpacked.
//
// Build: g++ -O3 -mavx512f -mavx512bw -mavx512vl -mavx512vnni -mf16c -mfma -mbmi2 -ffp-contract=off -fopenmp
// (-ffp-contract=off keeps dequantization bit-exact with gguf-py: s * q, then + o, two roundings).

#include <cmath>
#include <type_traits>

#include <omp.h>

#include "blocks.h"
#include "simd.h"
#include "tier.h"
#include "amx.h"
#include "attention.h"
#include "gemm_bf16.h"
#include "gemm_vnni.h"
#include "gemm_vnni_panels.h"
#include "attention_prefill.h"
#include "attention_prefill_avx512.h"
#include "kv_quant.h"
#include "peaks.h"

namespace {

// ---- type dispatch ----

template <template <class> class F, class... Args>
bool dispatch(int qtype, Args&&... args) {
  switch (qtype) {
    case Q4_0: F<Blocks32<TQ4_0>>::run(args...); return true;
    case Q4_1: F<Blocks32<TQ4_1>>::run(args...); return true;
    case Q5_0: F<Blocks32<TQ5_0>>::run(args...); return true;
    case Q5_1: F<Blocks32<TQ5_1>>::run(args...); return true;
    case Q8_0: F<Blocks32<TQ8_0>>::run(args...); return true;
    case Q2_K: F<TQ2_K>::run(args...); return true;
    case Q3_K: F<TQ3_K>::run(args...); return true;
    case Q4_K: F<TQ4_K>::run(args...); return true;
    case Q5_K: F<TQ5_K>::run(args...); return true;
    case Q6_K: F<TQ6_K>::run(args...); return true;
    case IQ4_NL: F<Blocks32<TIQ4_NL>>::run(args...); return true;
    case IQ4_XS: F<TIQ4_XS>::run(args...); return true;
    case MXFP4: F<Blocks32<TMXFP4>>::run(args...); return true;
    default: return false;
  }
}

template <class T>
struct RowsDot {
  static void run(const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t n1, int64_t nb, const Act& a,
                  float* y, int64_t ldy) {
    rows_dot<T>(w, row_bytes, n0, n1, nb, a, y, ldy);
  }
};

template <class T>
struct GemvOrder {  // the order in which T's GEMV reads the activations (gemv_groups.h)
  static void run(Order& order) { order = T::order; }
};

template <class T>
constexpr bool tabled() {  // dequant_row_bf16_table reads it
  if constexpr (T::paired) {
    return T::Type::LEVELS <= 32;
  } else {
    return T::LEVELS > 0 && T::LEVELS <= 32;
  }
}

template <class T>
struct DequantRows {  // rows ids[..] -> out (f32)
  static void run(const uint8_t* w, int64_t row_bytes, int64_t K, int64_t nb, const int64_t* ids, int64_t T_,
                  float* out) {
#pragma omp parallel for schedule(static) if (T_ >= 64)  // a prefill's embedding rows
    for (int64_t t = 0; t < T_; ++t) dequant_row<T>(w + ids[t] * row_bytes, K, nb, out + t * K);
  }
};

template <class T>
struct DequantTileRow {  // one weight row -> bf16, into a row of A tiles (gemm_bf16; amx_bf16_usable())
  static void run(const uint8_t* row, int64_t K, int64_t nb, uint16_t* out) {
    if constexpr (tabled<T>()) {
      dequant_row_bf16_table<T>(row, K, nb, out, 512);
    } else {
      dequant_row<T>(row, K, nb, out, 512);
    }
  }
};

template <class T>
struct DequantBf16 {
  static void run(const uint8_t* w, int64_t row_bytes, int64_t K, int64_t nb, int64_t r0, int64_t r1,
                  uint16_t* out) {
    for (int64_t r = r0; r < r1; ++r) dequant_row<T>(w + r * row_bytes, K, nb, out + (r - r0) * K);
  }
};

struct Part {
  const uint8_t* w;
  int qtype;
  int64_t rows, row_bytes, out_col, nb;
};

// A linear layer: weights sharing in_features K, their outputs side by side (fused q|k|v, gate|up).
struct Plan {
  int64_t K = 0, N = 0;
  int64_t gemm_min_rows = 0;  // from this many rows on: bf16 tiles (gemm_bf16.h), 0 = never
  std::vector<Part> parts;
  bool natural = false, paired = false;  // the activation layouts its parts read
  bool grouped = false, transposed = false;  // a natural part reads Act::grouped, Act::transposed (its Order)
  double bytes = 0;
};

int threads_for(double work) {  // work ~ weight bytes x rows of activations
  return work < 64.0 * 1024 ? 1 : omp_get_max_threads();
}

// exact: up to this many activation rows past a multiple of 16 take the GEMV's dot_row (on each tile's
// 16 weight rows while they are in cache) instead of a tile pass of their own, which costs as much as
// 16 rows (the epilogue's lanes are the activation rows): 17 rows cost 1.6x 16 on two passes
// (Qwen2.5-Coder-1.5B, 2026-12-05), a GEMV row ~0.1x. Same bits: exact tiles sum as dot_row does.
constexpr int64_t EXACT_TAIL_ROWS = 8;

template <class T>
struct TileRows {  // whole 16-row tiles of weight rows n0 .. n1 on AMX
  static void run(const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t n1, int64_t nb, const Act& a,
                  const std::vector<TileActs>& tiles, float* y, int64_t ldy, bool exact) {
    load_tile_config(T::paired && !exact);  // every call: other kernels (gemm_bf16.h, oneDNN) reconfigure the tiles
    const int64_t tail = a.M % 16;
    const int64_t passes = exact && tail && tail <= EXACT_TAIL_ROWS ? a.M / 16 : static_cast<int64_t>(tiles.size());
    for (int64_t n = n0; n + 16 <= n1; n += 16) {
      for (int64_t mt = 0; mt < passes; ++mt) {
        const bool prefetch = mt == 0 && n + 32 <= n1;  // the next tile's rows
        const int64_t rows = std::min<int64_t>(16, a.M - 16 * mt), ahead = prefetch ? 16 * row_bytes : 0;
        const uint8_t* next = w + (n + 16) * row_bytes;
        if (exact)
          tile_dot<T, true>(w, row_bytes, n, nb, a.Kp, tiles[mt], 16 * mt, rows, y, ldy, next, ahead);
        else
          tile_dot<T, false>(w, row_bytes, n, nb, a.Kp, tiles[mt], 16 * mt, rows, y, ldy, next, ahead);
      }
      for (int64_t i = n; passes * 16 < a.M && i < n + 16; ++i)  // the tail rows on the GEMV, weights in cache
        dot_rows<T>(w + i * row_bytes, nb, a, 16 * passes, y + i, ldy);
    }
  }
};

// y[:, part columns] = a @ W.T, rows of every part split evenly over the threads (in whole tiles of
// 16 rows when `tiles` are given: AMX, summing as the GEMV when exact; a part's last rows % 16 go
// through the GEMV)
bool run(const Plan& p, const Act& a, float* y, int64_t ldy, const std::vector<TileActs>* tiles = nullptr,
         bool exact = false) {
  int bad = 0;
#pragma omp parallel num_threads(threads_for(p.bytes * a.M)) reduction(| : bad)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    for (const Part& q : p.parts) {
      if (tiles) {
        const int64_t ntiles = q.rows / 16, t0 = 16 * (ntiles * t / T), t1 = 16 * (ntiles * (t + 1) / T);
        if (t1 > t0 && !dispatch<TileRows>(q.qtype, q.w, q.row_bytes, t0, t1, q.nb, a, *tiles, y + q.out_col, ldy, exact)) bad = 1;
        if (t == T - 1 && q.rows % 16 &&
            !dispatch<RowsDot>(q.qtype, q.w, q.row_bytes, 16 * ntiles, q.rows, q.nb, a, y + q.out_col, ldy))
          bad = 1;
        continue;
      }
      const int64_t n0 = q.rows * t / T, n1 = q.rows * (t + 1) / T;
      if (n1 > n0 && !dispatch<RowsDot>(q.qtype, q.w, q.row_bytes, n0, n1, q.nb, a, y + q.out_col, ldy)) bad = 1;
    }
    if (tiles) _tile_release();
  }
  return !bad;
}

bool bf16_tiles_for(const Plan& p, int64_t M) {
  return p.gemm_min_rows > 0 && M >= p.gemm_min_rows && p.K % 32 == 0 && amx_bf16_usable();
}

enum : int { SILU = 0, GELU_TANH = 1 };

// act(g) = g * sigmoid(x): silu x = g; gelu_tanh x = 2 sqrt(2/pi) (g + 0.044715 g^3), as
// 0.5 (1 + tanh(z)) = sigmoid(2z). 1 / (1 + e^-x) by a 14-bit reciprocal and one Newton step
// (~1 ulp; a division costs 16 cycles per vector, most of the MLP's elementwise time). -x is clamped
// to [-80, 80] so that neither e^-x nor its reciprocal is subnormal: a subnormal costs a microcode
// assist (~10x the vector's time), and gelu's x passes 87 wherever the gate passes ~10.
// BF16_OUT (the result is rounded to bf16, 2^-9): e^-x as exp2_bf16(-x log2 e), log2 e folded into
// gelu's constants, no Newton step (2^-14), and only the low clamp (2^t past 127 is inf, 1 / inf is
// 0, no assist): 13-15 vector ops instead of 25, in the prefill's MLP readout.
template <bool BF16_OUT = false>
inline __m512 act_ps(int act, __m512 g) {
  __m512 e;
  if constexpr (BF16_OUT) {
    constexpr float L = -1.44269504f;  // -log2 e
    const __m512 t = act == SILU ? _mm512_mul_ps(g, _mm512_set1_ps(L))
                                 : _mm512_mul_ps(g, _mm512_fmadd_ps(_mm512_set1_ps(0.0713548163f * L), _mm512_mul_ps(g, g),
                                                                    _mm512_set1_ps(1.5957691216f * L)));
    e = exp2_bf16(_mm512_max_ps(t, _mm512_set1_ps(-115.0f)));
  } else {
    const __m512 x = act == SILU ? g
                                 : _mm512_mul_ps(g, _mm512_fmadd_ps(_mm512_set1_ps(0.0713548163f), _mm512_mul_ps(g, g),
                                                                    _mm512_set1_ps(1.5957691216f)));
    const __m512 lim = _mm512_set1_ps(80.0f);
    e = exp_ps(_mm512_max_ps(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), x), lim), _mm512_sub_ps(_mm512_setzero_ps(), lim)));
  }
  const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), e);
  __m512 r = _mm512_rcp14_ps(d);
  if constexpr (!BF16_OUT) r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
  return _mm512_mul_ps(g, r);
}

// An MLP's middle: from a block of a panel of 16 gate rows (its first half) and the 16 up
// rows of the same features j0 .., bf16(act(gate) * up), straight into the B tiles the down
// projection multiplies (pack_b's layout, ksn tiles per 16 rows). The products come out per
// feature, as the down projection's tiles want them: two features' rows interleave into one tile row.
struct GluRows {
  uint16_t* h;  // the tiles of rows 0 ..
  int64_t M, ksn, j0;
  int act;
  void operator()(int64_t m, const Block& c) const {
    for (int64_t g = 0; g < 2 && m + 16 * g < M; ++g) {
      uint16_t* dst = h + ((m / 16 + g) * ksn + j0 / 32) * 512 + 16 * (j0 % 32);
      for (int i = 0; i < 16; i += 2) {
        const __m512 v0 = _mm512_mul_ps(act_ps<true>(act, _mm512_load_ps(c[g][i])), _mm512_load_ps(c[2 + g][i]));
        const __m512 v1 = _mm512_mul_ps(act_ps<true>(act, _mm512_load_ps(c[g][i + 1])), _mm512_load_ps(c[2 + g][i + 1]));
        _mm512_store_si512(dst + 16 * i, pair_rows_bf16(v0, v1));
      }
    }
  }
};

enum class GemmOut { F32, GLU };

// y = x @ W.T on AMX bf16 tiles, x bf16 or f32 (rounded to bf16 as it is packed), or with PACKED x
// already in pack_b's layout (ldx unused): W is expanded 32 rows (a panel) at a time, in cache, and
// rows of x pass it. y: f32, or for GLU (W = gate | up, inter rows each, inter % 32 == 0) bf16
// act(x @ gate.T) * (x @ up.T) in pack_b's layout for [M, inter] (ldy unused; act as in act_mul).
// Each thread expands its panels a group at a time and runs chunks of rows through the group, so
// that the group (<= GROUP_BYTES) and the chunk's packed rows (<= CHUNK_BYTES) stay in L2 together:
// a 2048-wide down projection's 512 packed rows (2 MB) streamed from L3 once per panel ran the tiles
// at half speed. False for an unknown type.
constexpr int64_t GROUP_BYTES = 512 << 10, CHUNK_BYTES = 384 << 10;
constexpr int64_t EXPAND_AHEAD = 4;

template <GemmOut MODE = GemmOut::F32, bool PACKED = false, class X>
bool gemm_bf16(const Plan& p, const X* x, int64_t M, int64_t ldx, void* y, int64_t ldy, int act = 0,
               const float* norm_w = nullptr, float eps = 0.0f) {
  const int64_t K = p.K, inter = p.N / 2, ksn = K / 32;
  if (K % 32 || !amx_bf16_usable() || (MODE == GemmOut::GLU && inter % 32)) return false;
  thread_local std::vector<uint16_t, AlignedAlloc<uint16_t>> xb;
  if (!PACKED) scratch(xb, ((M + 15) / 16) * 16 * K);
  const int64_t panels = MODE == GemmOut::GLU ? inter / 16 : (p.N + PANEL - 1) / PANEL;
  const int64_t group = std::max<int64_t>(1, GROUP_BYTES / (PANEL * K * 2));
  const int64_t chunk = std::max<int64_t>(32, CHUNK_BYTES / (K * 2) / 32 * 32);
  // this thread's buffer, shared with the team (xb names each thread's own)
  uint16_t* xb_team = xb.data();
  const uint16_t* b = PACKED ? reinterpret_cast<const uint16_t*>(x) : xb_team;
  int bad = 0;
#pragma omp parallel num_threads(threads_for(p.bytes * M)) reduction(| : bad)
  {
    if constexpr (!PACKED) pack_b(x, M, K, ldx, xb_team, norm_w, eps);
    load_bf16_tile_config();
    thread_local std::vector<uint16_t, AlignedAlloc<uint16_t>> pw;  // the group's panels, A tiles
    thread_local std::vector<float, AlignedAlloc<float>> products;  // a chunk's blocks: [group][chunk / 32]
    scratch(pw, group * PANEL * K);
    Block* blocks = reinterpret_cast<Block*>(scratch(products, group * ((chunk + 31) / 32) * sizeof(Block) / 4));
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t p1 = panels * (t + 1) / T;
    for (int64_t g0 = panels * t / T; g0 < p1; g0 += group) {
      const int64_t g1 = std::min(p1, g0 + group);
      for (int64_t pn = g0; pn < g1; ++pn) {  // expand the group: row i into its A tile's row i % 16
        const int64_t n0 = pn * PANEL, cols = MODE == GemmOut::GLU ? PANEL : std::min<int64_t>(PANEL, p.N - n0);
        for (int64_t i = 0; i < PANEL; ++i) {
          uint16_t* row = pw.data() + ((pn - g0) * PANEL * K) + (i / 16) * ksn * 512 + 32 * (i % 16);
          if (i >= cols) {
            for (int64_t ks = 0; ks < ksn; ++ks) _mm512_store_si512(row + ks * 512, _mm512_setzero_si512());
            continue;
          }
          const int64_t n = MODE != GemmOut::GLU ? n0 + i : i < 16 ? 16 * pn + i : inter + 16 * pn + i - 16;
          for (const Part& q : p.parts) {
            const int64_t r = n - q.out_col;  // the row within this part
            if (r < 0 || r >= q.rows) continue;
            // rows come from DRAM once per call: left to the hardware prefetchers, the expansion
            // waited on them (~2.6x as long as from cache); EXPAND_AHEAD rows ahead it does not
            const uint8_t* ahead = q.w + (r + EXPAND_AHEAD) * q.row_bytes;
            for (int64_t b = 0; b < q.row_bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T0);
            if (!dispatch<DequantTileRow>(q.qtype, q.w + r * q.row_bytes, K, q.nb, row)) bad = 1;
          }
        }
      }
      for (int64_t m0 = 0; m0 < M; m0 += chunk) {  // the chunk's products, then its outputs
        const int64_t mc = std::min(chunk, M - m0), nblk = (mc + 31) / 32;
        for (int64_t pn = g0; pn < g1; ++pn)
          panel_tiles(pw.data() + (pn - g0) * PANEL * K, K, b + (m0 / 16) * ksn * 512, mc, blocks + (pn - g0) * nblk);
        for (int64_t pn = g0; pn < g1; ++pn)
          for (int64_t m = 0; m < mc; m += 32) {
            const Block& c = blocks[(pn - g0) * nblk + m / 32];
            if constexpr (MODE == GemmOut::F32) {
              const int64_t n0 = pn * PANEL;
              F32Rows{static_cast<float*>(y) + m0 * ldy, ldy, mc, n0, std::min(p.N, n0 + PANEL)}(m, c);
            } else {
              GluRows{static_cast<uint16_t*>(y) + (m0 / 16) * (inter / 32) * 512, mc, inter / 32, 16 * pn, act}(m, c);
            }
          }
      }
    }
    _tile_release();
  }
  return !bad;
}

Act quantize_for(const Plan& p, const float* x, int64_t M, int64_t ldx) {
  return quantize(x, M, p.K, ldx, p.natural, p.paired);
}

// ---- the small f32 ops around a decode step's matmuls ----


// out = x * rsqrt(mean(x^2) + eps) * w over n values (hearth.layers.norm.RMSNorm); out may be x
void rmsnorm_row(const float* x, int64_t n, const float* w, float eps, float* out) {
  const __m512 r = _mm512_set1_ps(inv_rms(x, n, eps));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), r);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, w + i)));
  }
}

// h = act(gate) * up, elementwise over n values
void act_mul(int act, const float* gate, const float* up, int64_t n, float* h) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
    _mm512_mask_storeu_ps(h + i, m, _mm512_mul_ps(act_ps(act, g), u));
  }
}

thread_local std::vector<float, AlignedAlloc<float>> tmp_in, tmp_norm, tmp_mid, tmp_out;
thread_local std::vector<uint16_t, AlignedAlloc<uint16_t>> tmp_act16;

// f(m) for every row m < M: on every thread for prefill-sized M, else inline (a decode step calls this
// a few times per layer: no OpenMP region at all)
template <class F>
void for_rows(int64_t M, const F& f) {
  if (M < 64) {
    for (int64_t m = 0; m < M; ++m) f(m);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) f(m);
}

// rows of x, RMS-normed into scratch when w is given
const float* normed(const float* x, int64_t M, int64_t K, int64_t& ldx, const float* w, float eps) {
  if (!w) return x;
  float* out = scratch(tmp_norm, M * K);
  for_rows(M, [&](int64_t m) { rmsnorm_row(x + m * ldx, K, w, eps, out + m * K); });
  ldx = K;
  return out;
}

template <class T>
struct VnniRow {  // one weight row -> natural-order codes and per-16 scales (gemm_vnni.h)
  static void run(const uint8_t* row, int64_t K, int64_t nb, uint8_t* codes, float* s16, float* o16) {
    vnni_row<T>(row, K, nb, codes, s16, o16);
  }
};

template <class T>
struct VnniGroup {
  static void run(int& gs) { gs = vnni_group<T>(); }
};

// Half h of a panel, features n0 .. n0 + 15, straight from their blocks (gemm_vnni_panels.h) when they
// are 16 rows of one part of a type with such a path (every type but Q2_K, Q3_K); gs: lowered to the
// type's scale group. False for any other (the staging path: those types, rows across parts or past
// N). No prefetch of the next half here: the last group's products brought it into L2 (VnniAhead),
// and a burst of prefetches per half cost 7% more at 16 rows (the 1.5B's matrices, 2026-12-05).
bool vnni_half_direct(const Plan& p, int64_t n0, int h, const VnniPanel& panel, int& gs) {
  for (const Part& c : p.parts) {
    if (n0 < c.out_col || n0 + 16 > c.out_col + c.rows) continue;
    const uint8_t* rows[16];
    for (int i = 0; i < 16; ++i) rows[i] = c.w + (n0 - c.out_col + i) * c.row_bytes;
    bool done = false;
    int g = 16;
    if (!dispatch<VnniDirect>(c.qtype, rows, c.nb, h, panel, done) || !done || !dispatch<VnniGroup>(c.qtype, g))
      return false;
    gs = std::min(gs, g);
    return true;
  }
  return false;
}

// The weight rows of panels pn0 .. pn1 (a range per part they cover), paced over `blocks` register
// blocks' passes of K (vnni_block steps once per 16 k)
VnniAhead vnni_ahead(const Plan& p, int64_t pn0, int64_t pn1, int64_t blocks) {
  VnniAhead a;
  const int64_t f0 = pn0 * VNNI_PANEL, f1 = std::min(p.N, pn1 * VNNI_PANEL);
  for (const Part& c : p.parts) {
    const int64_t r0 = std::max<int64_t>(f0, c.out_col) - c.out_col, r1 = std::min(f1, c.out_col + c.rows) - c.out_col;
    if (r1 > r0) a.add(c.w + r0 * c.row_bytes, (r1 - r0) * c.row_bytes);
  }
  a.pace(blocks * (p.K / 16));
  return a;
}

#include "gemm_vnni_slices.h"  // after Plan, Part, dispatch: decode-sized calls a slice of K at a time

// Where AMX is not usable (the avx512 tier), from VNNI_GEMM_MIN_ROWS rows on: the VNNI GEMM
bool vnni_gemm_for(int64_t M) { return M >= VNNI_GEMM_MIN_ROWS && !amx_usable(); }

// y = a @ W.T (a: quantize's natural layout) on AVX-512 VNNI (gemm_vnni.h): each thread unpacks its
// panels a group at a time (<= VNNI_GROUP_BYTES, in L2) and passes chunks of rows (<= VNNI_CHUNK_BYTES
// of codes) through the group; where every row fits one chunk (a decode batch) a panel of the direct
// builders' types is built and multiplied a slice of K at a time instead (gemm_vnni_slices.h). A
// group's products prefetch the next group's weights (VnniAhead). False for an unknown type.
constexpr int64_t VNNI_GROUP_BYTES = 512 << 10, VNNI_CHUNK_BYTES = 256 << 10;

struct NoRows {  // a row phase that does nothing
  void operator()(int64_t, int64_t) const {}
};

// pre(m0, m1) and post(m0, m1): row phases run on the GEMM's own threads, each thread its share of the
// rows, before its products (the rows' activations: a's rows m0 .. m1 filled there) and after every
// thread's products (y's rows whole). A decode step's row ops (norm, quantize, act(gate) * up, residual
// adds, rope) ran on one thread between the regions while the other waited; here they split without
// a region of their own (a row's values depend on that row alone: the same bits).
template <class Pre = NoRows, class Post = NoRows>
bool gemm_vnni(const Plan& p, const Act& a, float* y, int64_t ldy, const Pre& pre = {}, const Post& post = {}) {
  const int64_t K = p.K, M = a.M, Kp = a.Kp, N = p.N, panels = (N + VNNI_PANEL - 1) / VNNI_PANEL;
  const Layout& l = a.natural;
  // the offsets of 32-wide weight groups take the activations' sums over both 16-halves
  thread_local std::vector<float, AlignedAlloc<float>> acts32;
  const int64_t g16 = Kp / 16, g32 = Kp / 32;
  float* a32 = scratch(acts32, M * g32);
  const VnniActs x16{l.q, Kp, l.d16, l.a16, g16, g16}, x32{l.q, Kp, l.d16, a32, g16, g32};
  const int64_t pb = vnni_panel_bytes(K), group = std::max<int64_t>(1, VNNI_GROUP_BYTES / pb);
  const int64_t chunk = std::max<int64_t>(VNNI_MR, VNNI_CHUNK_BYTES / Kp / VNNI_MR * VNNI_MR);
  int bad = 0;
#pragma omp parallel num_threads(threads_for(p.bytes * M)) reduction(| : bad)
  {
    thread_local std::vector<uint8_t, AlignedAlloc<uint8_t>> panel_buf, stage_buf, slice_buf;
    uint8_t* pw = scratch(panel_buf, group * pb);
    uint8_t* sw = scratch(slice_buf, vnni_panel_bytes(VNNI_SLICE_K));
    uint8_t* st = scratch(stage_buf, 16 * (Kp + 2 * g16 * 4));  // 16 rows: codes, then s16, o16
    float* st_s = reinterpret_cast<float*>(st + 16 * Kp);
    float* st_o = st_s + 16 * g16;
    std::vector<VnniPanel> ps(group);
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t p1 = panels * (t + 1) / T, r0 = M * t / T, r1 = M * (t + 1) / T;
    pre(r0, r1);
    for (int64_t m = r0; m < r1; ++m)
      for (int64_t j = 0; j < g32; ++j) a32[m * g32 + j] = l.a16[m * g16 + 2 * j] + l.a16[m * g16 + 2 * j + 1];
#pragma omp barrier
    // groups of 1, 2, 4 .. panels, then `group`: the first one's weights are the only ones no products hide
    for (int64_t g0 = panels * t / T, size = 1, g1; g0 < p1; g0 = g1, size = std::min(group, 2 * size)) {
      g1 = std::min(p1, g0 + size);
      const int64_t next = std::min(p1, g1 + std::min(group, 2 * size));
      // the first chunk's products bring the next group's weights into L2
      VnniAhead ahead = vnni_ahead(p, g1, next, (std::min(M, chunk) + VNNI_MR - 1) / VNNI_MR * (g1 - g0)), none;
      for (int64_t pn = g0; pn < g1; ++pn) {
        VnniPanel& panel = ps[pn - g0] = vnni_panel_at(pw + (pn - g0) * pb, K, 32);
        if (M <= chunk && vnni_sliced(p, pn, x16, x32, M, y, ldy, sw, ahead)) {  // a decode: done, from L1
          panel.codes = nullptr;
          continue;
        }
        int gs = 32;
        for (int h = 0; h < 2; ++h) {
          if (vnni_half_direct(p, pn * VNNI_PANEL + 16 * h, h, panel, gs)) continue;  // 16 rows of one part
          for (int64_t i = 0; i < 16; ++i) {
            const int64_t n = pn * VNNI_PANEL + 16 * h + i;
            uint8_t* codes = st + i * Kp;
            float *s16 = st_s + i * g16, *o16 = st_o + i * g16;
            const Part* q = nullptr;
            for (const Part& c : p.parts)
              if (n >= c.out_col && n < c.out_col + c.rows) q = &c;
            if (!q) {  // past N: zeros (no stale NaN into the masked lanes' sums)
              std::memset(codes, 0, Kp);
              std::memset(s16, 0, g16 * 4);
              std::memset(o16, 0, g16 * 4);
              continue;
            }
            const int64_t r = n - q->out_col;
            // rows come from DRAM once per call: prefetched a few rows ahead (as gemm_bf16's expansion)
            const uint8_t* ahead = q->w + (r + EXPAND_AHEAD) * q->row_bytes;
            for (int64_t b = 0; b < q->row_bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(ahead + b), _MM_HINT_T0);
            int g = 16;
            if (!dispatch<VnniRow>(q->qtype, q->w + r * q->row_bytes, K, q->nb, codes, s16, o16) ||
                !dispatch<VnniGroup>(q->qtype, g))
              bad = 1;
            gs = std::min(gs, g);
          }
          vnni_half(st, Kp, st_s, st_o, g16, K, h, panel);
        }
        panel.gs = gs;
      }
      for (int64_t m0 = 0; m0 < M; m0 += chunk) {
        const int64_t m1 = std::min(M, m0 + chunk);
        for (int64_t pn = g0; pn < g1; ++pn) {
          const VnniPanel& panel = ps[pn - g0];
          const int64_t n0 = pn * VNNI_PANEL, cols = std::min<int64_t>(VNNI_PANEL, N - n0);
          if (!panel.codes) continue;  // vnni_sliced's
          if (panel.gs == 32)
            vnni_rows<32>(panel, K, x32, m0, m1, y + n0, ldy, cols, m0 ? none : ahead);
          else
            vnni_rows<16>(panel, K, x16, m0, m1, y + n0, ldy, cols, m0 ? none : ahead);
        }
      }
    }
    if constexpr (!std::is_same_v<Post, NoRows>) {
#pragma omp barrier
      post(r0, r1);
    }
  }
  return !bad;
}

thread_local std::vector<TileActs> tile_acts_buf;

// Steps of up to this many rows (below a plan's gemm_min_rows) sum every row as the GEMV does, whose
// rows are bit-identical at every row count: on the GEMV, or with AMX on exact tiles (amx.h). Set by
// the runner around a step that verifies drafts, so a 30-row verify step sums each row as a 1-row
// decode does. 0: the batch GEMMs' own sums from their row count.
int64_t invariant_rows = 0;

// y = rmsnorm(x) @ W.T (norm_w optional): on AMX bf16 tiles for a prefill (the norm applied as x is
// packed), else x's rows normed, quantized, and multiplied on AMX int8 tiles for a batch or the VNNI
// loop; without AMX, from VNNI_GEMM_MIN_ROWS rows on (batches and prefills) on the int8 VNNI GEMM
// post(m0, m1): a row phase on y's finished rows (gemm_vnni's; on the other paths after the matmul, as
// for_rows runs rows)
template <class Post = NoRows>
bool matmul(const Plan& p, const float* x, int64_t M, int64_t ldx, float* y, int64_t ldy,
            const float* norm_w = nullptr, float eps = 0.0f, const Post& post = {}) {
  auto after = [&](bool ok) {
    if constexpr (!std::is_same_v<Post, NoRows>) for_rows(M, [&](int64_t m) { post(m, m + 1); });
    return ok;
  };
  if (bf16_tiles_for(p, M)) return after(gemm_bf16(p, x, M, ldx, static_cast<void*>(y), ldy, 0, norm_w, eps));
  const bool exact = M <= invariant_rows;  // a verify step: every row summed as a decode row
  if (!exact && vnni_gemm_for(M)) {  // the rows normed and quantized on the GEMM's threads
    const Act a = quantize_layout(M, p.K, true, false);
    float* xn = norm_w ? scratch(tmp_norm, M * p.K) : nullptr;
    auto pre = [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) {
        const float* xr = x + m * ldx;
        if (norm_w) {
          rmsnorm_row(xr, p.K, norm_w, eps, xn + m * p.K);
          xr = xn + m * p.K;
        }
        quantize_row(a, xr, m, /*scale16=*/true);
      }
    };
    return gemm_vnni(p, a, y, ldy, pre, post);
  }
  x = normed(x, M, p.K, ldx, norm_w, eps);
  const bool amx = M >= AMX_MIN_ROWS && amx_usable();
  Act a = quantize(x, M, p.K, ldx, p.natural || amx, p.paired, /*scale16=*/!amx || exact);
  if (amx) {
    tile_acts_buf.resize((M + 15) / 16);
    for (int64_t mt = 0; mt < (M + 15) / 16; ++mt) tile_acts(a, 16 * mt, tile_acts_buf[mt]);
  }
  group_codes(a, p.grouped, p.transposed);  // the GEMV's order (the tiles' rows past a multiple of 16 take the GEMV too)
  if (!amx && wide_call(M, a.Kp)) by_superblock(a);  // the wide passes' layout (gemv_wide.h)
  return after(run(p, a, y, ldy, amx ? &tile_acts_buf : nullptr, exact));
}

// r += y (after an RMSNorm of y's rows with post_w when given, as rmsnorm_row rounds it); y: [M, N]
// contiguous, read once past the norm's sums
void add_residual_row(const float* ym, int64_t N, const float* post_w, float post_eps, float* rm) {
  const __m512 inv = _mm512_set1_ps(post_w ? inv_rms(ym, N, post_eps) : 1.0f);
  for (int64_t i = 0; i < N; i += 16) {
    const __mmask16 k = tail_mask(N - i);
    __m512 v = _mm512_maskz_loadu_ps(k, ym + i);
    if (post_w) v = _mm512_mul_ps(_mm512_mul_ps(v, inv), _mm512_maskz_loadu_ps(k, post_w + i));
    _mm512_mask_storeu_ps(rm + i, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, rm + i), v));
  }
}

void add_residual(const float* y, int64_t M, int64_t N, const float* post_w, float post_eps, float* r, int64_t ldr) {
  for_rows(M, [&](int64_t m) { add_residual_row(y + m * N, N, post_w, post_eps, r + m * ldr); });
}

// add_residual as matmul's row phase (y: [M, N] contiguous)
auto residual_rows(const float* y, int64_t N, const float* post_w, float post_eps, float* r, int64_t ldr) {
  return [=](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) add_residual_row(y + m * N, N, post_w, post_eps, r + m * ldr);
  };
}

// rows of bf16 x as f32 (in scratch)
const float* widened(const uint16_t* x, int64_t M, int64_t K, int64_t& ldx) {
  float* out = scratch(tmp_in, M * K);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < K; i += 16) {
      const __mmask16 k = tail_mask(K - i);
      const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, x + m * ldx + i));
      _mm512_mask_storeu_ps(out + m * K + i, k, _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)));
    }
  ldx = K;
  return out;
}

}  // namespace

extern "C" {

int hk_abi_version() { return 18; }

// The tier hearth/kernels/tiers.py chose (CpuTier); 0, or -1 for a level this build does not know.
// Called once at load, before any kernel runs.
int hk_set_tier(int level) {
  if (level != TIER_AVX512 && level != TIER_AMX) return -1;
  cpu_tier() = level;
  return 0;
}

int hk_cpu_ok() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
         __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
}

// A plan over `n` weights [rows_i, K] (GGUF blocks, rows row_bytes_i apart); nullptr for an unknown
// type or a K that is not a whole number of its blocks. Free with hk_plan_free.
void* hk_plan_new(int n, const void* const* w, const int* qtypes, const int64_t* rows, const int64_t* row_bytes,
                  int64_t K, int64_t gemm_min_rows) {
  if (K <= 0 || K % 32) return nullptr;
  Plan* p = new Plan;
  p->K = K;
  p->gemm_min_rows = gemm_min_rows;
  for (int i = 0; i < n; ++i) {
    const bool k_quant = !is_paired(qtypes[i]);
    if (k_quant && K % SB) { delete p; return nullptr; }
    p->parts.push_back({static_cast<const uint8_t*>(w[i]), qtypes[i], rows[i], row_bytes[i], p->N,
                        blocks_per_row(qtypes[i], K)});
    (k_quant ? p->natural : p->paired) = true;
    Order order = Order::lanes;
    dispatch<GemvOrder>(qtypes[i], order);
    p->grouped |= k_quant && order == Order::groups;
    p->transposed |= k_quant && order == Order::transposed;
    p->N += rows[i];
    p->bytes += static_cast<double>(rows[i]) * row_bytes[i];
  }
  alignas(64) float probe[32] = {};  // unknown types fail here, once, instead of at every call
  const Act a = quantize_for(*p, probe, 0, 0);
  for (const Part& q : p->parts)
    if (!dispatch<RowsDot>(q.qtype, q.w, q.row_bytes, 0, 0, q.nb, a, probe, 0)) { delete p; return nullptr; }
  return p;
}

void hk_plan_free(void* p) { delete static_cast<Plan*>(p); }

// Part i's weights now at w: the same bytes, moved (hearth.layers.huge_pages reads them into 2 MB pages while
// the model serves), so a call running meanwhile may read either copy.
void hk_plan_rebase(void* p, int i, const void* w) {
  __atomic_store_n(&static_cast<Plan*>(p)->parts[i].w, static_cast<const uint8_t*>(w), __ATOMIC_RELEASE);
}

}  // extern "C"

namespace {

// y[M, N] (row stride ldy) = rmsnorm(x) @ W.T + bias, then post(m0, m1) on finished rows (matmul's row
// phase: the bias is added there first)
template <class Post = NoRows>
void linear(const Plan& p, const float* x, int64_t M, int64_t ldx, const float* norm_w, float eps, const float* bias,
            float* y, int64_t ldy, const Post& post = {}) {
  auto rows = [&](int64_t m0, int64_t m1) {
    if (bias)  // on every thread for a prefill (q|k|v of 512 rows: ~1 ms in one scalar loop)
      for (int64_t m = m0; m < m1; ++m)
        for (int64_t n = 0; n < p.N; n += 16) {
          const __mmask16 k = tail_mask(p.N - n);
          float* ym = y + m * ldy + n;
          _mm512_mask_storeu_ps(ym, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, ym), _mm512_maskz_loadu_ps(k, bias + n)));
        }
    post(m0, m1);
  };
  if (bias || !std::is_same_v<Post, NoRows>)
    matmul(p, x, M, ldx, y, ldy, norm_w, eps, rows);
  else
    matmul(p, x, M, ldx, y, ldy, norm_w, eps);
}

// r[M, N] += rmsnorm_post(x @ W.T): an output projection into the residual stream (post_w optional).
// x16: x already in the bf16 tiles' packed layout (pack_b), or null.
void linear_residual(const Plan& p, const float* x, const uint16_t* x16, int64_t M, int64_t ldx, const float* post_w,
                     float post_eps, float* r, int64_t ldr) {
  float* y = scratch(tmp_out, M * p.N);
  if (x16) {
    gemm_bf16<GemmOut::F32, true>(p, x16, M, 0, y, p.N);
    add_residual(y, M, p.N, post_w, post_eps, r, ldr);
  } else {
    matmul(p, x, M, ldx, y, p.N, nullptr, 0.0f, residual_rows(y, p.N, post_w, post_eps, r, ldr));
  }
}

// Rows t of q | k heads in place (hk_qk_rope)
struct QkRope {
  float* qk;
  int64_t ld, heads, D, rot;
  const float* norm_w;
  float eps;
  const float *cos, *sin;
  int neox;
  int64_t whole = 0;  // q heads: norm_w ([whole + k heads] x D) spans q's and then k's whole projection; 0: per head

  void operator()(int64_t t0, int64_t t1) const {
    const int64_t h2 = rot / 2;
    // adjacent pairs: 16 of them (32 values) split into their first and second values and back
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
    for (int64_t t = t0; t < t1; ++t) {
      const float* c = cos + t * h2;
      const float* s = sin + t * h2;
      if (norm_w && whole) {  // q's heads as one row, then k's (olmo2)
        float* row = qk + t * ld;
        rmsnorm_row(row, whole * D, norm_w, eps, row);
        rmsnorm_row(row + whole * D, (heads - whole) * D, norm_w + whole * D, eps, row + whole * D);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = qk + t * ld + h * D;
        if (norm_w && !whole) rmsnorm_row(v, D, norm_w + h * D, eps, v);
        int64_t i = 0;
        for (; i + 16 <= h2; i += 16) {  // 16 pairs (a, b) -> (a c - b s, b c + a s)
          const __m512 ci = _mm512_loadu_ps(c + i), si = _mm512_loadu_ps(s + i);
          float* pa = neox ? v + i : v + 2 * i;
          float* pb = neox ? v + i + h2 : v + 2 * i + 16;
          const __m512 x0 = _mm512_loadu_ps(pa), x1 = _mm512_loadu_ps(pb);
          const __m512 a = neox ? x0 : _mm512_permutex2var_ps(x0, even, x1);
          const __m512 b = neox ? x1 : _mm512_permutex2var_ps(x0, odd, x1);
          const __m512 na = _mm512_sub_ps(_mm512_mul_ps(a, ci), _mm512_mul_ps(b, si));
          const __m512 nb = _mm512_add_ps(_mm512_mul_ps(b, ci), _mm512_mul_ps(a, si));
          _mm512_storeu_ps(pa, neox ? na : _mm512_permutex2var_ps(na, lo, nb));
          _mm512_storeu_ps(pb, neox ? nb : _mm512_permutex2var_ps(na, hi, nb));
        }
        for (; i < h2; ++i) {  // the last rot / 2 % 16 pairs
          const int64_t ia = neox ? i : 2 * i, ib = neox ? i + h2 : 2 * i + 1;
          const float a = v[ia], b = v[ib];
          v[ia] = a * c[i] - b * s[i];
          v[ib] = b * c[i] + a * s[i];
        }
      }
    }
  }
};

}  // namespace

extern "C" {

// y[M, N] (row stride ldy) = rmsnorm(x) @ W.T + bias; x: [M, K] (row stride ldx), f32 or (x_bf16) bf16;
// norm_w, bias optional (null).
void hk_linear(const void* plan, const void* x, int x_bf16, int64_t M, int64_t ldx, const float* norm_w,
               float eps, const float* bias, float* y, int64_t ldy) {
  const Plan& p = *static_cast<const Plan*>(plan);
  const float* xf = x_bf16 ? widened(static_cast<const uint16_t*>(x), M, p.K, ldx) : static_cast<const float*>(x);
  linear(p, xf, M, ldx, norm_w, eps, bias, y, ldy);
}

void hk_linear_residual(const void* plan, const float* x, int64_t M, int64_t ldx, const float* post_w,
                        float post_eps, float* r, int64_t ldr) {
  linear_residual(*static_cast<const Plan*>(plan), x, nullptr, M, ldx, post_w, post_eps, r, ldr);
}

// The MLP block on the residual stream r [M, hidden] (row stride ldr):
//   r += rmsnorm_post(down(act(gate) * up)),  gate | up = gate_up(rmsnorm(r))
void hk_mlp(const void* gate_up, const void* down, int act, float* r, int64_t M, int64_t ldr,
            const float* norm_w, float eps, const float* post_w, float post_eps) {
  const Plan& gu = *static_cast<const Plan*>(gate_up);
  const Plan& dn = *static_cast<const Plan*>(down);
  const int64_t inter = gu.N / 2;
  float* y = scratch(tmp_out, M * dn.N);
  if (bf16_tiles_for(gu, M) && bf16_tiles_for(dn, M)) {  // prefill: bf16 in the middle, as torch
    uint16_t* h = scratch(tmp_act16, ((M + 15) / 16) * 16 * inter);  // rows past M within a 16: act(0) * 0
    gemm_bf16<GemmOut::GLU>(gu, r, M, ldr, h, 0, act, norm_w, eps);
    gemm_bf16<GemmOut::F32, true>(dn, h, M, 0, y, dn.N);
    add_residual(y, M, dn.N, post_w, post_eps, r, ldr);
  } else {
    float* g = scratch(tmp_mid, M * gu.N);
    matmul(gu, r, M, ldr, g, gu.N, norm_w, eps, [&](int64_t m0, int64_t m1) {
      for (int64_t m = m0; m < m1; ++m) act_mul(act, g + m * gu.N, g + m * gu.N + inter, inter, g + m * gu.N);
    });
    matmul(dn, g, M, gu.N, y, dn.N, nullptr, 0.0f, residual_rows(y, dn.N, post_w, post_eps, r, ldr));
  }
}

// q | k heads in place: an RMSNorm per head (norm_w: [heads, D], optional), then rotary embedding of
// the first `rot` dims with cos, sin: [T, rot / 2]; neox rotates halves (x[i], x[i + rot/2]), else
// adjacent pairs (x[2i], x[2i + 1]) (hearth.layers.rotary).
void hk_qk_rope(float* qk, int64_t T, int64_t ld, int64_t heads, int64_t D, int64_t rot, const float* norm_w,
                float eps, const float* cos, const float* sin, int neox) {
  const QkRope rope{qk, ld, heads, D, rot, norm_w, eps, cos, sin, neox};
  for_rows(T, [&](int64_t t) { rope(t, t + 1); });
}

// Attention of query rows (q: f32 [rows, heads, d], row stride ldq) over a paged KV cache (kv:
// [2, num_slots, kvh, d] f16, or bf16 with kv_bf16) for S sequences: rows q_start[s] .. + q_len[s]
// are the last tokens of sequence s, whose context holds seq_lens[s] tokens in blocks
// tables[s * ldt ..] of bs slots. A row at position p sees keys max(0, p - window + 1) .. p
// (window 0: all). softcap > 0: scores pass through softcap * tanh(s / softcap). out: f32 [rows,
// heads, d] (row stride ldo). tree (null: none): a token tree's node rows, int64 [rows, ldtree]: per
// row -1, or its position along its path, the tree's first position base and the flat slots of its
// keys base .. position (its ancestors', then its own), which it reads instead of those positions'
// slots: the same keys, order and blocking as a decode of its path, so the same bits.
// Returns 0, or -1 for a head_dim or grouping the kernel does not cover.
int hk_paged_attention(const float* q, int64_t ldq, const void* kv, int kv_bf16, int64_t num_slots, int64_t bs,
                       int64_t heads, int64_t kvh, int64_t d, int64_t S, const int64_t* q_start, const int64_t* q_len,
                       const int64_t* seq_lens,
                       const int64_t* tables, int64_t ldt, float scale, int64_t window, float softcap, float* out,
                       int64_t ldo, const int64_t* tree, int64_t ldtree) {
  const AttendFn fn = (d % 16 || heads > MAX_TASK_HEADS || heads % kvh) ? nullptr : pick_attend(d / 16, kv_bf16);
  if (!fn) return -1;
  const AttnShape a{static_cast<const uint8_t*>(kv), num_slots * kvh * d, bs, heads, kvh, d, nullptr, scale, softcap};
  // a task covers every head; a sequence's rows in one step (a verify chain, a tree) as one row group
  paged_attention_rows<AttnScratch>(a, fn, pick_attend_rows(d / 16, kv_bf16), q, ldq, S, q_start, q_len, seq_lens,
                       tables, ldt, window, out, ldo, tree, ldtree);
  return 0;
}

// Causal attention of one sequence's T new rows (the last T of its ctx tokens; q, out: f32 [T, heads,
// d], heads and dims contiguous, row strides ldq, ldo) over an f16/bf16 paged cache (as in
// hk_paged_attention; table: the sequence's block ids), on AMX bf16 tiles (attention_prefill.h), or
// without AMX on AVX512-BF16 (attention_prefill_avx512.h; no `packed` output there: that layout is
// the AMX matmul's; `precise`: split scores, there only). -1 (out untouched) when the CPU or the
// shape is not covered. Only rows skip .. T are wanted (out holds them from its first row): the
// 16-row tasks holding none of them are not run, the others are run whole, so the wanted rows get
// the same values as in a call for all T (a task's rows share their running max).
static int prefill_attention(const float* q, int64_t ldq, const void* kv, int kv_bf16, int64_t num_slots, int64_t bs,
                             int64_t heads, int64_t kvh, int64_t d, int64_t T, int64_t ctx, const int64_t* table,
                             float scale, int64_t window, float softcap, int64_t skip, float* out, int64_t ldo,
                             uint16_t* packed = nullptr, bool precise = false) {
  const bool amx = amx_bf16_usable() && !precise;
  if (!(amx || (avx512_bf16_usable() && !packed)) || d % 32 || d > 256 || heads % kvh || heads / kvh > 16 || T <= 0 ||
      T > ctx)
    return -1;
  const int64_t G = heads / kvh, pos0 = ctx - T, nq = (T + 15) / 16, first = skip / 16 * 16;  // first task's row
  const AttnShape a{static_cast<const uint8_t*>(kv), num_slots * kvh * d, bs, heads, kvh, d, table, scale, softcap};
  thread_local PrefillPacks packs;  // the caller's, kept across layers and steps (each block is packed anew)
  PrefillPacks& p = packs;  // a reference: the OpenMP threads below share the caller's packs
  p.kb0 = (window > 0 ? std::max<int64_t>(0, pos0 + first - window + 1) : 0) / 32;
  p.nkb = (ctx - 1) / 32 + 1 - p.kb0;
  p.d = d;
  scratch(p.k, kvh * p.nkb * d * 32);
  scratch(p.v, kvh * p.nkb * d * 32);
  const auto pack = kv_bf16 ? pack_kv_block<true> : pack_kv_block<false>;
  thread_local std::vector<uint16_t, AlignedAlloc<uint16_t>> klo_pack;  // precise: the keys' low parts
  uint16_t* klo = precise && !kv_bf16 ? scratch(klo_pack, kvh * p.nkb * d * 32) : nullptr;  // bf16's are zeros
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < kvh * p.nkb; ++i) {
      pack(a, ctx, i / p.nkb, p.kb0 + i % p.nkb, p);
      if (klo) pack_k_lo_block(a, ctx, i / p.nkb, p.kb0 + i % p.nkb, klo + p.at(i / p.nkb, p.kb0 + i % p.nkb));
    }
    if (amx) load_bf16_tile_config();
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < kvh * (nq - first / 16); ++i) {  // the longest rows (the last) first
      const int64_t g = i % kvh, t0 = 16 * (nq - 1 - i / kvh), from = std::max<int64_t>(0, skip - t0);
      if (amx)
        prefill_task(a, p, q + t0 * ldq, ldq, std::min<int64_t>(16, T - t0), pos0 + t0, window, g, G, from,
                     packed ? nullptr : out + (t0 + from - skip) * ldo, ldo, packed ? packed + t0 * heads * d : nullptr);
      else
        prefill_task_avx512(a, p, precise, klo, q + t0 * ldq, ldq, std::min<int64_t>(16, T - t0), pos0 + t0, window, g, G, from,
                            out + (t0 + from - skip) * ldo, ldo);
    }
    if (amx) _tile_release();
  }
  return 0;
}

int hk_prefill_attention(const float* q, int64_t ldq, const void* kv, int kv_bf16, int64_t num_slots, int64_t bs,
                         int64_t heads, int64_t kvh, int64_t d, int64_t T, int64_t ctx, const int64_t* table,
                         float scale, int64_t window, float softcap, float* out, int64_t ldo) {
  return prefill_attention(q, ldq, kv, kv_bf16, num_slots, bs, heads, kvh, d, T, ctx, table, scale, window, softcap, 0,
                           out, ldo);
}

// hk_prefill_attention for layers whose scores must be near-f32 (attention.PRECISE_SCORES: a k bias):
// q and k split into bf16 high and low parts (attention_prefill_avx512.h's scores16), on AVX512-BF16
// only (-1 elsewhere, AMX included: its tiles do not split yet).
int hk_prefill_attention_precise(const float* q, int64_t ldq, const void* kv, int kv_bf16, int64_t num_slots,
                                 int64_t bs, int64_t heads, int64_t kvh, int64_t d, int64_t T, int64_t ctx,
                                 const int64_t* table, float scale, int64_t window, float softcap, float* out,
                                 int64_t ldo) {
  if (amx_bf16_usable()) return -1;
  return prefill_attention(q, ldq, kv, kv_bf16, num_slots, bs, heads, kvh, d, T, ctx, table, scale, window, softcap, 0,
                           out, ldo, nullptr, true);
}

// Rows of one sequence in one step attend as a row group (attention_tasks.h) while on (1, the
// default); 0: every task on its own. The bits are the same either way.
void hk_set_row_groups(int on) { row_groups() = on != 0; }

// K and V of T new tokens into their cache slots: kv rows (f32, row stride ldx) hold k then v
// ([2, kvh * d] each row); cache as in hk_paged_attention. Rounds to nearest even like torch's casts.
void hk_kv_write(const float* x, int64_t ldx, int64_t T, const int64_t* slots, void* kv, int kv_bf16,
                 int64_t num_slots, int64_t width) {
  uint16_t* c = static_cast<uint16_t*>(kv);
  for_rows(T, [&](int64_t t) {  // in parallel for a prefill: its first writes to fresh blocks page-fault
    for (int plane = 0; plane < 2; ++plane) {
      const float* src = x + t * ldx + plane * width;
      uint16_t* dst = c + plane * num_slots * width + slots[t] * width;
      for (int64_t i = 0; i < width; i += 16) {
        const __mmask16 k = tail_mask(width - i);
        const __m512 v = _mm512_maskz_loadu_ps(k, src + i);
        const __m256i h = kv_bf16 ? to_bf16(v) : _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(dst + i, k, h);
      }
    }
  });
}

// Rows `ids` of a [V, K] tensor -> f32 out [T, K] (an embedding lookup).
// Returns 0, -1 for an unknown type, -2 for an id outside [0, V).
int hk_dequant_rows(const void* w, int qtype, int64_t row_bytes, int64_t K, int64_t V, const int64_t* ids,
                    int64_t T, float* out) {
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= V) return -2;
  return dispatch<DequantRows>(qtype, static_cast<const uint8_t*>(w), row_bytes, K, blocks_per_row(qtype, K),
                               ids, T, out) ? 0 : -1;
}

// Rows r0 .. r1 of a [N, K] tensor -> bf16 out [r1 - r0, K] (the dense prefill path), in parallel.
int hk_dequant_bf16(const void* w, int qtype, int64_t row_bytes, int64_t K, int64_t r0, int64_t r1,
                    uint16_t* out) {
  if (K % 16) return -1;
  int bad = 0;
  const int nt = threads_for(static_cast<double>(r1 - r0) * row_bytes * 8);
#pragma omp parallel num_threads(nt) reduction(| : bad)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t a = r0 + (r1 - r0) * t / T, b = r0 + (r1 - r0) * (t + 1) / T;
    if (b > a && !dispatch<DequantBf16>(qtype, static_cast<const uint8_t*>(w), row_bytes, K,
                                        blocks_per_row(qtype, K), a, b, out + (a - r0) * K))
      bad = 1;
  }
  return bad ? -1 : 0;
}

// y[M, N] = x[M, K] @ W.T on AMX bf16 tiles (gemm_bf16.h): x bf16 (row stride ldx), y f32 (row stride
// ldy). Returns 0, or -1 (nothing written) without AMX-BF16 or for K % 32 != 0.
int hk_gemm_bf16(const void* plan, const uint16_t* x, int64_t M, int64_t ldx, float* y, int64_t ldy) {
  return gemm_bf16(*static_cast<const Plan*>(plan), x, M, ldx, static_cast<void*>(y), ldy) ? 0 : -1;
}

// 1 when this CPU and kernel run AMX bf16 tiles (the prefill matmuls), else 0
int hk_amx_bf16() { return amx_bf16_usable() ? 1 : 0; }

// 1 where hk_prefill_attention runs here (AMX bf16 tiles, or AVX512-BF16 without them), else 0
int hk_flash_prefill() { return amx_bf16_usable() || avx512_bf16_usable() ? 1 : 0; }

// The row count from which matmuls leave the GEMV (rows_dot) here: for AMX int8 tiles, or without AMX
// for the int8 VNNI GEMM (gemm_vnni.h)
int hk_batch_min_rows() { return amx_usable() ? AMX_MIN_ROWS : VNNI_GEMM_MIN_ROWS; }

// Matmuls of up to n rows sum as the GEMV (invariant_rows) until the next call; 0 restores the batch GEMMs
void hk_set_invariant_rows(int64_t n) { invariant_rows = n; }

// 1 when those batches run on the int8 VNNI GEMM (no AMX tiles here), else 0
int hk_vnni_gemm() { return amx_usable() ? 0 : 1; }

}  // extern "C"

#include "fused_layer.h"  // the whole decoder layer over the entry points above
#include "stack_forward.h"  // hk_stack_forward over this library's hk_layer_forward
#include "lora_layer.h"  // hk_stack_forward_lora: that stack with LoRA terms, over the entry points above
#include "moe.h"  // hk_moe over this library's matmul
#include "delta_net.h"  // hk_delta_net: the Gated DeltaNet mixer (plain C++, every library)
