// How attention over a paged cache is cut into tasks and merged, for every tier (attention.h,
// attention_pages.h, kv_quant.h): no intrinsics here, only what a task reads, the plan, the thread loop and the merge.
//
// A task is (query row, group of G query heads, key range). A row's ranges depend on its position
// and the number of sequences only, never on how many rows its sequence has, so a verify step's row
// gets the bits of a decode row at its position. Tasks of one sequence's rows over (nearly) the same
// keys (a chain's consecutive positions, a tree's nodes) may run as one row group: a kernel that
// reads and converts each K/V block once for all of them, while every row's scores, maxima, sums and
// p.V keep the one-row order, so the bits stay the same.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstddef>
#include <map>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

constexpr int64_t MAX_TASK_HEADS = 64;  // query heads one task may cover

// What a task reads: the cache's planes, the sequence's block table, and a tree row's remapped keys
struct AttnShape {
  const uint8_t* kv;  // plane 0 = keys, plane 1 = values, 2 bytes per element
  int64_t plane;  // elements per plane: num_slots * kvh * d
  int64_t bs, heads, kvh, d;
  const int64_t* table;  // the row's sequence's block ids
  float scale, softcap;
  // a token tree's node row: keys remap_from .. (its ancestors and itself, along its path) are read
  // from the flat slots remap[key - remap_from] instead of their positions' slots (null: none)
  const int64_t* remap = nullptr;
  int64_t remap_from = 0;
};

inline bool remapped(const AttnShape& a, int64_t key) { return a.remap && key >= a.remap_from; }

inline const uint8_t* slot_row(const AttnShape& a, int plane, int64_t g, int64_t key) {
  const int64_t slot = remapped(a, key) ? a.remap[key - a.remap_from] : a.table[key / a.bs] * a.bs + key % a.bs;
  return a.kv + (plane * a.plane + (slot * a.kvh + g) * a.d) * 2;
}

template <int N, class F>
void with_const(int n, const F& f) {  // f(std::integral_constant<int, n>) for 1 <= n <= N
  if constexpr (N > 1)
    if (n < N) return with_const<N - 1>(n, f);
  f(std::integral_constant<int, N>{});
}

// a task thread's buffers (scores, packed queries, ...), reused across its tasks
struct AttnScratch {
  std::vector<float> scores, qs, vmax, kt;
};

struct AttnTask {
  int64_t row, seq, g, k0, k1, part;  // part: its slot in the partials buffer, -1 when it writes out directly
  int64_t split, j;  // the row's key ranges, and this one's index among them
};

// A row group's scores (rows x heads x keys f32) stay below this: ~1 MB, within L2 (more rows, or a
// longer span, start another group)
constexpr int64_t GROUP_SCORE_FLOATS = 1 << 18;
constexpr int64_t GROUP_MAX_ROWS = 64;

// The tasks in row groups: tasks of one sequence, kv group, split count and range index go together
// while rows x G x span stays within GROUP_SCORE_FLOATS. Returns the groups' task indices
// (idx[start[i] .. start[i + 1])), in the order of their first task.
inline void group_tasks(const std::vector<AttnTask>& tasks, int64_t G, std::vector<int64_t>& idx,
                        std::vector<int64_t>& start) {
  std::vector<std::vector<int64_t>> groups;
  std::vector<int64_t> lo, hi;  // each group's key span
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, size_t> open;
  for (int64_t i = 0; i < static_cast<int64_t>(tasks.size()); ++i) {
    const AttnTask& t = tasks[i];
    const auto key = std::make_tuple(t.seq, t.g, t.split, t.j);
    auto it = open.find(key);
    if (it != open.end()) {
      const size_t gi = it->second;
      const int64_t span = std::max(hi[gi], t.k1) - std::min(lo[gi], t.k0);
      const int64_t rows = static_cast<int64_t>(groups[gi].size()) + 1;
      if (rows <= GROUP_MAX_ROWS && rows * G * (span + 32) <= GROUP_SCORE_FLOATS) {
        groups[gi].push_back(i);
        lo[gi] = std::min(lo[gi], t.k0);
        hi[gi] = std::max(hi[gi], t.k1);
        continue;
      }
    }
    open[key] = groups.size();
    groups.push_back({i});
    lo.push_back(t.k0);
    hi.push_back(t.k1);
  }
  idx.clear();
  start.assign(1, 0);
  for (const auto& g : groups) {
    idx.insert(idx.end(), g.begin(), g.end());
    start.push_back(static_cast<int64_t>(idx.size()));
  }
}

