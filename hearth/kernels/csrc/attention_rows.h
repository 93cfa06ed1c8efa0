// Several rows of one sequence in one step (a verify step's chain, a token tree's nodes) over the
// paged f16/bf16 cache, as one row group (attention_tasks.h): each K/V block is read and converted
// to f32 once for every row and head of the group, not once per row. Every row keeps its one-row
// task's arithmetic (attend_range of attention.h / attention_pages.h): a key's score is its own sum
// (the same products, fma chain and lane tree, whatever lane it lands in), the max and the sum of
// exp run over the row's own range from its own first key, and p.V adds the keys of its range in
// order into the same register tiles (stored and reloaded between key chunks, which is exact). So
// each row gets its one-row bits.
//
// Tier-neutral: the vector work is the tier's Ops (RowOps in attention.h, attention_pages.h):
//   L: lanes; DV: vectors per head; convert(a, plane, key, n, end, dst, values): n keys' slots (every
//   kv head) -> dst [n][kvh * DV][L] f32, prefetching the next n keys below `end` (and with `values`
//   these keys' values, for p.V); scores(a, kt, nk, qs, s, ld, lo, hi): every head's scores of
//   nk <= L keys of one row (qs: q * scale), lanes lo .. hi stored at s + h * ld; softmax(s, n, m, l);
//   values(a, v, ldv, nk, p, ld, acc, start): p.V of nk keys, every head, into acc (from zero when
//   start, else on from acc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention_tasks.h"

namespace {

struct RowJob {  // one task of a row group
  const float* q;  // the row's q: [heads][d] f32
  int64_t k0, k1;  // its key range
  const int64_t* remap;  // a tree row's path slots from remap_from on (null: none)
  int64_t remap_from;
  float *m, *l, *acc;  // per head: max, sum of exp, unnormalized p.V [heads][d]
};

struct RowsScratch {
  std::vector<float> scores, qs, kv;
  std::vector<int64_t> off;
  std::vector<char> started;
};

inline float* aligned64(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n + 16) v.resize(n + 16);
  float* p = v.data();
  return p + (64 - reinterpret_cast<uintptr_t>(p) % 64) % 64 / sizeof(float);
}

template <class Shape>
Shape row_shape(const Shape& a, const RowJob& r) {  // a with the row's tree path
  Shape s = a;
  s.remap = r.remap;
  s.remap_from = r.remap_from;
  return s;
}

