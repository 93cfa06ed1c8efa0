// Attention over the paged f16/bf16 KV cache for the decode-tier libraries (avx2, neon), written on
// the vf8 interface of simd_avx2.h / simd_neon.h (included before this file): attention.h's structure
// in 8-wide vectors (hearth.kernels.attention's layout: [2 (k, v), num_slots, kv_heads, head_dim]).
//
// Tasks are (query row, key range) with every head of the row; a key's slot (all kv heads) is
// converted to f32 once and read by every head. Exact scores, softmax, p.V per task; rows split
// into key ranges are merged by their maxima and sums (flash-decoding). The split depends on the
// number of sequences only, so a row has the same bits whether its sequence decodes one token or
// verifies drafts in 1 + k rows.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace {

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

inline vf8 softcap_ps(vf8 v, float cap) {  // cap * tanh(v / cap), tanh(z) = 1 - 2 / (1 + e^2z)
  const vf8 z = vmul(v, vset1(2.0f / cap));
  const vf8 t = vsub(vset1(1.0f), vdiv(vset1(2.0f), vadd(vset1(1.0f), exp_ps(z))));
  return vmul(t, vset1(cap));
}

inline bool remapped(const AttnShape& a, int64_t key) { return a.remap && key >= a.remap_from; }

inline const uint8_t* slot_row(const AttnShape& a, int plane, int64_t g, int64_t key) {
  const int64_t slot = remapped(a, key) ? a.remap[key - a.remap_from] : a.table[key / a.bs] * a.bs + key % a.bs;
  return a.kv + (plane * a.plane + (slot * a.kvh + g) * a.d) * 2;
}

// acc[h][8 c0 .. 8 (c0 + CV)) = sum_j p[h][j] v_j for HB heads from h0 over keys [k0, k1) (kv head g)
template <int HB, int CV, bool BF16>
void weighted_values(const AttnShape& a, int64_t g, int64_t k0, int64_t k1, const float* p, int64_t ld, int64_t h0,
                     int c0, float* acc) {
  vf8 o[HB][CV];
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < CV; ++c) o[h][c] = vzero();
  const int64_t stride = a.kvh * a.d * 2;
  for (int64_t key = k0; key < k1;) {
    const int64_t run = std::min(k1, (key / a.bs + 1) * a.bs) - key;
    const uint8_t* vp = slot_row(a, 1, g, key) + 16 * c0;  // 8 halves per vector
    for (int64_t j = 0; j < run; ++j, vp += stride) {
      // a tree row's remapped keys are not consecutive slots: the same keys in the same order
      const uint8_t* vj = remapped(a, key + j) ? slot_row(a, 1, g, key + j) + 16 * c0 : vp;
      vf8 vf[CV];
      for (int c = 0; c < CV; ++c) vf[c] = load_half<BF16>(vj + 16 * c);
      for (int h = 0; h < HB; ++h) {
        const vf8 w = vset1(p[(h0 + h) * ld + key - k0 + j]);
        for (int c = 0; c < CV; ++c) o[h][c] = vfma(w, vf[c], o[h][c]);
      }
    }
    key += run;
  }
  for (int h = 0; h < HB; ++h)
    for (int c = 0; c < CV; ++c) vstore(acc + (h0 + h) * a.d + 8 * (c0 + c), o[h][c]);
}

// sh[0 .. n) <- exp(sh - mx) in place; returns their sum. Weights below e^-80 are dropped (denormals
// would slow p.V)
inline float exp_in_place(float* sh, int64_t n, float mx) {
  const vf8 vmx = vset1(mx), lim = vset1(-80.0f);
  vf8 sum = vzero();
  for (int64_t j = 0; j < n; j += 8) {
    const vf8 x = vsub(load8(sh + j, n - j), vmx);
    const vf8 p = keep_first(keep_where_gt(exp_ps(x), x, lim), n - j);
    store8(sh + j, p, n - j);
    sum = vadd(sum, p);
  }
  return hsum(sum);
}

template <int N, class F>
void with_const(int n, const F& f) {  // f(std::integral_constant<int, n>) for 1 <= n <= N
  if constexpr (N > 1)
    if (n < N) return with_const<N - 1>(n, f);
  f(std::integral_constant<int, N>{});
}

struct AttnScratch {
  std::vector<float> scores, qs, vmax, kt;
};

