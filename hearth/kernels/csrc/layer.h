// What hk_layer_new keeps of a decoder layer: its linear plans, norms, epsilons and shapes. One struct
// for the AVX-512 library (fused_layer.h) and the decode tiers (decode_library.h: avx2, neon), each
// with its own hk_layer_new (their kernels' limits on d and heads differ). Included after the
// library's Plan.
#pragma once

#include <cstdint>

struct Layer {
  const Plan *qkv, *o, *gate_up, *down;  // q|k|v, the output projection, gate|up, down
  const float *attn_norm, *bias, *qk_norm, *post_attn_norm, *ffn_norm, *post_ffn_norm;  // null: none
  float attn_eps, qk_eps, post_attn_eps, ffn_eps, post_ffn_eps, scale, softcap;
  int act, neox;
  int64_t heads, kvh, d, rot, window;
  int64_t qk_whole;  // q heads of a q/k norm over each whole projection (olmo2: hk_layer_qk_whole); 0: per head
};
