// The int8 VNNI GEMM (gemm_vnni.h) for a decode-sized call, every activation row in one chunk: a
// panel's codes and scales are built a slice of K at a time into a buffer that stays in L1
// (VNNI_SLICE_K weights: 24 KB), and every row takes that slice's products before the next is built,
// the sums carried in y between slices (f32 stored and reloaded: the same bits as one pass over K).
// Whole panels built a group at a time (512 KB, in L2) cost their stores and reloads from L2: at 16
// rows of Qwen2.5-Coder-1.5B the building took ~half the products' time (measured 2026-12-05:
// docs/performance.md). Prefills keep the groups (their building is shared by many rows).
// Included by gguf_kernels.cpp after Plan, Part and dispatch.
#pragma once

constexpr int64_t VNNI_SLICE_K = 512;

// Panel pn's products for rows 0 .. M where both its halves are 16 rows of one part of a type the
// direct builders take (gemm_vnni_panels.h); false (nothing done) for any other panel
__attribute__((always_inline)) inline bool vnni_sliced(const Plan& p, int64_t pn, const VnniActs& x16, const VnniActs& x32, int64_t M, float* y,
                 int64_t ldy, uint8_t* buf, VnniAhead& ahead) {
  const Part* part[2] = {nullptr, nullptr};
  int ts[2] = {0, 0}, width[2] = {0, 0}, gs = 32;
  const int64_t n0 = pn * VNNI_PANEL, cols = std::min<int64_t>(VNNI_PANEL, p.N - n0);
  for (int h = 0; h < 2; ++h) {
    for (const Part& c : p.parts)
      if (n0 + 16 * h >= c.out_col && n0 + 16 * h + 16 <= c.out_col + c.rows) part[h] = &c;
    int g = 16;
    if (!part[h] || !dispatch<VnniBlockShape>(part[h]->qtype, ts[h], width[h]) || !width[h] ||
        !dispatch<VnniGroup>(part[h]->qtype, g))
      return false;
    gs = std::min(gs, g);
  }
  for (int64_t k0 = 0; k0 < p.K; k0 += VNNI_SLICE_K) {
    const int64_t kk = std::min(VNNI_SLICE_K, p.K - k0);
    const VnniPanel panel = vnni_panel_at(buf, VNNI_SLICE_K, gs);  // the slice's layout: k from k0
    for (int h = 0; h < 2; ++h) {
      const Part& c = *part[h];
      const uint8_t* rows[16];
      for (int i = 0; i < 16; ++i) rows[i] = c.w + (n0 + 16 * h + i - c.out_col) * c.row_bytes + k0 / width[h] * ts[h];
      bool done = false;
      dispatch<VnniDirect>(c.qtype, rows, kk / width[h], h, panel, done);
    }
    VnniActs x = gs == 32 ? x32 : x16;
    x.q += k0, x.d += k0 / 16, x.a += k0 / gs;
    if (gs == 32) {
      vnni_rows<32>(panel, kk, x, 0, M, y + n0, ldy, cols, ahead, k0 > 0);
    } else {
      vnni_rows<16>(panel, kk, x, 0, M, y + n0, ldy, cols, ahead, k0 > 0);
    }
  }
  return true;
}
