// Dense 8-bit attention with SageAttention2-style numerics (non-causal, head_dim 128).
//
// Input: the QKV projection output, bf16, one row per token: row s holds q (H*128 values),
// then k (H*128) then v (H*128); rows are `row_stride` elements apart. Output: bf16 [S, H*128]
// token-major with its own row stride.
//
// Numerics (shared by the CPU reference below and the CUDA kernels):
//  * Sp = S rounded up to 128. Quantized tensors are padded to Sp with zeros; padded keys are
//    masked in the kernel, padded query rows are not written.
//  * Int8 groups (SageAttention2's CUDA quantizer): scale = max(amax, 1e-7) / 127 (stored),
//    inv = 1 / scale, q = round_half_even(x * inv), all fp32 with one rounding per operation.
//    |x * inv| < 127.001 (both roundings), so no saturation is needed.
//  * Q: one scale per (head, group of rows {16w+g, 16w+g+8}), g = 0..7: the two rows an mma
//    thread holds. The stored scale is scale * sm_scale * log2(e) (so scores are in log2 units).
//  * K is smoothed: k - mean_k (per head and channel, over the S tokens). The mean is a fixed-
//    order fp32 sum: per 128-token chunk c, sub[r] = sum_j k[128c + 8j + r] (j ascending),
//    chunk = sum_r sub[r] (r ascending), total = sum_c chunk[c]; mean = total / S.
//    One scale per (head, 128-token block b, group g = (t % 8) / 2): the 32 keys an mma thread
//    meets in the n dimension.
//  * V: per-channel fp8 e4m3: v_scale = amax_over_tokens / 448 (1 when amax == 0),
//    v8 = e4m3_satfinite(v * (1 / v_scale)) (fp32 reciprocal, then fp32 product). Stored transposed
//    [H][128][Sp], tokens permuted inside each group of 16 (see v_slot_of_token) so the P
//    accumulator fragment of the QK mma is, in register order, the A fragment of the PV mma
//    (mma.sync m16n8k32 and wgmma RS alike).
//  * Scores s = int32(q8 . k8) * (q_scale * k_scale). Online softmax in base 2 by KV blocks of
//    kBlockN = 128 keys (one K scale block): m' = max(m, max s), alpha = exp2(m - m'),
//    p = exp2(s - m'), P8 = e4m3(448 p). Block accumulator Ob = sum P8 * V8 in fp32 (fresh per
//    block), O = O*alpha + Ob. Denominator (RowSum): fp32_p (SageAttention2's): l = l*alpha +
//    sum 448 p in fp32; p8 (both GPU kernels: wgmma reads it from the PV product with a column
//    of ones, mma.sync from one more mma against ones): l = l*alpha + sum P8, the same quantized
//    weights as the numerator (measured as accurate or more against fp64: bench/RESULTS.md).
//    Both GPU kernels compute exp2(s - m') with the scores' conversion folded into one FFMA
//    against a constant rounded up: the exponent is lowered by less than 2 (q_scale * k_scale)
//    (the same for every key of a row in a block). The reference models it with RowSum::p8 (the
//    form of both kernels): without it, 1 of 60 random S = 65 cases put the folding alone
//    5.3e-3 from the reference, past the tests' 4e-3 (exact exp2 in both).
//    Output o = O * v_scale / l, rounded to bf16.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/attention_sparse/router.h"

