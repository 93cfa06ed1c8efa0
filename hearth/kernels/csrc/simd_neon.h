// The 8-float vector of the neon tier (vf8 = two float32x4_t) and the operations simd_avx2.h defines
// under the same names, so the shared kernels (decode_library.h, attention_pages.h) compile for
// aarch64 unchanged. Baseline aarch64 (Advanced SIMD is part of it); no extension needed here.
#pragma once

#include <arm_neon.h>

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

struct vf8 {
  float32x4_t lo, hi;  // lanes 0-3, 4-7
};

inline vf8 vset1(float x) { return {vdupq_n_f32(x), vdupq_n_f32(x)}; }
inline vf8 vzero() { return vset1(0.0f); }
inline vf8 vadd(vf8 a, vf8 b) { return {vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)}; }
inline vf8 vsub(vf8 a, vf8 b) { return {vsubq_f32(a.lo, b.lo), vsubq_f32(a.hi, b.hi)}; }
inline vf8 vmul(vf8 a, vf8 b) { return {vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi)}; }
inline vf8 vdiv(vf8 a, vf8 b) { return {vdivq_f32(a.lo, b.lo), vdivq_f32(a.hi, b.hi)}; }
inline vf8 vmax(vf8 a, vf8 b) { return {vmaxq_f32(a.lo, b.lo), vmaxq_f32(a.hi, b.hi)}; }
inline vf8 vmin(vf8 a, vf8 b) { return {vminq_f32(a.lo, b.lo), vminq_f32(a.hi, b.hi)}; }
inline vf8 vfma(vf8 a, vf8 b, vf8 c) { return {vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi)}; }
inline vf8 vload(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
inline void vstore(float* p, vf8 v) { vst1q_f32(p, v.lo), vst1q_f32(p + 4, v.hi); }
inline void prefetch_l2(const void* p) { __builtin_prefetch(p, 0, 2); }

inline vf8 load8(const float* p, int64_t n) {  // the first min(n, 8) floats, zeros after
  if (n >= 8) return vload(p);
  float t[8] = {};
  if (n > 0) std::memcpy(t, p, n * sizeof(float));
  return vload(t);
}

inline void store8(float* p, vf8 v, int64_t n) {
  if (n >= 8) return vstore(p, v);
  float t[8];
  vstore(t, v);
  if (n > 0) std::memcpy(p, t, n * sizeof(float));
}

inline uint32x4_t lanes_below(int64_t n, int first) {  // lane i (first + i) < n
  const int32_t idx[4] = {first, first + 1, first + 2, first + 3};
  return vcltq_s32(vld1q_s32(idx), vdupq_n_s32(static_cast<int32_t>(n < 0 ? 0 : n > 8 ? 8 : n)));
}

inline float32x4_t and_mask(float32x4_t v, uint32x4_t m) { return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_f32(v), m)); }

inline vf8 keep_first(vf8 v, int64_t n) { return {and_mask(v.lo, lanes_below(n, 0)), and_mask(v.hi, lanes_below(n, 4))}; }
inline vf8 keep_where_gt(vf8 v, vf8 x, vf8 lim) {
  return {and_mask(v.lo, vcgtq_f32(x.lo, lim.lo)), and_mask(v.hi, vcgtq_f32(x.hi, lim.hi))};
}
inline vf8 max_first(vf8 old, vf8 v, int64_t n) {
  return {vbslq_f32(lanes_below(n, 0), vmaxq_f32(old.lo, v.lo), old.lo), vbslq_f32(lanes_below(n, 4), vmaxq_f32(old.hi, v.hi), old.hi)};
}

// e^x for |x| < 88, simd_avx2.h's exp_ps lane for lane (same constants, same rounding of n)
inline float32x4_t exp4(float32x4_t x) {
  x = vmaxq_f32(vminq_f32(x, vdupq_n_f32(88.0f)), vdupq_n_f32(-87.0f));
  const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504f)));  // nearest, ties even
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
  r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.9875691500e-4f);
  p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
  p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
  p = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), vmulq_f32(p, r), r);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

inline vf8 exp_ps(vf8 x) { return {exp4(x.lo), exp4(x.hi)}; }

inline float hsum(vf8 v) { return vaddvq_f32(vaddq_f32(v.lo, v.hi)); }

inline vf8 sum8(const vf8* v) {  // [sum(v[0]), ..., sum(v[7])]
  float32x4_t s[8];
  for (int i = 0; i < 8; ++i) s[i] = vaddq_f32(v[i].lo, v[i].hi);
  return {vpaddq_f32(vpaddq_f32(s[0], s[1]), vpaddq_f32(s[2], s[3])),
          vpaddq_f32(vpaddq_f32(s[4], s[5]), vpaddq_f32(s[6], s[7]))};
}

template <bool BF16>
inline vf8 load_half(const uint8_t* p) {  // 8 f16 or bf16 values -> f32
  if (BF16) {
    const uint16x8_t h = vld1q_u16(reinterpret_cast<const uint16_t*>(p));
    return {vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)), vreinterpretq_f32_u32(vshll_high_n_u16(h, 16))};
  }
  const float16x8_t h = vld1q_f16(reinterpret_cast<const float16_t*>(p));
  return {vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
}

inline uint16x4_t to_bf16(float32x4_t v) {  // round to nearest even, like torch's .to(torch.bfloat16)
  const uint32x4_t u = vreinterpretq_u32_f32(v);
  const uint32x4_t r = vaddq_u32(vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1)), vdupq_n_u32(0x7FFF));
  return vshrn_n_u32(vaddq_u32(u, r), 16);
}

inline uint16x8_t to_half(vf8 v, bool bf16) {  // 8 values -> f16 or bf16, rounded to nearest even
  if (bf16) return vcombine_u16(to_bf16(v.lo), to_bf16(v.hi));
  return vreinterpretq_u16_f16(vcombine_f16(vcvt_f16_f32(v.lo), vcvt_f16_f32(v.hi)));
}

inline void store_half(uint16_t* p, vf8 v, bool bf16) { vst1q_u16(p, to_half(v, bf16)); }

inline uint16_t half_of(float x, bool bf16) { return vgetq_lane_u16(to_half(vset1(x), bf16), 0); }

}  // namespace
