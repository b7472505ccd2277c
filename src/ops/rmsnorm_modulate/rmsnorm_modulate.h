// rmsnorm_modulate: per row r of x [rows, dim]
//   n = x / sqrt(mean(x^2) + eps) * weight                       (plain RMSNorm)
//   y = n * (1 + scale[t]) + shift[t],  t = row_table_index[r]    (AdaLN modulation)
// scale/shift are rows of a modulation table (row stride table_row_stride); with both null the
// op is a plain RMSNorm. `norm_out` (optional) receives n before the modulation.
//
// Precision (README section 6): fp32 computes in float32 (the sum of squares in double). bf16
// mode reproduces the reference's bf16 run: n = round_bf16(x * rsqrt(mean + eps) * w) with a
// single rounding, then every elementwise op rounds: 1 + scale, n * (1 + scale), + shift.
#pragma once

#include <cstdint>

namespace h3rt::ops {

struct RmsNormModulateParams {
  const float* x = nullptr;       // [rows, dim], row stride x_row_stride (0: dim)
  float* y = nullptr;             // [rows, dim], row stride y_row_stride (0: dim); may equal x
  float* norm_out = nullptr;      // optional [rows, dim] contiguous: n before modulation
  const float* weight = nullptr;  // [dim] or null (all ones)
  const float* shift = nullptr;   // table [*, table_row_stride], dim values used per row
  const float* scale = nullptr;   // same table layout as shift
  const int64_t* row_table_index = nullptr;  // [rows]; null: table row 0 for every row
  int64_t rows = 0, dim = 0;
  int64_t x_row_stride = 0, y_row_stride = 0, table_row_stride = 0;
  float eps = 1e-5f;
  bool bf16 = false;
};

void rmsnorm_modulate_cpu(const RmsNormModulateParams& p);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "formats/nvfp4_quantize_fused.h"
#include "ops/int8_linear/int8_fused.h"
#include "ops/linear/e4m3_out.h"

namespace h3rt::ops {

// GPU version (cuda.cu): bf16 storage, float32 math, bit-exact with rmsnorm_modulate_cpu in bf16
// mode. One block per row, 16-byte accesses: dim and all row strides multiples of 8, pointers
// 16-byte aligned, dim <= 32768. Optionally fuses the preceding gated residual
// (x = round(x + round(gate[t] * residual)), written back to x) so the block's second half reads
// x once: residual_rmsnorm(x += g*attn; n = norm2(x)). All pointers are device pointers.
//
// NVFP4 output (`nvfp4`, src/formats/nvfp4_quantize_fused.h): the qkv / fc1 input is encoded
// to NVFP4 in registers, bit-identical to writing y in bf16 and running nvfp4_quantize (kIeee)
// on it; y may then be null (no bf16 intermediate) or set (both are written). dim % 16 == 0.
//   given g:    one launch. Lanes 2i/2i+1 hold the two 8-element halves of a 16-element block
//               (a thread's vectors are chunks threadIdx.x + i*blockDim.x, blockDim % 32 == 0),
//               one shuffle gives the block amax.
//   computed g: pass 1 = this kernel computing y and reducing amax|y| only (the fused residual,
//               if any, is added and x written back here); its last CTA stores g. Pass 2 = the
//               kernel without the residual on the updated x, encoding with that g. Reads x (and
//               the tables) twice, never writes y.
// int8 output (`int8`, ops/int8_linear/int8_fused.h): the qkv / fc1 input rotated and quantized
// per row in the same launch (the row is staged in shared memory), bit-identical to writing y in
// bf16 and running int8_quantize_rows_cuda on it; y may be null or set. Needs
// int8_fusable(dim, group) and dim <= 6144 (one row per CTA of at most 256 threads).
// e4m3 output (`e4m3`, ops/linear/e4m3_out.h): the qkv / fc1 input of an fp8 layer with a static
// input scale, bit-identical to writing y in bf16 and running quantize_e4m3_cuda on it; y may be
// null or set.
struct RmsNormModulateCudaParams {
  __nv_bfloat16* x = nullptr;  // [rows, dim], row stride x_row_stride; written only with residual
  __nv_bfloat16* y = nullptr;  // [rows, dim], row stride y_row_stride; may be null with nvfp4
  const __nv_bfloat16* weight = nullptr;  // [dim] or null (ones)
  const __nv_bfloat16* shift = nullptr;   // table [*, table_row_stride] or null (plain RMSNorm)
  const __nv_bfloat16* scale = nullptr;
  const int64_t* row_table_index = nullptr;      // [rows]; null: table row 0
  const __nv_bfloat16* residual = nullptr;       // optional [rows, dim], stride residual_row_stride
  const __nv_bfloat16* residual_gate = nullptr;  // table (same rows as shift) or null (gate 1)
  int64_t rows = 0, dim = 0;
  int64_t x_row_stride = 0, y_row_stride = 0, residual_row_stride = 0;  // 0: dim
  int64_t table_row_stride = 0;
  float eps = 1e-5f;
  Nvfp4Out nvfp4;  // optional NVFP4 output of y ([rows, dim]); disabled by default
  Int8Out int8;    // optional int8 convrot output of y; disabled by default (not with nvfp4)
  E4m3Out e4m3;  // optional e4m3 output of y (static scale; ops/linear/e4m3_out.h); off by default
};

cudaError_t rmsnorm_modulate_cuda(const RmsNormModulateCudaParams& p, cudaStream_t stream);

// Whether rmsnorm_modulate_cuda takes an int8 output for rows of `dim` with rotation group G.
bool rmsnorm_modulate_int8_fusable(int64_t dim, int group);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