// Whether run_attention's callers hand it their row-group kernel (hk_set_row_groups; on by default):
// off, every task runs on its own (the same bits, slower), for A/B measurements and tests
inline bool& row_groups() {
  static bool on = true;
  return on;
}

struct NoRowGroups {};  // run_attention without a row-group kernel: every task on its own

// Keys a task attends to at most: a long row is split into ranges of about this many, merged after
// (flash-decoding). Until 2026-12-07 the split followed the threads and the batch (4 tasks a thread over the
// sequences), so a decode's bits, and greedy tokens, changed with --threads and with the requests beside it.
constexpr int64_t KEYS_PER_RANGE = 256;

// Rows of S sequences (sequence s: rows q_start[s] .. + q_len[s], the last of its seq_lens[s] tokens)
// cut into tasks of (row, group g of G query heads, key range; `groups` per row), ranges of at most
// KEYS_PER_RANGE keys. attend(task, m, l, acc) fills per head the max, the
// sum of exp(s - max) and the unnormalized accumulator (into out directly when the row is not split);
// split rows are merged by their maxima and sums (flash-decoding). tree (null: none): int64 [rows,
// ldtree], a row's own position along its tree path in column 0 (-1: an ordinary row, its position
// from seq_lens): the row's keys and ranges are then a decode's there. attend_rows (optional):
// attend_rows(tasks, n, m, l, acc) does n tasks of one row group at once (m, l: [n][MAX_TASK_HEADS];
// acc: n pointers), each with the bits attend would give it.
template <class Attend, class AttendRows = NoRowGroups>
void run_attention(int64_t S, const int64_t* q_start, const int64_t* q_len, const int64_t* seq_lens,
                   int64_t groups, int64_t G, int64_t d, int64_t window, float* out, int64_t ldo, const Attend& attend,
                   const int64_t* tree = nullptr, int64_t ldtree = 0, const AttendRows& attend_rows = {}) {
  const int nt = omp_get_max_threads();
  // the calling thread's buffers, kept across calls (no allocation per layer), shared with the region's
  // threads by reference (a thread_local's name would be each thread's own)
  thread_local std::vector<AttnTask> tasks_buf;
  thread_local std::vector<int64_t> gidx_buf, gstart_buf, firsts_buf;
  std::vector<AttnTask>& tasks = tasks_buf;
  std::vector<int64_t>&gidx = gidx_buf, &gstart = gstart_buf, &firsts = firsts_buf;
  tasks.clear();
  int64_t parts = 0;
  bool single = true;  // one row per sequence (a decode step): every row group is one task
  double work = 0;
  for (int64_t s = 0; s < S; ++s) {
    single &= q_len[s] <= 1;
    for (int64_t t = q_start[s]; t < q_start[s] + q_len[s]; ++t) {
      const int64_t pos = tree && tree[t * ldtree] >= 0 ? tree[t * ldtree] : seq_lens[s] - (q_start[s] + q_len[s] - t);
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      const int64_t n = pos + 1 - lo;
      // from the row's own key count alone: a row gets the same key ranges (the same bits: each range's
      // probabilities are rounded for p.V against its own max) at any thread count, beside any other
      // sequences, and whether its sequence decodes one token or verifies drafts in 1 + k rows
      const int64_t split = (n + KEYS_PER_RANGE - 1) / KEYS_PER_RANGE;
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t j = 0; j < split; ++j) {
          tasks.push_back({t, s, g, lo + n * j / split, lo + n * (j + 1) / split, split > 1 ? parts++ : -1, split, j});
          work += static_cast<double>(n) / split * G * d;
        }
    }
  }
  thread_local std::vector<float> partials_buf;  // every part is written before it is read: no zeroing
  if (static_cast<int64_t>(partials_buf.size()) < parts * G * (d + 2)) partials_buf.resize(parts * G * (d + 2));
  float* partials = partials_buf.data();
  auto acc_of = [&](const AttnTask& k) {
    return k.part >= 0 ? partials + k.part * G * (d + 2) : out + k.row * ldo + k.g * G * d;
  };
  auto finish = [&](const AttnTask& k, const float* m, const float* l) {  // a part keeps m, l; a whole row divides
    float* acc = acc_of(k);
    if (k.part >= 0) {
      std::copy(m, m + G, acc + G * d);
      std::copy(l, l + G, acc + G * d + G);
    } else {
      for (int64_t h = 0; h < G; ++h)
        for (int64_t c = 0; c < d; ++c) acc[h * d + c] /= l[h];
    }
  };
  // one row per sequence: no two tasks share (sequence, group, range), so group_tasks would give a group
  // per task, in task order (its std::map and vectors cost ~the attention of a few keys a layer)
  if (std::is_same_v<AttendRows, NoRowGroups> || single) {
    gidx.resize(tasks.size());
    gstart.resize(tasks.size() + 1);
    for (size_t i = 0; i < tasks.size(); ++i) gidx[i] = gstart[i] = static_cast<int64_t>(i);
    gstart.back() = static_cast<int64_t>(tasks.size());
  } else {
    group_tasks(tasks, G, gidx, gstart);
  }
  const int64_t ngroups = static_cast<int64_t>(gstart.size()) - 1;