namespace h3rt::attention_sage {

constexpr int kHeadDim = 128;
constexpr int kTokenPad = 128;  // quantized tensors are padded to a multiple of this
constexpr int kQWarpRows = 16;  // rows per Q scale block (8 scales each)
constexpr int kKBlock = 128;    // keys per K scale block (4 scales each)
constexpr int kBlockN = 128;    // keys per softmax / two-level accumulation block
constexpr float kPScale = 448.0f;
constexpr float kLog2e = 1.4426950408889634f;

inline int64_t padded_len(int64_t s) {
  return (s + kTokenPad - 1) / kTokenPad * kTokenPad;
}
inline int64_t q_scales_per_head(int64_t s) {
  return padded_len(s) / kQWarpRows * 8;
}
inline int64_t k_scales_per_head(int64_t s) {
  return padded_len(s) / kKBlock * 4;
}
inline int64_t q_scale_index(int64_t t) {
  return t / kQWarpRows * 8 + t % 8;
}
inline int64_t k_scale_index(int64_t t) {
  return t / kKBlock * 4 + (t % 8) / 2;
}

// Position of token t inside the transposed V row: within each group of 16, token 2q+i (i<2)
// goes to slot 4q+i and token 8+2q+i goes to slot 4q+2+i.
inline int64_t v_slot_of_token(int64_t t) {
  int64_t base = t / 16 * 16, r = t % 16;
  int64_t q = (r % 8) / 2, i = (r % 2) + (r >= 8 ? 2 : 0);
  return base + 4 * q + i;
}

// Int8 quantization with the reciprocal of the group's scale: round half to even of the fp32
// product (the GPU adds 1.5 * 2^23, which rounds the same way); exact same fp32 ops on the GPU.
inline int8_t quantize_int8(float x, float inv_scale) {
  const float r = x * inv_scale;
  return static_cast<int8_t>(std::nearbyint(r));  // default rounding mode: half to even
}
inline float int8_scale(float amax) {
  return (amax > 1e-7f ? amax : 1e-7f) / 127.0f;
}
inline float fp8_v_scale(float amax) {
  return amax > 0.0f ? amax / kPScale : 1.0f;
}

// The quantized tensors the attention kernel consumes (host copies).
struct Quantized {
  int64_t seq = 0, heads = 0, padded = 0;
  std::vector<int8_t> q8;      // [H][Sp][128]
  std::vector<int8_t> k8;      // [H][Sp][128] (smoothed)
  std::vector<uint8_t> v8t;    // [H][128][Sp] e4m3, tokens permuted by v_slot_of_token
  std::vector<float> q_scale;  // [H][Sp/16*8], includes sm_scale*log2(e)
  std::vector<float> k_scale;  // [H][Sp/128*4]
  std::vector<float> v_scale;  // [H][128]
  std::vector<float> k_mean;   // [H][128]
};

// Views of the bf16 QKV rows (raw uint16 bits).
struct QkvView {
  const uint16_t* data = nullptr;
  int64_t seq = 0, heads = 0, row_stride = 0;  // row_stride in elements, >= 3*H*128
};

// Softmax scale times log2(e), computed in fp32 exactly as the CUDA launcher does.
inline float qk_scale_log2(float sm_scale) {
  return sm_scale * kLog2e;
}

// The quantization pre-pass reference (bit-exact contract for the CUDA pre-pass).
Quantized quantize_reference(const QkvView& qkv, float sm_scale);

// What the softmax denominator l sums: the fp32 448 p (SageAttention2), or the e4m3 P8 values
// that also enter the PV product (the row sums a PV product with a column of ones yields). p8 is
// the GPU kernels' form throughout: P8 from the folded exponent as well (header).
enum class RowSum { fp32_p, p8 };

// The Sage attention reference on quantized tensors: fp32 math mirroring the kernel (exact exp2).
// Returns fp32 [S][H*128] (the kernel output before bf16 rounding). With `blocks` (block-sparse
// form, attention_sparse/router.h), each row visits only its tile's listed key blocks, in list
// order, each exactly as the dense loop computes it.
std::vector<float> attention_reference(const Quantized& qz, RowSum row_sum = RowSum::fp32_p,
                                       const attention_sparse::BlockList* blocks = nullptr);

// The dense reference's rows `rows` only (each as attention_reference computes it), [rows][H*128]:
// spot checks at sequence lengths where every row would take minutes.
std::vector<float> attention_reference_rows(const Quantized& qz, const std::vector<int64_t>& rows,
                                            RowSum row_sum);

// Exact attention in fp64 on the bf16 inputs: softmax(q k^T * sm_scale) v, [S][H*128].
std::vector<double> attention_exact_f64(const QkvView& qkv, float sm_scale);

}  // namespace h3rt::attention_sage
