// Decoders of quantized KV blocks (hearth/kvstore: fp8.py, ggml.py, kvarn.py) and f16 staging blocks:
// rows of one block and kv head -> f32, with the torch decode's exact operations and order (products
// and sums rounded one by one; the build keeps -ffp-contract=off), so both paths see the same K/V.
// Used by kv_quant.h.
#pragma once

#include <cstdint>

#include "attention.h"

namespace {

// Block formats of one part (K or V); ids shared with hearth.kernels.native.KVQ_FORMATS
enum KvqFormat { KVQ_F16 = 0, KVQ_FP8 = 1, KVQ_Q8_0 = 2, KVQ_Q4_0 = 3, KVQ_KVARN_K4 = 4, KVQ_KVARN_V2 = 5,
                 KVQ_KVARN_V4 = 6 };

struct KvqLayout {
  int64_t bs, kvh, d;
  int64_t row(int64_t b, int64_t t, int64_t g) const { return (b * bs + t) * kvh + g; }  // [nb, bs, kvh] index
};

struct Fields {
  const uint8_t* f[4];  // a codec's fields in its order (hearth/kvstore: fp8.py, ggml.py, kvarn.py), each [nb, ...]
};

// rows t0 .. t0 + r of block b, kv head g -> out [r][16 * DV] f32
using DecodeRows = void (*)(const Fields&, const KvqLayout&, int64_t b, int64_t g, int64_t t0, int r, float* out);

inline float half_at(const uint8_t* p, int64_t i) { return _cvtsh_ss(reinterpret_cast<const uint16_t*>(p)[i]); }

inline __m512 i8x16(const uint8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}

inline void nibbles32(const uint8_t* p, __m512& a, __m512& b) {  // 16 bytes -> 32 codes, low nibble first (kvarn.pack)
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), m = _mm_set1_epi8(15);
  const __m128i lo = _mm_and_si128(x, m), hi = _mm_and_si128(_mm_srli_epi16(x, 4), m);
  a = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)));
  b = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi8(lo, hi)));
}

inline __m512 crumbs16(const uint8_t* p) {  // 4 bytes -> 16 2-bit codes, low bits first
  const __m512i shifts = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i w = _mm512_set1_epi32(*reinterpret_cast<const int32_t*>(p));
  return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srlv_epi32(w, shifts), _mm512_set1_epi32(3)));
}

// f16 rows: f[0] is the block's plane [bs, kvh, d] (a staging slot or a block sealed this step); b unused
template <int DV>
void dec_f16(const Fields& F, const KvqLayout& L, int64_t, int64_t g, int64_t t0, int r, float* out) {
  const uint8_t* p = F.f[0] + (t0 * L.kvh + g) * L.d * 2;
  for (int j = 0; j < r; ++j, p += L.kvh * L.d * 2)
    for (int c = 0; c < DV; ++c) _mm512_store_ps(out + (j * DV + c) * 16, load_half<false>(p + 32 * c));
}

// fp8 e4m3 values [nb, bs, kvh, d], scale [nb, kvh] f32. e4m3 bits s.eeee.mmm placed as f16 s.0eeee.mmm0000000
// are the value / 256 (normal and subnormal alike), so value * scale = f16 * (256 * scale), exactly.
template <int DV>
void dec_fp8(const Fields& F, const KvqLayout& L, int64_t b, int64_t g, int64_t t0, int r, float* out) {
  const __m512 s = _mm512_set1_ps(reinterpret_cast<const float*>(F.f[1])[b * L.kvh + g] * 256.0f);
  const __m256i keep = _mm256_set1_epi16(static_cast<int16_t>(0xBFFF));
  for (int j = 0; j < r; ++j) {
    const uint8_t* p = F.f[0] + L.row(b, t0 + j, g) * L.d;
    for (int c = 0; c < DV; ++c) {
      const __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * c)));
      const __m256i h = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(w, 8), 1), keep);
      _mm512_store_ps(out + (j * DV + c) * 16, _mm512_mul_ps(_mm512_cvtph_ps(h), s));
    }
  }
}

