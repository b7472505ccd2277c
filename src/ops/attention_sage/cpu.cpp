// CPU references for the Sage attention op: the quantization pre-pass (bit-exact contract) and
// the attention numerics in plain fp32; plus exact fp64 attention for accuracy checks.
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <limits>

#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/attention_sage/attention_sage.h"

namespace h3rt::attention_sage {
namespace {

constexpr int kD = kHeadDim;

// Value of q/k/v (part 0/1/2) for token t, head h, channel d as float.
float load(const QkvView& x, int part, int64_t t, int64_t h, int d) {
  return bf16_to_f32(x.data[t * x.row_stride + (part * x.heads + h) * kD + d]);
}

void check_view(const QkvView& x) {
  H3RT_CHECK(x.data != nullptr && x.seq > 0 && x.heads > 0, "attention_sage: empty QKV view");
  H3RT_CHECK(x.row_stride >= 3 * x.heads * kD, "attention_sage: QKV row stride ", x.row_stride,
             " < 3*H*128 = ", 3 * x.heads * kD);
}

// K mean per channel in the documented fixed order.
void k_mean_reference(const QkvView& x, int64_t h, float* mean) {
  int64_t chunks = padded_len(x.seq) / kTokenPad;
  float total[kD] = {};
  for (int64_t c = 0; c < chunks; ++c) {
    for (int d = 0; d < kD; ++d) {
      float chunk = 0.0f;
      for (int r = 0; r < 8; ++r) {
        float sub = 0.0f;
        for (int j = 0; j < 16; ++j) {
          int64_t t = c * kTokenPad + 8 * j + r;
          if (t < x.seq) sub += load(x, 1, t, h, d);
        }
        chunk += sub;
      }
      total[d] += chunk;
    }
  }
  for (int d = 0; d < kD; ++d) mean[d] = total[d] / static_cast<float>(x.seq);
}

void quantize_q(const QkvView& x, float qk_log2, int64_t h, Quantized& z) {
  for (int64_t blk = 0; blk < z.padded / kQWarpRows; ++blk) {
    for (int g = 0; g < 8; ++g) {
      int64_t rows[2] = {blk * kQWarpRows + g, blk * kQWarpRows + g + 8};
      float amax = 0.0f;
      for (int64_t t : rows)
        for (int d = 0; d < kD && t < x.seq; ++d)
          amax = std::max(amax, std::fabs(load(x, 0, t, h, d)));
      const float scale = int8_scale(amax), inv = 1.0f / scale;
      z.q_scale[h * q_scales_per_head(x.seq) + blk * 8 + g] = scale * qk_log2;
      for (int64_t t : rows)
        for (int d = 0; d < kD && t < x.seq; ++d)
          z.q8[(h * z.padded + t) * kD + d] = quantize_int8(load(x, 0, t, h, d), inv);
    }
  }
}

void quantize_k(const QkvView& x, int64_t h, Quantized& z) {
  const float* mean = &z.k_mean[h * kD];
  for (int64_t blk = 0; blk < z.padded / kKBlock; ++blk) {
    for (int g = 0; g < 4; ++g) {
      float amax = 0.0f;
      auto token = [&](int j, int i) { return blk * kKBlock + 8 * j + 2 * g + i; };
      for (int j = 0; j < 16; ++j)
        for (int i = 0; i < 2; ++i)
          for (int d = 0; d < kD && token(j, i) < x.seq; ++d)
            amax = std::max(amax, std::fabs(load(x, 1, token(j, i), h, d) - mean[d]));
      const float scale = int8_scale(amax), inv = 1.0f / scale;
      z.k_scale[h * k_scales_per_head(x.seq) + blk * 4 + g] = scale;
      for (int j = 0; j < 16; ++j)
        for (int i = 0; i < 2; ++i)
          for (int d = 0; d < kD && token(j, i) < x.seq; ++d)
            z.k8[(h * z.padded + token(j, i)) * kD + d] =
                quantize_int8(load(x, 1, token(j, i), h, d) - mean[d], inv);
    }
  }
}

void quantize_v(const QkvView& x, int64_t h, Quantized& z) {
  for (int d = 0; d < kD; ++d) {
    float amax = 0.0f;
    for (int64_t t = 0; t < x.seq; ++t) amax = std::max(amax, std::fabs(load(x, 2, t, h, d)));
    const float scale = fp8_v_scale(amax), inv = 1.0f / scale;
    z.v_scale[h * kD + d] = scale;
    for (int64_t t = 0; t < x.seq; ++t)
      z.v8t[(h * kD + d) * z.padded + v_slot_of_token(t)] =
          f32_to_e4m3_satfinite(load(x, 2, t, h, d) * inv);
  }
}

}  // namespace

Quantized quantize_reference(const QkvView& x, float sm_scale) {
  check_view(x);
  Quantized z;
  z.seq = x.seq;
  z.heads = x.heads;
  z.padded = padded_len(x.seq);
  z.q8.assign(x.heads * z.padded * kD, 0);
  z.k8.assign(x.heads * z.padded * kD, 0);
  z.v8t.assign(x.heads * z.padded * kD, 0);
  z.q_scale.assign(x.heads * q_scales_per_head(x.seq), 0.0f);
  z.k_scale.assign(x.heads * k_scales_per_head(x.seq), 0.0f);
  z.v_scale.assign(x.heads * kD, 0.0f);
  z.k_mean.assign(x.heads * kD, 0.0f);
  float qk_log2 = qk_scale_log2(sm_scale);
  for (int64_t h = 0; h < x.heads; ++h) {
    k_mean_reference(x, h, &z.k_mean[h * kD]);
    quantize_q(x, qk_log2, h, z);
    quantize_k(x, h, z);
    quantize_v(x, h, z);
  }
  return z;
}

namespace {

// The key blocks row r of head h visits: its tile's list, or all of them.
std::vector<int64_t> row_blocks(const Quantized& z, int64_t h, int64_t r,
                                const attention_sparse::BlockList* blocks) {
  std::vector<int64_t> out;
  if (!blocks) {
    for (int64_t b = 0; b * kBlockN < z.seq; ++b) out.push_back(b);
    return out;
  }
  const int64_t t = h * blocks->n_qtiles + r / blocks->q_tile;
  for (int32_t c = 0; c < blocks->count[t]; ++c)
    out.push_back(blocks->index[t * blocks->n_kblocks + c]);
  return out;
}

// fma(a, b, c) rounded toward +infinity (the kernels' __fmaf_ru). The operands pass through
// volatiles so the product is computed between the two rounding-mode switches.
float fma_round_up(float a, float b, float c) {
  const int mode = std::fegetround();
  std::fesetround(FE_UPWARD);
  volatile float va = a, vb = b, vc = c;
  volatile float r = std::fma(va, vb, vc);
  std::fesetround(mode);
  return r;
}

// 448 p as both GPU kernels compute it: B = 1.5 * 2^23 + acc (exact: |acc| < 2^22), C =
// 1.5 * 2^23 dq + m - log2(448) rounded up, 448 p = exp2(fma(B, dq, -C)) (exact exp2 here; the
// kernels' ex2.approx differs by a few ulp).
float folded_p448(int32_t acc, float dq, float m) {
  constexpr float kMagic = 12582912.0f;              // 1.5 * 2^23
  constexpr float kLog2PScale = 8.807354922057604f;  // log2(448)
  const float b = kMagic + static_cast<float>(acc);  // exact
  const float c = fma_round_up(kMagic, dq, m - kLog2PScale);
  return std::exp2(std::fma(b, dq, -c));
}

// One query row of one head through the blocked online softmax with fp8 P and fp8 V.
void attention_row(const Quantized& z, int64_t h, int64_t r, RowSum row_sum,
                   const attention_sparse::BlockList* blocks, float* out) {
  const int64_t S = z.seq, Sp = z.padded;
  const int8_t* q = &z.q8[(h * Sp + r) * kD];
  float qs = z.q_scale[h * q_scales_per_head(S) + q_scale_index(r)];
  float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
  std::vector<float> o(kD, 0.0f), ob(kD), s(kBlockN), dq(kBlockN);
  std::vector<int32_t> acc(kBlockN);
  for (int64_t b : row_blocks(z, h, r, blocks)) {
    const int64_t k0 = b * kBlockN, n = std::min<int64_t>(kBlockN, S - k0);
    float mb = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      const int8_t* k = &z.k8[(h * Sp + k0 + j) * kD];
      acc[j] = 0;
      for (int d = 0; d < kD; ++d) acc[j] += int32_t(q[d]) * int32_t(k[d]);
      float ks = z.k_scale[h * k_scales_per_head(S) + k_scale_index(k0 + j)];
      dq[j] = qs * ks;
      s[j] = static_cast<float>(acc[j]) * dq[j];
      mb = std::max(mb, s[j]);
    }
    float m_new = std::max(m, mb);
    float alpha = std::exp2(m - m_new);
    std::fill(ob.begin(), ob.end(), 0.0f);
    float sum = 0.0f;  // of 448 p, or of P8
    for (int64_t j = 0; j < n; ++j) {
      float p = std::exp2(s[j] - m_new);
      // p8: the GPU kernels' folded exponent, 448 p = exp2(B dq - C) (folded_p448).
      float p8 = e4m3_to_f32(f32_to_e4m3_satfinite(
          row_sum == RowSum::p8 ? folded_p448(acc[j], dq[j], m_new) : p * kPScale));
      sum += row_sum == RowSum::p8 ? p8 : p * kPScale;
      if (p8 == 0.0f) continue;
      const uint8_t* vcol = &z.v8t[h * kD * Sp + v_slot_of_token(k0 + j)];
      for (int d = 0; d < kD; ++d) ob[d] += p8 * e4m3_to_f32(vcol[d * Sp]);
    }
    l = l * alpha + sum;
    for (int d = 0; d < kD; ++d) o[d] = o[d] * alpha + ob[d];
    m = m_new;
  }
  for (int d = 0; d < kD; ++d) out[d] = o[d] * (z.v_scale[h * kD + d] / l);
}

}  // namespace

