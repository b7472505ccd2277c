// adaln_curve: the curve-form ("pruned") AdaLN of ComfyUI's H3 files.
//
// embed: per timestep t, the table row interpolated at pos = clamp(t, 0, 1) * (grid - 1)
// (float32), i0 = min(floor(pos), grid - 2), w = pos - i0 (exact),
//   emb = lerp(T[i0], T[i0 + 1], w)
// with torch.lerp's arithmetic as its CUDA and vectorized CPU kernels compute it: one fused
// multiply-add per branch, fma(w, b - a, a) for w < 0.5, else fma(w - 1, b - a, b). The AdaLN
// linears then take emb directly (no silu), in float32: linear_cpu on the host.
//
// modulate (the final layer of the curve form): y = n * (1 + scale[t]) + shift[t] with every
// op rounded to float32. ComfyUI keeps the curve form's final [shift | scale] rows in float32,
// so the bf16 RMSNorm output is promoted and the modulation runs in float32.
#pragma once

#include <cstdint>

namespace h3rt::ops {

struct AdalnCurveEmbedParams {
  const float* table = nullptr;  // [grid, rank]
  const float* t = nullptr;      // [count]
  float* out = nullptr;          // [count, rank]
  int64_t grid = 0, rank = 0, count = 0;
};

void adaln_curve_embed_cpu(const AdalnCurveEmbedParams& p);

struct CurveModulateParams {
  const float* n = nullptr;                  // [rows, dim] contiguous
  const float* shift = nullptr;              // table [*, table_row_stride]
  const float* scale = nullptr;              // same layout
  const int64_t* row_table_index = nullptr;  // [rows]; null: table row 0
  float* y = nullptr;                        // [rows, dim]; may equal n
  int64_t rows = 0, dim = 0, table_row_stride = 0;
};

void curve_modulate_cpu(const CurveModulateParams& p);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace h3rt::ops {

// The curve form's AdaLN linear on the GPU (cuda.cu): y = x W^T + b for a few rows of k inputs
// (k = 8 in the published files), bit-exact with linear_cpu: each output accumulates its
// products in double in input order (float x float products are exact in double), adds the
// bias in double, rounds once to float32 and, for the bf16 output, once more to bf16. One
// thread per output; device pointers.
struct AdalnCurveLinearCudaParams {
  const float* x = nullptr;         // [rows, in]
  const float* w = nullptr;         // [out, in]
  const float* bias = nullptr;      // [out] or null
  float* y = nullptr;               // [rows, out] float32 output, or null
  __nv_bfloat16* y_bf16 = nullptr;  // [rows, out] bf16 output, or null (exactly one is set)
  int64_t rows = 0, in = 0, out = 0;
};

cudaError_t adaln_curve_linear_cuda(const AdalnCurveLinearCudaParams& p, cudaStream_t stream);

// curve_modulate on the GPU, bit-exact with curve_modulate_cpu: n is the bf16 RMSNorm output
// (row stride n_row_stride), the tables and y float32.
struct CurveModulateCudaParams {
  const __nv_bfloat16* n = nullptr;  // [rows, dim], row stride n_row_stride (0: dim)
  const float* shift = nullptr;      // table [*, table_row_stride]
  const float* scale = nullptr;
  const int64_t* row_table_index = nullptr;  // [rows]; null: table row 0
  float* y = nullptr;                        // [rows, dim] contiguous
  int64_t rows = 0, dim = 0, n_row_stride = 0, table_row_stride = 0;
};

cudaError_t curve_modulate_cuda(const CurveModulateCudaParams& p, cudaStream_t stream);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
