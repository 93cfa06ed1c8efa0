// KVarN block encoding (hearth/kvstore/kvarn.py: balance + quantize_rows + pack), natively: the torch
// encoder spends ~25 ms per block and layer in ~150 small std reductions, so a decode step that fills
// a 128-token block stalled ~0.5 s (gemma3-270m). Same steps and operation order as the torch code
// (f32 arithmetic, stds accumulated in double like torch.std); results agree up to the last-bit
// differences of log/exp and the stds' summation order, which can tip a near-tied choice of iterate.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "simd.h"

namespace {

struct KvarnConsts {
  int iterations;
  float std_min, std_max, log_min, log_max;
};

// sum of y[0 .. n) and of (y - mean)^2, in double, 8 lanes at a time (n is a multiple of 8: bs, head_dim)
inline double sum_pd(const float* y, int64_t n) {
  __m512d a = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 8) a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm256_loadu_ps(y + i)));
  return _mm512_reduce_add_pd(a);
}

inline double sq_dev_pd(const float* y, int64_t n, double mean) {
  const __m512d mu = _mm512_set1_pd(mean);
  __m512d a = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 8) {
    const __m512d e = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_loadu_ps(y + i)), mu);
    a = _mm512_fmadd_pd(e, e, a);
  }
  return _mm512_reduce_add_pd(a);
}

// Unbiased stds of a [R][C] f32 tile: row[r] over C, and (col != nullptr) col[c] over R; two passes in double
void tile_stds(const float* y, int64_t R, int64_t C, float* row, float* col, std::vector<double>& acc) {
  for (int64_t r = 0; r < R; ++r) {
    const float* yr = y + r * C;
    row[r] = static_cast<float>(std::sqrt(sq_dev_pd(yr, C, sum_pd(yr, C) / C) / (C - 1)));
  }
  if (!col) return;
  acc.assign(2 * C, 0.0);
  double *cm = acc.data(), *cv = cm + C;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) cm[c] += y[r * C + c];
  for (int64_t c = 0; c < C; ++c) cm[c] /= R;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) cv[c] += (y[r * C + c] - cm[c]) * (y[r * C + c] - cm[c]);
  for (int64_t c = 0; c < C; ++c) col[c] = static_cast<float>(std::sqrt(cv[c] / (R - 1)));
}

float imbalance(const float* col, int64_t C, const float* row, int64_t R) {  // kvarn._imbalance
  const auto [cmin, cmax] = std::minmax_element(col, col + C);
  const auto [rmin, rmax] = std::minmax_element(row, row + R);
  return *cmax / std::max(*cmin, 1e-8f) + *rmax / std::max(*rmin, 1e-8f);
}

// y = tile / sc[c] / sr[r], two divisions as the torch code rounds them
void unbalance(const float* x, int64_t R, int64_t C, const float* sc, const float* sr, float* y) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = x[r * C + c] / sc[c] / sr[r];
}

void log_step(float* log_s, const float* std_, int64_t n, float* s, const KvarnConsts& k) {
  for (int64_t i = 0; i < n; ++i) {
    log_s[i] = std::min(std::max(log_s[i] + std::log(std::min(std::max(std_[i], k.std_min), k.std_max)), k.log_min),
                        k.log_max);
    s[i] = std::exp(log_s[i]);
  }
}

// kvarn.balance for one [R][C] tile -> best_c [C], best_r [R]
void balance_tile(const float* x, int64_t R, int64_t C, const KvarnConsts& k, float* best_c, float* best_r) {
  std::vector<float> lc(C, 0.0f), lr(R, 0.0f), sc(C, 1.0f), sr(R, 1.0f), col(C), row(R), y(R * C);
  std::vector<double> acc;
  tile_stds(x, R, C, row.data(), col.data(), acc);
  float best = imbalance(col.data(), C, row.data(), R);
  std::copy(sc.begin(), sc.end(), best_c);
  std::copy(sr.begin(), sr.end(), best_r);
  for (int it = 0; it < k.iterations; ++it) {
    log_step(lc.data(), col.data(), C, sc.data(), k);
    unbalance(x, R, C, sc.data(), sr.data(), y.data());
    tile_stds(y.data(), R, C, row.data(), nullptr, acc);
    log_step(lr.data(), row.data(), R, sr.data(), k);
    unbalance(x, R, C, sc.data(), sr.data(), y.data());
    tile_stds(y.data(), R, C, row.data(), col.data(), acc);
    const float imb = imbalance(col.data(), C, row.data(), R);
    if (imb <= best) {
      best = imb;
      std::copy(sc.begin(), sc.end(), best_c);
      std::copy(sr.begin(), sr.end(), best_r);
    }
  }
}

