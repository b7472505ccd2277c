// NVFP4 -> bf16 dequantization on the GPU, without the global scale: out = e2m1(q) * float(s).
// The product has at most 6 significant bits (2 from e2m1, 4 from e4m3) and lies within
// [2^-10, 2688], so it is exact in bf16: the kernel is bit-exact with the host's
// e2m1_to_f32(code) * e4m3_to_f32(scale) rounded to bf16 (which does not round). Signed zeros
// are kept (code 8 gives -0).
//
// One thread per 16-element block: an 8-byte load of codes, one scale byte, two 16-byte stores.
// Codes become bf16 through byte-permute table look-ups (prmt) and one packed bf16 multiply by
// the scale per pair. Also writes, when asked, the constants of the GEMM that follows
// (dequant_cublas): alpha_out[i] = (g_a ? *g_a : 1) * *g_w for i < alpha_n (an fp32 product,
// g_a * g_w in that order).
// Constraints: cols % 16 == 0, rows * cols / 16 < 2^31, q 8-byte aligned (contiguous
// [rows, cols/2]), out 16-byte aligned with out_row_stride % 8 == 0.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace h3rt::ops {

struct Nvfp4DequantParams {
  const uint8_t* q = nullptr;       // [rows, cols/2], element 2j in the high nibble
  const uint8_t* scales = nullptr;  // tiled [roundup(rows,128), roundup(cols/16,4)]
  __nv_bfloat16* out = nullptr;     // [rows, out_row_stride]
  int64_t rows = 0, cols = 0;
  int64_t out_row_stride = 0;  // 0 means cols
  // Optional GEMM constants (see above).
  const float* g_a = nullptr;
  const float* g_w = nullptr;
  float* alpha_out = nullptr;
  int64_t alpha_n = 0;  // <= rows * cols / 16
};

cudaError_t nvfp4_dequant_bf16(const Nvfp4DequantParams& p, cudaStream_t stream);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
