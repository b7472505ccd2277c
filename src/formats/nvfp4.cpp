#include "h3rt/nvfp4.h"

#include <cmath>
#include <cstring>

#include "formats/nvfp4_layout.h"
#include "h3rt/formats.h"
#include "h3rt/memory.h"
#include "h3rt/safetensors.h"

namespace h3rt {
namespace {

void check_input(const Tensor& x, const char* what) {
  H3RT_CHECK(x.device() == Device::cpu, what, ": expects a host tensor");
  H3RT_CHECK(x.dtype() == DType::bf16 || x.dtype() == DType::f32, what,
             ": expects bf16 or f32 input, got ", dtype_name(x.dtype()));
  H3RT_CHECK(x.dim() == 2, what, ": expects a 2-D tensor [rows, cols], got shape ",
             shape_str(x.shape()));
  H3RT_CHECK(x.size(1) <= 1 || x.stride(1) == 1, what, ": expects unit column stride");
}

// One row of x widened to float.
void load_row(const Tensor& x, int64_t r, float* out) {
  const int64_t cols = x.size(1);
  if (x.dtype() == DType::bf16) {
    const uint16_t* p = x.ptr<uint16_t>() + r * x.stride(0);
    for (int64_t c = 0; c < cols; ++c) out[c] = bf16_to_f32(p[c]);
  } else {
    std::memcpy(out, x.ptr<float>() + r * x.stride(0), static_cast<size_t>(cols) * sizeof(float));
  }
}

}  // namespace

float nvfp4_global_scale_from_amax(float amax, Nvfp4ScaleRule rule) {
  return nvfp4::global_scale_from_amax(amax, rule == Nvfp4ScaleRule::kBf16Activation);
}

float abs_max(const Tensor& x) {
  check_input(x, "abs_max");
  FloatVec row(static_cast<size_t>(x.size(1)));
  float m = 0.0f;
  for (int64_t r = 0; r < x.size(0); ++r) {
    load_row(x, r, row.data());
    for (float v : row) {
      float a = std::fabs(v);
      if (!(a <= m)) m = a;  // NaN sticks
    }
  }
  return m;
}

float nvfp4_global_scale(const Tensor& x, Nvfp4ScaleRule rule) {
  return nvfp4_global_scale_from_amax(abs_max(x), rule);
}

uint8_t nvfp4_block_scale(float block_amax, float g) {
  return f32_to_e4m3_satfinite(nvfp4::scale_quotient(block_amax, g));
}

uint8_t nvfp4_encode(float x, float g, uint8_t scale) {
  const float d = g * e4m3_to_f32(scale);
  if (d == 0.0f) return 0;
  float v = x / d;
  v = std::fmin(std::fmax(v, -nvfp4::kE2m1Max), nvfp4::kE2m1Max);
  return f32_to_e2m1(v);
}

int64_t nvfp4_scales_bytes(int64_t rows, int64_t cols) {
  return nvfp4::scale_rows(rows) * nvfp4::scale_cols(cols);
}

void nvfp4_quantize_into(const Tensor& x, float g, uint8_t* qdata, uint8_t* scales) {
  check_input(x, "nvfp4_quantize");
  const int64_t rows = x.size(0), cols = x.size(1);
  H3RT_CHECK(cols % nvfp4::kBlock == 0, "nvfp4_quantize: cols (", cols,
             ") must be a multiple of 16 for input shape ", shape_str(x.shape()));
  H3RT_CHECK(std::isfinite(g) && g >= 0.0f,
             "nvfp4_quantize: global scale must be finite and >= 0,"
             " got ",
             g);
  const int64_t kb = cols / nvfp4::kBlock;
  std::memset(scales, 0, static_cast<size_t>(nvfp4_scales_bytes(rows, cols)));
  FloatVec row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    load_row(x, r, row.data());
    uint8_t* qrow = qdata + r * (cols / 2);
    for (int64_t b = 0; b < kb; ++b) {
      const float* v = row.data() + b * nvfp4::kBlock;
      float amax = 0.0f;
      for (int i = 0; i < nvfp4::kBlock; ++i) amax = std::fmax(amax, std::fabs(v[i]));
      const uint8_t s = nvfp4_block_scale(amax, g);
      scales[nvfp4::scale_offset(r, b, kb)] = s;
      for (int i = 0; i < nvfp4::kBlock; i += 2) {
        const uint8_t hi = nvfp4_encode(v[i], g, s), lo = nvfp4_encode(v[i + 1], g, s);
        qrow[(b * nvfp4::kBlock + i) / 2] = static_cast<uint8_t>(hi << 4 | lo);
      }
    }
  }
}

Nvfp4Tensor nvfp4_quantize(const Tensor& x, float g) {
  check_input(x, "nvfp4_quantize");
  const int64_t rows = x.size(0), cols = x.size(1);
  Nvfp4Tensor out;
  out.qdata = Tensor::zeros(DType::u8, {rows, cols / 2});
  out.scales = Tensor::zeros(DType::u8, {nvfp4::scale_rows(rows), nvfp4::scale_cols(cols)});
  out.global_scale = g;
  nvfp4_quantize_into(x, g, out.qdata.ptr<uint8_t>(), out.scales.ptr<uint8_t>());
  return out;
}

Tensor nvfp4_dequantize(const Tensor& qdata, const Tensor& scales, float g) {
  H3RT_CHECK(qdata.dim() == 2 && qdata.is_contiguous() && dtype_size(qdata.dtype()) == 1,
             "nvfp4_dequantize: qdata must be a contiguous byte tensor [rows, cols/2], got ",
             shape_str(qdata.shape()));
  const int64_t rows = qdata.size(0), cols = qdata.size(1) * 2;
  H3RT_CHECK(cols % nvfp4::kBlock == 0, "nvfp4_dequantize: cols (", cols,
             ") must be a multiple of 16");
  const Shape want{nvfp4::scale_rows(rows), nvfp4::scale_cols(cols)};
  H3RT_CHECK(scales.shape() == want && scales.is_contiguous() && dtype_size(scales.dtype()) == 1,
             "nvfp4_dequantize: scales must be contiguous bytes of shape ", shape_str(want),
             ", got ", shape_str(scales.shape()));
  const int64_t kb = cols / nvfp4::kBlock;
  Tensor out = Tensor::zeros(DType::f32, {rows, cols});
  const uint8_t* q = qdata.ptr<uint8_t>();
  const uint8_t* sc = scales.ptr<uint8_t>();
  float* o = out.ptr<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = q[r * (cols / 2) + c / 2];
      const uint8_t code = (c % 2 == 0) ? byte >> 4 : byte & 0xf;
      const float s = e4m3_to_f32(sc[nvfp4::scale_offset(r, c / nvfp4::kBlock, kb)]);
      o[r * cols + c] = e2m1_to_f32(code) * s * g;
    }
  }
  return out;
}

}  // namespace h3rt