std::vector<float> attention_reference(const Quantized& z, RowSum row_sum,
                                       const attention_sparse::BlockList* blocks) {
  H3RT_CHECK(z.seq > 0 && z.heads > 0, "attention_reference: empty quantized tensors");
  if (blocks)
    H3RT_CHECK(blocks->heads == z.heads && blocks->q_tile > 0 &&
                   blocks->n_qtiles == (z.seq + blocks->q_tile - 1) / blocks->q_tile &&
                   blocks->n_kblocks == (z.seq + kBlockN - 1) / kBlockN,
               "attention_reference: block lists of ", blocks->heads, " heads x ", blocks->n_qtiles,
               " tiles x ", blocks->n_kblocks, " key blocks do not fit S = ", z.seq,
               ", H = ", z.heads);
  std::vector<float> out(z.seq * z.heads * kD);
  for (int64_t h = 0; h < z.heads; ++h)
    for (int64_t r = 0; r < z.seq; ++r)
      attention_row(z, h, r, row_sum, blocks, &out[(r * z.heads + h) * kD]);
  return out;
}

std::vector<float> attention_reference_rows(const Quantized& z, const std::vector<int64_t>& rows,
                                            RowSum row_sum) {
  H3RT_CHECK(z.seq > 0 && z.heads > 0, "attention_reference_rows: empty quantized tensors");
  std::vector<float> out(rows.size() * z.heads * kD);
  for (size_t i = 0; i < rows.size(); ++i) {
    H3RT_CHECK(rows[i] >= 0 && rows[i] < z.seq, "attention_reference_rows: row ", rows[i],
               " outside S = ", z.seq);
    for (int64_t h = 0; h < z.heads; ++h)
      attention_row(z, h, rows[i], row_sum, nullptr, &out[(i * z.heads + h) * kD]);
  }
  return out;
}

