// linear_nvfp4_cpu: the plain host reference of linear_nvfp4 (see linear_nvfp4.h).
//
// Both operands are dequantized without their global scales (e2m1(q) * float(s), exact in
// float32), every dot product accumulates in double, then alpha (the fp32 product of the global
// scales) and the bias are applied in double and the result is rounded once to float32 and, for
// the bf16 output, once more to bf16: what an exact-product GEMM with float32 accumulation and a
// bias epilogue writes, with the accumulation error removed.
#include <vector>

#include "formats/nvfp4_layout.h"
#include "h3rt/check.h"
#include "h3rt/formats.h"
#include "ops/linear_nvfp4/linear_nvfp4.h"

namespace h3rt::ops {
namespace {

// Row r of an NVFP4 matrix [rows, cols] without its global scale.
void dequant_row(const uint8_t* q, const uint8_t* scales, int64_t r, int64_t cols, float* out) {
  const int64_t kb = cols / nvfp4::kBlock;
  const uint8_t* qr = q + r * (cols / 2);
  for (int64_t c = 0; c < cols; ++c) {
    const uint8_t byte = qr[c / 2];
    const uint8_t code = (c % 2 == 0) ? byte >> 4 : byte & 0xf;  // element 2j: high nibble
    out[c] = e2m1_to_f32(code) * e4m3_to_f32(scales[nvfp4::scale_offset(r, c / nvfp4::kBlock, kb)]);
  }
}

}  // namespace

void linear_nvfp4_cpu(const LinearNvfp4CpuParams& p) {
  H3RT_CHECK(p.rows >= 0 && p.in > 0 && p.out > 0, "linear_nvfp4_cpu: bad dims rows=", p.rows,
             " in=", p.in, " out=", p.out);
  H3RT_CHECK(p.in % nvfp4::kBlock == 0, "linear_nvfp4_cpu: in (", p.in,
             ") must be a multiple of 16 (NVFP4 block)");
  H3RT_CHECK(p.w_q && p.w_scales, "linear_nvfp4_cpu: w_q and w_scales are required");
  H3RT_CHECK(p.a_q ? p.a_scales != nullptr : p.a != nullptr,
             "linear_nvfp4_cpu: activations need a_q + a_scales (W4A4) or a (W4A16)");
  H3RT_CHECK(p.y_f32 || p.y_bf16, "linear_nvfp4_cpu: no output (y_f32 and y_bf16 are null)");
  const int64_t in = p.in, out = p.out;
  const bool w4a4 = p.a_q != nullptr;
  const float alpha = w4a4 ? p.a_global * p.w_global : p.w_global;  // one fp32 product

  std::vector<float> w(static_cast<size_t>(out * in)), a(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) dequant_row(p.w_q, p.w_scales, o, in, w.data() + o * in);
  for (int64_t r = 0; r < p.rows; ++r) {
    if (w4a4) {
      dequant_row(p.a_q, p.a_scales, r, in, a.data());
    } else {
      for (int64_t k = 0; k < in; ++k) a[k] = bf16_to_f32(p.a[r * in + k]);
    }
    for (int64_t o = 0; o < out; ++o) {
      const float* wr = w.data() + o * in;
      double acc = 0.0;
      for (int64_t k = 0; k < in; ++k) acc += static_cast<double>(a[k]) * wr[k];
      double v = static_cast<double>(alpha) * acc;
      if (p.bias) v += bf16_to_f32(p.bias[o]);
      const float f = static_cast<float>(v);
      if (p.y_f32) p.y_f32[r * out + o] = f;
      if (p.y_bf16) p.y_bf16[r * out + o] = f32_to_bf16(f);
    }
  }
}

}  // namespace h3rt::ops
