// fp8_quantize: per-tensor e4m3 quantization of an activation with a scale computed from the
// tensor itself (the "dynamic" fp8 activation path of fp8_scaled layers without input_scale).
//
// The rule, in float32, identical on the CPU and the GPU:
//   amax = max over all rows x cols elements of |x|   (NaN elements are skipped, as fmaxf does;
//          |x| of a bf16 or float value is exact and max is order independent, so any
//          reduction order gives the same bits)
//   s    = amax / 448   (one IEEE float32 division, round to nearest even) if amax > 0, else 1
//   q    = e4m3_satfinite(x / s)   (float32 division RNE, then RNE to e4m3, |q| <= 448; NaN
//          stays NaN)
// so the largest |x| maps to 448 (or to a neighbour of 448 after the division's rounding) and
// nothing saturates except through that rounding. An infinite element makes s infinite and the
// result meaningless; callers that can (the CPU model reference) reject a non-finite s.
// A GEMM on q then scales its product by s * w_scale.
//
// Layout: x [rows, cols] row-major with row stride x_row_stride (0: cols); q likewise with
// q_row_stride (0: cols), one e4m3 byte per element.
#pragma once

#include <cstddef>
#include <cstdint>

namespace h3rt::ops {

inline constexpr float kE4m3Max = 448.0f;

// The scale rule above (amax >= 0).
inline float fp8_dynamic_scale(float amax) {
  return amax > 0.0f ? amax / kE4m3Max : 1.0f;
}

// max |x| over [rows, cols] (row stride x_row_stride, 0: cols), skipping NaN; 0 when empty.
float fp8_absmax_cpu(const float* x, int64_t rows, int64_t cols, int64_t x_row_stride = 0);

// CPU reference: x holds the values the GPU reads (bf16 values as floats); q receives e4m3
// codes (h3rt::f32_to_e4m3_satfinite); *scale = s and, when amax is not null, *amax.
struct Fp8QuantizeParams {
  const float* x = nullptr;  // [rows, x_row_stride (0: cols)]
  uint8_t* q = nullptr;      // [rows, q_row_stride (0: cols)] e4m3 codes
  int64_t rows = 0, cols = 0, x_row_stride = 0, q_row_stride = 0;
  float* scale = nullptr;  // out: s
  float* amax = nullptr;   // out (optional): amax
};
void fp8_quantize_dynamic_cpu(const Fp8QuantizeParams& p);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

namespace h3rt::ops {

// GPU version (cuda.cu), bit-exact with fp8_quantize_dynamic_cpu on bf16 inputs; two launches,
// no host synchronisation, nothing to reset between calls (CUDA-graph capturable):
//   1. amax partials: min(rows, 1024) CTAs, CTA b reduces rows b, b + grid, ... to one float
//      (fmaxf) stored in workspace[b];
//   2. quantize: every CTA reduces the partials of launch 1 again (at most 1024 floats from L2),
//      derives s, and encodes its rows (grid-stride over rows); CTA 0 stores s (and amax) to
//      the device scalars for the GEMM that follows. No counters or atomics: each call writes
//      every value it reads, so the workspace needs no initialisation.
// Rows of 8-element vectors (16-byte bf16 loads, 8-byte e4m3 stores) when cols and both row
// strides are multiples of 8 and x / q are 16- / 8-byte aligned; any other shape runs an
// element-wise variant of the same kernels. Device pointers; rows == 0 launches nothing and
// leaves scale and amax unwritten.
struct Fp8QuantizeCudaParams {
  const __nv_bfloat16* x = nullptr;  // [rows, x_row_stride (0: cols)]
  __nv_fp8_e4m3* q = nullptr;        // [rows, q_row_stride (0: cols)]
  int64_t rows = 0, cols = 0, x_row_stride = 0, q_row_stride = 0;
  float* scale = nullptr;     // out: device float32 scalar s
  float* amax = nullptr;      // out (optional): device float32 scalar amax
  void* workspace = nullptr;  // fp8_quantize_workspace_bytes() of device memory, any contents
};

size_t fp8_quantize_workspace_bytes();

cudaError_t fp8_quantize_dynamic_cuda(const Fp8QuantizeCudaParams& p, cudaStream_t stream);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
