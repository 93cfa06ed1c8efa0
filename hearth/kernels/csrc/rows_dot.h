// The GEMV's row loop, the same for every kernel library: included by each library's GEMV header
// (gemv_vnni.h, gemv_avx2.h, blocks_neon.h) after its own Act and dot_row<T, MT> (the ISA-specific
// parts), so one copy serves them all.
#pragma once

constexpr int64_t PREFETCH_BYTES = 4096;
constexpr int64_t STREAMS = 4;
// Rows this long are read as 2 runs, not STREAMS: the 1.5B's down (K = 8960: 5040-byte Q4_K and
// 7350-byte Q6_K rows) streamed from DRAM at 13.5-13.9 GB/s in 4 runs, 14.6-15.5 in 2 (Zen 4, one
// thread, all 28 layers: 0.88-0.94x the time at 1 row, 0.93x at 2, same at 4; avx2 0.87-0.94x at 1),
// while the 864-byte rows of gate|up lose in 2 (21 -> 17 GB/s) and the 0.5B's 2736-3990-byte down
// rows neither gain nor lose. Where rows_dot prefetches (Intel) it keeps STREAMS: not measured there
constexpr int64_t LONG_ROW_BYTES = 4096;
// From this many activation rows on (a verify step's), rows of any length are read as 2 runs where
// rows_dot does not prefetch (AMD), not STREAMS: there the GEMV computes more than it reads, and 4 runs
// cost it time (Zen 4, one thread, rows summed as a verify step's: the 1.5B's head 0.74-0.90x the time
// at 2-16 rows, gate|up 0.87-0.96x; whole verify steps of 2-16 rows 0.87-0.98x; avx2 alike, head
// 0.73x at 4 rows). At 1 row 4 runs stay faster (a synthetic 19,000-row Q6_K
// head 1.15-1.4x the time in 2)
constexpr int64_t MULTI_ROW_RUNS_FROM = 2;
// Activation codes (rows x Kp bytes, their d16 and a16 half as much again) up to which a call of more
// rows than a pair's pass holds, but no more than GEMV_ROWS, takes one weight row at a time in one
// pass: its codes decoded once, the activations read from L1 for each weight row. Zen 4 (avx512: pairs
// of 4 rows, passes of 8), one thread, rows summed as a verify step's: the 1.5B's q|k|v and o at 5-8
// rows 0.72-0.84x the time of two passes of pairs, gate|up 0.79-0.98x, the head 0.90-0.99x; its down
// (K = 8960: 72 KB of activations at 8 rows, from L2 for each weight row) 1.1-1.3x, so it keeps pairs
constexpr int64_t ONE_PASS_CODES = 16384;

// Whether rows_dot prefetches in software: on Intel (Sapphire Rapids) one core streaming from DRAM was
// latency-bound and the prefetches took gemma3's head 17 -> 20-22 GB/s; on AMD (Zen 4, 2026-12-05)
// the core stalls on them instead (perf, one thread: ~35% of the GEMV's samples on the prefetch loop)
// and its own prefetchers do better: one-thread CPU time of a Qwen2.5-Coder-1.5B decode step 0.79x
// without them (docs/performance.md)
inline bool software_prefetch() {
#if defined(__x86_64__)
  static const bool on = [] {
    __builtin_cpu_init();
    return !__builtin_cpu_is("amd");
  }();
  return on;
#else
  return true;
#endif
}

// y[m * ldy] for activation rows m0 .. a.M and one weight row: GEMV_ROWS rows (the library's, as many
// as its registers hold) per decode of its codes, the rest in one pass of fewer
template <class T, int MT = GEMV_ROWS>
void dot_rows(const uint8_t* row, int64_t nb, const Act& a, int64_t m0, float* y, int64_t ldy) {
  int64_t m = m0;
  for (; m + MT <= a.M; m += MT) dot_row<T, MT>(row, nb, a, m, y, ldy);
  if constexpr (MT > 1)
    if (m < a.M) dot_rows<T, MT - 1>(row, nb, a, m, y, ldy);
}

