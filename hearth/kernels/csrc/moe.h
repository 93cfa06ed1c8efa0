// hk_moe: the routed experts of a mixture-of-experts block (hearth.models.moe) in one call, over the
// stacked GGUF tensors as they lie in the file: a plan per stacked matrix, expert e's matrix its rows
// e * rows .. (e + 1) * rows (blk.N.ffn_{gate,up,down}_exps.weight are [n_expert, rows, K], experts
// outermost), so no per-expert plan or Python object exists.
//
// One definition for every kernel library (gguf_kernels.cpp, and the decode tiers through
// decode_library.h): it uses only what each provides under the same names (Plan, Part, matmul, act_mul,
// scratch), so each includes this once, after them, outside its own anonymous namespace.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace {

thread_local std::vector<float> moe_x, moe_mid, moe_y;
thread_local std::vector<int64_t> moe_slots;
thread_local std::vector<float> moe_w;

// Part i of a stacked plan, restricted to expert e's `rows` rows, its outputs from column out_col
Part expert_part(const Plan& stacked, size_t i, int64_t e, int64_t rows, int64_t out_col) {
  Part q = stacked.parts[i];
  q.w += e * rows * q.row_bytes;
  q.rows = rows;
  q.out_col = out_col;
  return q;
}

// A plan over some experts' parts: the stacked plan's activation layouts and limits (the same types)
Plan experts_plan(const Plan& stacked, const std::vector<Part>& parts) {
  Plan p = stacked;
  p.parts = parts;
  p.N = 0;
  p.bytes = 0;
  for (const Part& q : p.parts) {
    p.N += q.rows;
    p.bytes += static_cast<double>(q.rows) * q.row_bytes;
  }
  return p;
}

// gate | up of experts es[0..], each [2 * inter] side by side: one plan, so one matmul (one parallel
// region for all of them, the weights split over the threads) where every expert sees the same rows
Plan gate_up_plan(const Plan& gu, const int64_t* es, int64_t n, int64_t inter) {
  std::vector<Part> parts;
  for (int64_t j = 0; j < n; ++j) {
    parts.push_back(expert_part(gu, 0, es[j], inter, 2 * inter * j));
    parts.push_back(expert_part(gu, 1, es[j], inter, 2 * inter * j + inter));
  }
  return experts_plan(gu, parts);
}

// out[m] += w * y: the reference's y.mul_(w) then index_add_ (two roundings, as torch)
void add_scaled(const float* y, float w, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] += y[i] * w;
}

// One row (a decode row): its k experts' gate | up in one matmul, then each down, scaled into out in
// ascending expert order (the order forward's scatter sums them)
bool moe_row(const Plan& gu, const Plan& dn, int64_t inter, int64_t hidden, int act, const float* x, const int64_t* ids,
             const float* wts, int64_t k, float* out) {
  std::vector<std::pair<int64_t, float>> order(k);
  for (int64_t j = 0; j < k; ++j) order[j] = {ids[j], wts[j]};
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int64_t> es(k);
  for (int64_t j = 0; j < k; ++j) es[j] = order[j].first;
  float* g = scratch(moe_mid, k * 2 * inter);  // [k, gate | up]
  float* y = scratch(moe_y, hidden);
  const Plan all = gate_up_plan(gu, es.data(), k, inter);
  if (!matmul(all, x, 1, gu.K, g, k * 2 * inter)) return false;  // one row: its stride unused
  for (int64_t j = 0; j < k; ++j) {
    float* gj = g + j * 2 * inter;
    act_mul(act, gj, gj + inter, inter, gj);
    if (!matmul(experts_plan(dn, {expert_part(dn, 0, es[j], hidden, 0)}), gj, 1, inter, y, hidden)) return false;
    add_scaled(y, order[j].second, hidden, out);
  }
  return true;
}