// The group's rows: scores for keys [K0, B) (every row's ordinary slots) from one conversion, then
// each row's own keys from B on (a tree row's path); softmax per row; p.V likewise.
template <class Ops, class Shape>
void attend_rows(const Shape& a, const RowJob* rows, int64_t R, RowsScratch& buf) {
  constexpr int L = Ops::L;
  const int64_t D = a.d, H = a.heads, W = a.kvh * Ops::DV;
  int64_t K0 = rows[0].k0, K1 = rows[0].k1, B = INT64_MAX;
  for (int64_t r = 0; r < R; ++r) {
    K0 = std::min(K0, rows[r].k0);
    K1 = std::max(K1, rows[r].k1);
    if (rows[r].remap) B = std::min(B, rows[r].remap_from);
  }
  B = std::max(K0, std::min(B, K1));
  buf.off.resize(R);
  int64_t total = 0;
  for (int64_t r = 0; r < R; ++r) {  // each row's scores [heads][n + 16] after 16 floats of front pad
    buf.off[r] = total + 16;
    total += 16 + H * (rows[r].k1 - rows[r].k0 + 16);
  }
  float* sc = aligned64(buf.scores, total);
  float* qs = aligned64(buf.qs, R * H * D);
  const int64_t CH = std::max<int64_t>(16, 8192 / (W * L)) / 16 * 16;  // keys a V chunk: ~32 KB of f32
  float* kv = aligned64(buf.kv, CH * W * L);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < H * D; ++i) qs[r * H * D + i] = rows[r].q[i] * a.scale;
  auto ld = [&](int64_t r) { return rows[r].k1 - rows[r].k0 + 16; };
  auto srow = [&](int64_t r) { return sc + buf.off[r]; };
  for (int64_t c0 = K0; c0 < B; c0 += L) {  // shared keys, L at a time, for every row they are in
    const int nk = static_cast<int>(std::min<int64_t>(L, B - c0));
    Ops::convert(a, 0, c0, nk, B, kv, true);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t lo = std::max(c0, rows[r].k0), hi = std::min(c0 + nk, rows[r].k1);
      if (lo < hi)
        Ops::scores(a, kv, nk, qs + r * H * D, srow(r) + (c0 - rows[r].k0), ld(r), static_cast<int>(lo - c0),
                    static_cast<int>(hi - c0));
    }
  }
  for (int64_t r = 0; r < R; ++r) {  // each row's own keys from B on
    const Shape ar = row_shape(a, rows[r]);
    for (int64_t c0 = std::max(B, rows[r].k0); c0 < rows[r].k1; c0 += L) {
      const int nk = static_cast<int>(std::min<int64_t>(L, rows[r].k1 - c0));
      Ops::convert(ar, 0, c0, nk, 0, kv, false);
      Ops::scores(a, kv, nk, qs + r * H * D, srow(r) + (c0 - rows[r].k0), ld(r), 0, nk);
    }
  }
  for (int64_t r = 0; r < R; ++r)  // probabilities in place
    for (int64_t h = 0; h < H; ++h)
      Ops::softmax(srow(r) + h * ld(r), rows[r].k1 - rows[r].k0, rows[r].m[h], rows[r].l[h]);
  buf.started.assign(R, 0);
  auto values = [&](int64_t r, int64_t v0, int64_t nk) {  // p.V of keys [v0, v0 + nk) (in kv): row r's of them
    const int64_t lo = std::max(v0, rows[r].k0), hi = std::min(v0 + nk, rows[r].k1);
    if (lo >= hi) return;
    Ops::values(a, kv + (lo - v0) * W * L, W * L, hi - lo, srow(r) + (lo - rows[r].k0), ld(r), rows[r].acc,
                !buf.started[r]);
    buf.started[r] = 1;
  };
  for (int64_t v0 = K0; v0 < B; v0 += CH) {  // shared values, CH at a time
    const int64_t nk = std::min(CH, B - v0);
    Ops::convert(a, 1, v0, nk, B, kv, false);
    for (int64_t r = 0; r < R; ++r) values(r, v0, nk);
  }
  for (int64_t r = 0; r < R; ++r) {
    const Shape ar = row_shape(a, rows[r]);
    for (int64_t v0 = std::max(B, rows[r].k0); v0 < rows[r].k1; v0 += CH) {
      const int64_t nk = std::min(CH, rows[r].k1 - v0);
      Ops::convert(ar, 1, v0, nk, 0, kv, false);
      values(r, v0, nk);
    }
  }
}

// hk_paged_attention's body on either tier: one(task) for a row on its own (fn: the tier's
// attend_range), the row groups (rows_fn: attend_rows with the tier's RowOps) while row_groups()
template <class Scratch, class Shape, class AttendFn, class RowsFn>
void paged_attention_rows(const Shape& a, AttendFn fn, RowsFn rows_fn, const float* q, int64_t ldq,
                          int64_t S, const int64_t* q_start, const int64_t* q_len, const int64_t* seq_lens,
                          const int64_t* tables, int64_t ldt, int64_t window, float* out, int64_t ldo,
                          const int64_t* tree, int64_t ldtree) {
  auto job = [&](const AttnTask& k, float* m, float* l, float* acc) {
    const bool node = tree && tree[k.row * ldtree] >= 0;
    return RowJob{q + k.row * ldq, k.k0, k.k1, node ? tree + k.row * ldtree + 2 : nullptr,
                  node ? tree[k.row * ldtree + 1] : 0, m, l, acc};
  };
  auto one = [&](const AttnTask& k, float* m, float* l, float* acc) {
    const RowJob r = job(k, m, l, acc);
    Shape sh = row_shape(a, r);
    sh.table = tables + k.seq * ldt;
    thread_local Scratch scratch;  // each thread's own (Scratch: the tier's AttnScratch)
    fn(sh, r.q, k.k0, k.k1, m, l, acc, scratch);
  };
  auto group = [&](const AttnTask* const* ks, int64_t n, float* m, float* l, float* const* acc) {
    thread_local std::vector<RowJob> jobs;
    thread_local RowsScratch buf;
    jobs.resize(n);
    for (int64_t i = 0; i < n; ++i) jobs[i] = job(*ks[i], m + i * MAX_TASK_HEADS, l + i * MAX_TASK_HEADS, acc[i]);
    Shape sh = a;
    sh.table = tables + ks[0]->seq * ldt;
    rows_fn(sh, jobs.data(), n, buf);
  };
  if (row_groups())
    run_attention(S, q_start, q_len, seq_lens, 1, a.heads, a.d, window, out, ldo, one, tree, ldtree, group);
  else
    run_attention(S, q_start, q_len, seq_lens, 1, a.heads, a.d, window, out, ldo, one, tree, ldtree);
}

}  // namespace