std::vector<double> attention_exact_f64(const QkvView& x, float sm_scale) {
  check_view(x);
  const int64_t S = x.seq, H = x.heads;
  std::vector<double> out(S * H * kD, 0.0);
  std::vector<double> s(S), k(S * kD), v(S * kD), q(kD);
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t t = 0; t < S; ++t)
      for (int d = 0; d < kD; ++d) {
        k[t * kD + d] = load(x, 1, t, h, d);
        v[t * kD + d] = load(x, 2, t, h, d);
      }
    for (int64_t r = 0; r < S; ++r) {
      for (int d = 0; d < kD; ++d) q[d] = load(x, 0, r, h, d);
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t t = 0; t < S; ++t) {
        double acc = 0.0;
        for (int d = 0; d < kD; ++d) acc += q[d] * k[t * kD + d];
        s[t] = acc * sm_scale;
        mx = std::max(mx, s[t]);
      }
      double sum = 0.0;
      double* o = &out[(r * H + h) * kD];
      for (int64_t t = 0; t < S; ++t) {
        double p = std::exp(s[t] - mx);
        sum += p;
        for (int d = 0; d < kD; ++d) o[d] += p * v[t * kD + d];
      }
      for (int d = 0; d < kD; ++d) o[d] /= sum;
    }
  }
  return out;
}

}  // namespace h3rt::attention_sage