// Several rows: the (row, slot) pairs grouped by expert (a counting sort, rows ascending within an
// expert), then per expert its rows gathered and one matmul each for gate | up and down (the GEMV,
// batch GEMMs or prefill GEMMs by its row count), scaled into their rows of out
bool moe_rows(const Plan& gu, const Plan& dn, int64_t E, int act, const float* x, int64_t M, int64_t ldx,
              const int64_t* ids, const float* wts, int64_t k, float* out, int64_t ldo) {
  const int64_t inter = gu.parts[0].rows / E, hidden = dn.parts[0].rows / E, K = gu.K;
  std::vector<int64_t> start(E + 1, 0);
  for (int64_t i = 0; i < M * k; ++i) ++start[ids[i] + 1];
  for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
  int64_t* rows = scratch(moe_slots, M * k);
  float* w = scratch(moe_w, M * k);
  std::vector<int64_t> at(start.begin(), start.end() - 1);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = ids[m * k + j];
      rows[at[e]] = m;
      w[at[e]++] = wts[m * k + j];
    }
  for (int64_t e = 0; e < E; ++e) {
    const int64_t c = start[e + 1] - start[e], s0 = start[e];
    if (!c) continue;
    float* xe = scratch(moe_x, c * K);
    for (int64_t i = 0; i < c; ++i) std::copy(x + rows[s0 + i] * ldx, x + rows[s0 + i] * ldx + K, xe + i * K);
    float* g = scratch(moe_mid, c * 2 * inter);
    float* y = scratch(moe_y, c * hidden);
    if (!matmul(gate_up_plan(gu, &e, 1, inter), xe, c, K, g, 2 * inter)) return false;
    for (int64_t i = 0; i < c; ++i) {
      float* gi = g + i * 2 * inter;
      act_mul(act, gi, gi + inter, inter, gi);
    }
    if (!matmul(experts_plan(dn, {expert_part(dn, 0, e, hidden, 0)}), g, c, 2 * inter, y, hidden)) return false;
    for (int64_t i = 0; i < c; ++i) add_scaled(y + i * hidden, w[s0 + i], hidden, out + rows[s0 + i] * ldo);
  }
  return true;
}

}  // namespace

extern "C" {

// The routed experts of a MoE block: out[M, hidden] (row stride ldo) = sum over j of
// wts[m, j] * down_e(act(gate_e(x[m])) * up_e(x[m])), e = ids[m, j], summed in ascending e.
// gate_up: a plan over the stacked gate and up tensors (two parts, [E * inter, hidden] each); down:
// over the stacked down tensor ([E * hidden, inter]); x: f32 [M, hidden] (row stride ldx); ids: int64
// [M, k], wts: f32 [M, k]. Returns 0; -1 for plans of another shape or an unknown type; -2 for an id
// outside [0, E) (out untouched then).
int hk_moe(const void* gate_up, const void* down, int64_t E, int act, const float* x, int64_t M, int64_t ldx,
           const int64_t* ids, const float* wts, int64_t k, float* out, int64_t ldo) {
  const Plan& gu = *static_cast<const Plan*>(gate_up);
  const Plan& dn = *static_cast<const Plan*>(down);
  if (E <= 0 || gu.parts.size() != 2 || dn.parts.size() != 1 || gu.parts[0].rows != gu.parts[1].rows ||
      gu.parts[0].rows % E || dn.parts[0].rows % E || dn.K != gu.parts[0].rows / E)
    return -1;
  for (int64_t i = 0; i < M * k; ++i)
    if (ids[i] < 0 || ids[i] >= E) return -2;
  const int64_t inter = gu.parts[0].rows / E, hidden = dn.parts[0].rows / E;
  for (int64_t m = 0; m < M; ++m) std::fill(out + m * ldo, out + m * ldo + hidden, 0.0f);
  if (M == 1) return moe_row(gu, dn, inter, hidden, act, x, ids, wts, k, out) ? 0 : -1;  // a decode row: no gather
  return moe_rows(gu, dn, E, act, x, M, ldx, ids, wts, k, out, ldo) ? 0 : -1;
}

}  // extern "C"
