// The layers around the blocks that a file may store int8 (ComfyUI int8_tensorwise, with or
// without convrot): the patch projections (video_patch_proj, audio_patch_proj), condition_proj
// and the output heads (final_layer.video_out / audio_out). The CPU reference computes every
// int8 layer as W8A8 (model/linear_cpu.cpp: float rows rounded to bf16, rotated and quantized per
// row, the int8 GEMM, both scales and the bf16 bias, a bf16-valued result), so the GPU does the
// same here instead of running a dequantized copy in float32:
//   bf16 rows:    int8_project_cuda (block_cuda.h) directly;
//   float32 rows: rounded to bf16 (round to nearest even, as the host's f32_to_bf16) into
//                 `stage`, then the same;
//   float32 out:  the bf16 result widened exactly.
// Bit-exact with the CPU reference's layer on the same input rows. The int8 activation (q,
// scale, GEMM scratch) is the block buffers' (free outside the blocks): rows x l.in int8 must
// fit it. x, stage and y are contiguous rows.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "model/block_cuda.h"

namespace h3rt::model {

// dst [rows, cols] (row stride dst_stride) = bf16(src [rows, cols] (row stride src_stride)).
void f32_to_bf16_rows_cuda(const float* src, int64_t src_stride, __nv_bfloat16* dst,
                           int64_t dst_stride, int64_t rows, int64_t cols, cudaStream_t s);
// dst [rows, cols] contiguous = float(src [rows, cols] (row stride src_stride)).
void bf16_to_f32_rows_cuda(const __nv_bfloat16* src, int64_t src_stride, float* dst, int64_t rows,
                           int64_t cols, cudaStream_t s);

// y [rows, l.out] bf16 = the int8 layer l of float32 rows x [rows, l.in], through `stage`
// (rows x l.in bf16).
void int8_project_f32_in_cuda(const DeviceLinear& l, const float* x, __nv_bfloat16* stage,
                              __nv_bfloat16* y, int64_t rows, const Int8Activation& a,
                              cudaStream_t s);
// y [rows, l.out] float32 = the int8 layer l of bf16 rows x [rows, l.in], through `stage`
// (rows x l.out bf16).
void int8_project_f32_out_cuda(const DeviceLinear& l, const __nv_bfloat16* x, __nv_bfloat16* stage,
                               float* y, int64_t rows, const Int8Activation& a, cudaStream_t s);

// The block buffers' int8 activation for rows x in (throws naming `what` when it is absent or
// too small).
Int8Activation int8_io_activation(BlockCudaBuffers& b, int64_t rows, int64_t in, const char* what);

}  // namespace h3rt::model
#endif  // H3RT_HAVE_CUDA