// One task: every query head of one row (q: [kvh][G][D] f32) against keys [k0, k1): per head the
// running max m, the sum of exp(s - m) l, and acc = sum exp(s - m) v (unnormalized)
template <int DV, bool BF16>
void attend_range(const AttnShape& a, const float* q, int64_t k0, int64_t k1, float* m, float* l, float* acc,
                  AttnScratch& buf) {
  const int64_t n = k1 - k0, D = a.d, H = a.heads, G = H / a.kvh, W = a.kvh * DV;  // W: vectors per slot
  const int64_t slot_bytes = a.kvh * D * 2, ld = n + 8;
  auto grow = [](std::vector<float>& v, int64_t size) {
    if (static_cast<int64_t>(v.size()) < size) v.resize(size);
    return v.data();
  };
  float* s = grow(buf.scores, H * ld);
  float* qs = grow(buf.qs, H * D);  // q * scale
  float* vmax = grow(buf.vmax, H * 8);
  float* kt = grow(buf.kt, 8 * W * 8 + 8);  // 8 slots' keys in f32: [key][kv head][DV vectors]
  kt += (32 - reinterpret_cast<uintptr_t>(kt) % 32) % 32 / sizeof(float);
  for (int64_t i = 0; i < H * D; ++i) qs[i] = q[i] * a.scale;
  for (int64_t h = 0; h < H; ++h) vstore(vmax + 8 * h, vset1(-INFINITY));
  for (int64_t key = k0; key < k1;) {  // scores, 8 keys at a time
    const int64_t run = std::min(k1, (key / a.bs + 1) * a.bs) - key;
    const uint8_t* kp = slot_row(a, 0, 0, key);
    for (int64_t t0 = 0; t0 < run; t0 += 8) {
      const int r = static_cast<int>(std::min<int64_t>(8, run - t0));
      for (int j = 0; j < r; ++j, kp += slot_bytes) {
        const uint8_t* kj = remapped(a, key + t0 + j) ? slot_row(a, 0, 0, key + t0 + j) : kp;  // a tree row's path
        for (int64_t b = 0; b < slot_bytes; b += 64)  // this key's values, into L2 for p.V
          prefetch_l2(kj + a.plane * 2 + b);
        for (int64_t c = 0; c < W; ++c) vstore(kt + (j * W + c) * 8, load_half<BF16>(kj + 16 * c));
      }
      for (int64_t h = 0; h < H; ++h) {
        vf8 t[8];
        const float* qh = qs + h * D;
        const float* kh = kt + h / G * DV * 8;
        for (int j = 0; j < 8; ++j) {
          if (j >= r) { t[j] = vzero(); continue; }
          t[j] = vmul(vload(qh), vload(kh + j * W * 8));
          for (int c = 1; c < DV; ++c) t[j] = vfma(vload(qh + 8 * c), vload(kh + (j * W + c) * 8), t[j]);
        }
        vf8 v = sum8(t);
        if (a.softcap > 0.0f) v = softcap_ps(v, a.softcap);
        store8(s + h * ld + key - k0 + t0, v, r);
        vstore(vmax + 8 * h, max_first(vload(vmax + 8 * h), v, r));
      }
    }
    key += run;
  }
  for (int64_t h = 0; h < H; ++h) {  // probabilities in place
    float mx = -INFINITY;
    for (int i = 0; i < 8; ++i) mx = std::max(mx, vmax[8 * h + i]);
    m[h] = mx;
    l[h] = exp_in_place(s + h * ld, n, mx);
  }
  for (int64_t g = 0; g < a.kvh; ++g)  // acc = p . V per kv head, in register tiles of 2 heads x 4 vectors
    for (int64_t h0 = 0; h0 < G; h0 += 2)
      for (int c0 = 0; c0 < DV; c0 += 4)
        with_const<2>(static_cast<int>(std::min<int64_t>(2, G - h0)), [&](auto hb) {
          with_const<4>(std::min(4, DV - c0), [&](auto cv) {
            weighted_values<decltype(hb)::value, decltype(cv)::value, BF16>(a, g, k0, k1, s + g * G * ld, ld, h0, c0,
                                                                            acc + g * G * D);
          });
        });
}

using AttendFn = void (*)(const AttnShape&, const float*, int64_t, int64_t, float*, float*, float*, AttnScratch&);