#pragma omp parallel for schedule(dynamic, 1) num_threads(work < 16384 ? 1 : nt)
  for (int64_t gi = 0; gi < ngroups; ++gi) {
    const int64_t n = gstart[gi + 1] - gstart[gi];
    if (n == 1) {
      const AttnTask& k = tasks[gidx[gstart[gi]]];
      float m[MAX_TASK_HEADS], l[MAX_TASK_HEADS];
      attend(k, m, l, acc_of(k));
      finish(k, m, l);
      continue;
    }
    if constexpr (!std::is_same_v<AttendRows, NoRowGroups>) {
      thread_local std::vector<float> ml;
      thread_local std::vector<const AttnTask*> ks;
      thread_local std::vector<float*> accs;
      ml.resize(2 * n * MAX_TASK_HEADS);
      ks.resize(n);
      accs.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        ks[i] = &tasks[gidx[gstart[gi] + i]];
        accs[i] = acc_of(*ks[i]);
      }
      attend_rows(ks.data(), n, ml.data(), ml.data() + n * MAX_TASK_HEADS, accs.data());
      for (int64_t i = 0; i < n; ++i)
        finish(*ks[i], ml.data() + i * MAX_TASK_HEADS, ml.data() + (n + i) * MAX_TASK_HEADS);
    }
  }
  // merge, each split (row, group) on its own: weights exp(m_j - max m) for each range's sum and
  // accumulator. Its tasks are consecutive; the order of its ranges is the one of a 1-row call.
  const int64_t ntasks = static_cast<int64_t>(tasks.size());
  firsts.clear();
  for (int64_t i = 0; i < ntasks; ++i)
    if (tasks[i].part >= 0 && (i == 0 || tasks[i - 1].row != tasks[i].row || tasks[i - 1].g != tasks[i].g))
      firsts.push_back(i);
  const int64_t nmerge = static_cast<int64_t>(firsts.size());
#pragma omp parallel for schedule(static) num_threads(nmerge * G * d < 65536 ? 1 : nt)
  for (int64_t f = 0; f < nmerge; ++f) {
    const int64_t i = firsts[f];
    const AttnTask& first = tasks[i];
    int64_t e = i;
    while (e < ntasks && tasks[e].row == first.row && tasks[e].g == first.g) ++e;
    float* o = out + first.row * ldo + first.g * G * d;
    for (int64_t h = 0; h < G; ++h) {
      float mx = -INFINITY, total = 0.0f;
      for (int64_t j = i; j < e; ++j) mx = std::max(mx, partials[tasks[j].part * G * (d + 2) + G * d + h]);
      std::fill(o + h * d, o + (h + 1) * d, 0.0f);
      for (int64_t j = i; j < e; ++j) {
        const float* p = partials + tasks[j].part * G * (d + 2);
        const float w = std::exp(p[G * d + h] - mx);
        total += w * p[G * d + G + h];
        for (int64_t c = 0; c < d; ++c) o[h * d + c] += w * p[h * d + c];
      }
      for (int64_t c = 0; c < d; ++c) o[h * d + c] /= total;
    }
  }
}

}  // namespace