// q8_0 / q4_0 raw [nb, bs, kvh, d / 32, 34 or 18]: ggml blocks of f16 d + codes (q * d; (q - 8) * d)
template <int DV, bool Q4>
void dec_ggml(const Fields& F, const KvqLayout& L, int64_t b, int64_t g, int64_t t0, int r, float* out) {
  constexpr int64_t BB = Q4 ? 18 : 34;
  for (int j = 0; j < r; ++j) {
    const uint8_t* p = F.f[0] + L.row(b, t0 + j, g) * (L.d / 32) * BB;
    for (int c = 0; c < DV; c += 2, p += BB) {
      const __m512 d = _mm512_set1_ps(half_at(p, 0));
      __m512 lo, hi;
      if (Q4) {
        const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2)));
        const __m512 eight = _mm512_set1_ps(8.0f);
        lo = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(15))), eight);
        hi = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(q, 4)), eight);
      } else {
        lo = i8x16(p + 2);
        hi = i8x16(p + 18);
      }
      _mm512_store_ps(out + (j * DV + c) * 16, _mm512_mul_ps(lo, d));
      _mm512_store_ps(out + (j * DV + c + 1) * 16, _mm512_mul_ps(hi, d));
    }
  }
}

// KVarN keys: codes [nb, bs, kvh, d / 2] (4-bit), scale and zero [nb, kvh, d] f16 per channel,
// token_scale [nb, bs, kvh] f16: k = (code * scale + zero) * token_scale (kvarn.KVarNKeys.decode's order)
template <int DV>
void dec_kvarn_k(const Fields& F, const KvqLayout& L, int64_t b, int64_t g, int64_t t0, int r, float* out) {
  const int64_t ch = (b * L.kvh + g) * L.d;
  __m512 sc[DV], zr[DV];
  for (int c = 0; c < DV; ++c) {
    sc[c] = load_half<false>(F.f[1] + (ch + 16 * c) * 2);
    zr[c] = load_half<false>(F.f[2] + (ch + 16 * c) * 2);
  }
  for (int j = 0; j < r; ++j) {
    const int64_t row = L.row(b, t0 + j, g);
    const uint8_t* p = F.f[0] + row * L.d / 2;
    const __m512 tok = _mm512_set1_ps(half_at(F.f[3], row));
    for (int c = 0; c < DV; c += 2) {  // DV is even: KVarN's head_dim is a power of two >= 32
      __m512 q[2];
      nibbles32(p + 8 * c, q[0], q[1]);
      for (int i = 0; i < 2; ++i)
        _mm512_store_ps(out + (j * DV + c + i) * 16,
                        _mm512_mul_ps(_mm512_add_ps(_mm512_mul_ps(q[i], sc[c + i]), zr[c + i]), tok));
    }
  }
}

// KVarN values: codes [nb, bs, kvh, d * BITS / 8], scale and zero [nb, bs, kvh] f16 per token,
// channel_scale [nb, kvh, d] f16: v = (code * scale + zero) * channel_scale (kvarn.KVarNValues.decode's order)
template <int DV, int BITS>
void dec_kvarn_v(const Fields& F, const KvqLayout& L, int64_t b, int64_t g, int64_t t0, int r, float* out) {
  const int64_t ch = (b * L.kvh + g) * L.d;
  __m512 cs[DV];
  for (int c = 0; c < DV; ++c) cs[c] = load_half<false>(F.f[3] + (ch + 16 * c) * 2);
  for (int j = 0; j < r; ++j) {
    const int64_t row = L.row(b, t0 + j, g);
    const uint8_t* p = F.f[0] + row * L.d * BITS / 8;
    const __m512 s = _mm512_set1_ps(half_at(F.f[1], row)), z = _mm512_set1_ps(half_at(F.f[2], row));
    for (int c = 0; c < DV; c += 2) {
      __m512 q[2];
      if (BITS == 4) {
        nibbles32(p + 8 * c, q[0], q[1]);
      } else {
        q[0] = crumbs16(p + 4 * c);
        q[1] = crumbs16(p + 4 * c + 4);
      }
      for (int i = 0; i < 2; ++i)
        _mm512_store_ps(out + (j * DV + c + i) * 16,
                        _mm512_mul_ps(_mm512_add_ps(_mm512_mul_ps(q[i], s), z), cs[c + i]));
    }
  }
}

template <int DV>
DecodeRows pick_decoder(int fmt) {
  switch (fmt) {
    case KVQ_F16: return dec_f16<DV>;
    case KVQ_FP8: return dec_fp8<DV>;
    case KVQ_Q8_0: return DV % 2 ? nullptr : dec_ggml<DV, false>;
    case KVQ_Q4_0: return DV % 2 ? nullptr : dec_ggml<DV, true>;
    case KVQ_KVARN_K4: return DV % 2 ? nullptr : dec_kvarn_k<DV>;
    case KVQ_KVARN_V2: return DV % 2 ? nullptr : dec_kvarn_v<DV, 2>;
    case KVQ_KVARN_V4: return DV % 2 ? nullptr : dec_kvarn_v<DV, 4>;
    default: return nullptr;
  }
}

}  // namespace