template <int DV>
AttendFn attend_for(bool bf16) {
  return bf16 ? attend_range<DV, true> : attend_range<DV, false>;
}

AttendFn pick_attend(int64_t dv, bool bf16) {  // dv = head_dim / 8
  switch (dv) {
    case 4: return attend_for<4>(bf16);
    case 8: return attend_for<8>(bf16);
    case 10: return attend_for<10>(bf16);
    case 12: return attend_for<12>(bf16);
    case 16: return attend_for<16>(bf16);
    case 32: return attend_for<32>(bf16);
    default: return nullptr;
  }
}

constexpr int64_t MAX_TASK_HEADS = 64;  // query heads one task may cover

struct AttnTask {
  int64_t row, seq, k0, k1, part;  // part: its slot in the partials buffer, -1 when it writes out directly
};

thread_local AttnScratch attn_scratch;

// Rows of S sequences (sequence s: rows q_start[s] .. + q_len[s], the last of its seq_lens[s] tokens)
// cut into tasks of (row, key range), none shorter than 32 keys; attend(task, m, l, acc) per task.
// tree (null: none): int64 [rows, ldtree], a row's own position along its tree path in column 0 (-1:
// an ordinary row, its position from seq_lens): the row's keys and ranges are then a decode's there.
template <class Attend>
void run_attention(int64_t S, const int64_t* q_start, const int64_t* q_len, const int64_t* seq_lens, int64_t H,
                   int64_t d, int64_t window, float* out, int64_t ldo, const Attend& attend,
                   const int64_t* tree = nullptr, int64_t ldtree = 0) {
  const int nt = omp_get_max_threads();
  std::vector<AttnTask> tasks;
  int64_t parts = 0;
  double work = 0;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = q_start[s]; t < q_start[s] + q_len[s]; ++t) {
      const int64_t pos = tree && tree[t * ldtree] >= 0 ? tree[t * ldtree] : seq_lens[s] - (q_start[s] + q_len[s] - t);
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      const int64_t n = pos + 1 - lo;
      const int64_t want = (4 * nt + S - 1) / S;  // from the number of sequences, not of rows
      const int64_t split = std::max<int64_t>(1, std::min(want, n / 32));
      for (int64_t j = 0; j < split; ++j) {
        tasks.push_back({t, s, lo + n * j / split, lo + n * (j + 1) / split, split > 1 ? parts++ : -1});
        work += static_cast<double>(n) / split * H * d;
      }
    }
  std::vector<float> partials(parts * H * (d + 2));
  const int64_t ntasks = static_cast<int64_t>(tasks.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(work < 16384 ? 1 : nt)
  for (int64_t i = 0; i < ntasks; ++i) {
    const AttnTask& k = tasks[i];
    float m[MAX_TASK_HEADS], l[MAX_TASK_HEADS];
    float* acc = k.part >= 0 ? partials.data() + k.part * H * (d + 2) : out + k.row * ldo;
    attend(k, m, l, acc);
    if (k.part >= 0) {
      std::copy(m, m + H, acc + H * d);
      std::copy(l, l + H, acc + H * d + H);
    } else {
      for (int64_t h = 0; h < H; ++h)
        for (int64_t c = 0; c < d; ++c) acc[h * d + c] /= l[h];
    }
  }
  for (int64_t i = 0; i < ntasks;) {  // merge: weights exp(m_j - max m) for each range's sum and accumulator
    const AttnTask& first = tasks[i];
    if (first.part < 0) { ++i; continue; }
    int64_t e = i;
    while (e < ntasks && tasks[e].row == first.row) ++e;
    float* o = out + first.row * ldo;
    for (int64_t h = 0; h < H; ++h) {
      float mx = -INFINITY, total = 0.0f;
      for (int64_t j = i; j < e; ++j) mx = std::max(mx, partials[tasks[j].part * H * (d + 2) + H * d + h]);
      std::fill(o + h * d, o + (h + 1) * d, 0.0f);
      for (int64_t j = i; j < e; ++j) {
        const float* p = partials.data() + tasks[j].part * H * (d + 2);
        const float w = std::exp(p[H * d + h] - mx);
        total += w * p[H * d + H + h];
        for (int64_t c = 0; c < d; ++c) o[h * d + c] += w * p[h * d + c];
      }
      for (int64_t c = 0; c < d; ++c) o[h * d + c] /= total;
    }
    i = e;
  }
}

}  // namespace