// kvarn.quantize_rows for one tile: codes [R][C] (0 .. 2^bits - 1), row scale and zero (balancing
// folded in) and column scale, as f16 bits
void quantize_tile(const float* x, int64_t R, int64_t C, int bits, const KvarnConsts& k, uint8_t* codes,
                   uint16_t* row_scale, uint16_t* row_zero, uint16_t* col_scale) {
  std::vector<float> s_col(C), s_row(R), bal(C);
  balance_tile(x, R, C, k, s_col.data(), s_row.data());
  const float levels = static_cast<float>((1 << bits) - 1);
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) bal[c] = x[r * C + c] / s_col[c] / s_row[r];
    const auto [lo, hi] = std::minmax_element(bal.begin(), bal.end());
    const float scale = std::max((*hi - *lo) / levels, 1e-10f);
    for (int64_t c = 0; c < C; ++c)
      codes[r * C + c] = static_cast<uint8_t>(std::min(std::max(std::nearbyint((bal[c] - *lo) / scale), 0.0f), levels));
    row_scale[r] = _cvtss_sh(s_row[r] * scale, _MM_FROUND_TO_NEAREST_INT);
    row_zero[r] = _cvtss_sh(s_row[r] * *lo, _MM_FROUND_TO_NEAREST_INT);
  }
  for (int64_t c = 0; c < C; ++c) col_scale[c] = _cvtss_sh(s_col[c], _MM_FROUND_TO_NEAREST_INT);
}

}  // namespace

extern "C" {

// x: f32 [m, bs, kvh, d] (K or V of m full blocks, rotated) -> the fields of kvarn.KVarNKeys (per_token 0:
// codes [m, bs, kvh, d * bits / 8], scale and zero [m, kvh, d], token_scale [m, bs, kvh]) or
// kvarn.KVarNValues (per_token 1: codes, scale and zero [m, bs, kvh], channel_scale [m, kvh, d]); f16 as
// uint16. Tiles are [channels, tokens] for keys, [tokens, channels] for values.
void hk_kvarn_encode(const float* x, int64_t m, int64_t bs, int64_t kvh, int64_t d, int bits, int per_token,
                     int iterations, float std_min, float std_max, float log_min, float log_max, uint8_t* codes,
                     uint16_t* scale, uint16_t* zero, uint16_t* side) {
  const KvarnConsts k{iterations, std_min, std_max, log_min, log_max};
  const int64_t R = per_token ? bs : d, C = per_token ? d : bs, per = 8 / bits;
#pragma omp parallel for schedule(dynamic, 1) if (m * kvh > 1)
  for (int64_t i = 0; i < m * kvh; ++i) {
    const int64_t b = i / kvh, g = i % kvh;
    std::vector<float> tile(R * C);
    std::vector<uint8_t> q(R * C);
    std::vector<uint16_t> rs(R), rz(R), cs(C);
    for (int64_t t = 0; t < bs; ++t)
      for (int64_t c = 0; c < d; ++c) {
        const float v = x[((b * bs + t) * kvh + g) * d + c];
        if (per_token) tile[t * d + c] = v; else tile[c * bs + t] = v;
      }
    quantize_tile(tile.data(), R, C, bits, k, q.data(), rs.data(), rz.data(), cs.data());
    for (int64_t t = 0; t < bs; ++t) {  // pack along head_dim, low bits first
      uint8_t* out = codes + ((b * bs + t) * kvh + g) * d / per;
      for (int64_t c = 0; c < d; c += per) {
        uint8_t byte = 0;
        for (int64_t j = 0; j < per; ++j) byte |= (per_token ? q[t * d + c + j] : q[(c + j) * bs + t]) << (bits * j);
        out[c / per] = byte;
      }
    }
    for (int64_t r = 0; r < R; ++r) {  // per token [m, bs, kvh] or per channel [m, kvh, d]
      const int64_t at = per_token ? (b * bs + r) * kvh + g : (b * kvh + g) * d + r;
      scale[at] = rs[r];
      zero[at] = rz[r];
    }
    for (int64_t c = 0; c < C; ++c) side[per_token ? (b * kvh + g) * d + c : (b * bs + c) * kvh + g] = cs[c];
  }
}

}  // extern "C"
