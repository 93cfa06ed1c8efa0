// hk_stack_forward: hk_layer_forward through a stack of n layers in one call, a decode step (or a few
// rows) without a return to Python between layers (55-80 us a layer on this VM, 2026-12-05: Python's
// calls and checks, and the next layer's first ops from warm caches). Layer i with cos[i], sin[i] and
// its cache kv[i] (every cache of one dtype and shape: the step's arguments are shared). Returns the
// number of layers run: fewer than n where a layer's attention refused the shape (x as that layer
// found it; the caller goes on from there).
//
// One definition for every kernel library: each (gguf_kernels.cpp, and the decode-tier ones through
// decode_library.h) is its own shared object with its own hk_layer_forward, so each includes this
// once, after that function, outside its extern "C" block.
#pragma once

#include <cstdint>

extern "C" {

int hk_layer_forward(const void* layer, float* x, int64_t M, const float* cos, const float* sin, void* kv, int kv_bf16,
                     int64_t num_slots, int64_t bs, const int64_t* slots, int64_t S, const int64_t* q_start,
                     const int64_t* q_len, const int64_t* seq_lens, const int64_t* tables, int64_t ldt,
                     const int64_t* tree, int64_t ldtree);

int hk_stack_forward(const void* const* layers, int n, float* x, int64_t M, const float* const* cos,
                     const float* const* sin, void* const* kv, int kv_bf16, int64_t num_slots, int64_t bs,
                     const int64_t* slots, int64_t S, const int64_t* q_start, const int64_t* q_len,
                     const int64_t* seq_lens, const int64_t* tables, int64_t ldt, const int64_t* tree, int64_t ldtree) {
  for (int i = 0; i < n; ++i)
    if (hk_layer_forward(layers[i], x, M, cos[i], sin[i], kv[i], kv_bf16, num_slots, bs, slots, S, q_start, q_len,
                         seq_lens, tables, ldt, tree, ldtree) != 0)
      return i;
  return n;
}

}  // extern "C"