// The same for two weight rows (row, row + wstep -> y[m * ldy], y[m * ldy + ystep]): GEMV_PAIR_ROWS
// activation rows per pass, the rest in one pass of fewer (0: one weight row after the other). rows_dot
// takes it up to GEMV_PAIR_UPTO activation rows
template <class T, int MT = GEMV_PAIR_ROWS>
void dot_rows_pair(const uint8_t* row, int64_t wstep, int64_t nb, const Act& a, int64_t m0, float* y, int64_t ldy,
                   int64_t ystep) {
  if constexpr (MT == 0) {
    dot_rows<T>(row, nb, a, m0, y, ldy);
    dot_rows<T>(row + wstep, nb, a, m0, y + ystep, ldy);
  } else {
    int64_t m = m0;
    for (; m + MT <= a.M; m += MT) dot_row<T, MT, 2>(row, nb, a, m, y, ldy, wstep, ystep);
    if (m < a.M) dot_rows_pair<T, MT - 1>(row, wstep, nb, a, m, y, ldy, ystep);
  }
}

// y[m, n] for rows n0 .. n1 of w. The rows are read as STREAMS (at least 2) interleaved runs (row i of
// each run in turn): one core reading one run from DRAM peaked at ~22 GB/s for two cores, four at ~29
// (gemma3's 178 MB head at M = 1: 9.5 -> 6.3 ms). Runs 2k and 2k + 1 go in pairs (dot_rows_pair):
// each run's rows stay in ascending order, as the hardware prefetchers follow them (two adjacent rows
// in one pass, their superblocks alternating, took the 1.5B's head from DRAM 24 -> 7 GB/s on Zen 4)
template <class T>
void rows_dot(const uint8_t* w, int64_t row_bytes, int64_t n0, int64_t n1, int64_t nb, const Act& a,
              float* y, int64_t ldy) {
  // a library's wide passes (a verify step's rows: the AVX-512 library's gemv_wide.h) did the pairs
  // (n, n + len); an odd count's last row has none
  if (rows_dot_wide<T>(w, row_bytes, n0, n1, nb, a, y, ldy)) {
    const int64_t last = n0 + (n1 - n0 + 1) / 2 - 1;
    if ((n1 - n0) % 2) dot_rows<T>(w + last * row_bytes, nb, a, 0, y + last, ldy);
    return;
  }
  const bool prefetch = software_prefetch();
  // 2 runs also where rows are computed more than read (several activation rows: a verify step)
  const int64_t streams = (row_bytes >= LONG_ROW_BYTES || a.M >= MULTI_ROW_RUNS_FROM) && !prefetch ? 2 : STREAMS;  // Intel (prefetching): untested
  const int64_t runs = n1 - n0 >= 16 * streams ? streams : 2, len = (n1 - n0 + runs - 1) / runs, half = runs / 2;
  const bool one_pass = a.M > GEMV_PAIR_ROWS && a.M <= GEMV_ROWS && a.M * a.Kp <= ONE_PASS_CODES;
  for (int64_t i = 0; i < len * half; ++i) {
    const int64_t n = n0 + 2 * (i % half) * len + i / half;
    if (n >= n1) continue;
    const uint8_t* row = w + n * row_bytes;
    // software prefetch PREFETCH_BYTES ahead, into L2: one core streaming from DRAM was latency-bound
    // (into L1 the prefetches hold the line-fill buffers: gemma3's 178 MB head 17 -> 20-22 GB/s)
    if (prefetch)
      for (int64_t r = 0; r < 2 && n + r * len < n1; ++r)
        for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(row + r * len * row_bytes + PREFETCH_BYTES + b, 0, 2);  // prefetcht1 on x86
    if (n + len >= n1)
      dot_rows<T>(row, nb, a, 0, y + n, ldy);
    else if (a.M <= GEMV_PAIR_UPTO && !one_pass)
      dot_rows_pair<T>(row, len * row_bytes, nb, a, 0, y + n, ldy, len);
    else
      dot_rows_pair<T, 0>(row, len * row_bytes, nb, a, 0, y + n, ldy, len);
  }
}
