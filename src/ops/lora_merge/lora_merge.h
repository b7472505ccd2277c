// lora_merge: the GPU steps of a LoRA merge (h3rt/lora.h), each the host merge's arithmetic
// (src/model/lora_merge.cpp) with the same operations in the same order, so the merged weights
// are bit-identical to the CPU merge's:
//  - lora_rotate_rows_cuda: A rotated per group of G columns with the host's double radix-4
//    butterflies (hadamard_rotate_rows: the same IEEE double adds in the same order, one
//    multiply by 2^-log2(sqrt G), one rounding to f32);
//  - lora_working_values_cuda: the layer's working values in f32 (bf16 / f32 values, or the
//    int8 q * s[row] product, one rounded f32 multiply);
//  - lora_add_delta_cuda: w = w + scale * D, D the f32 FMA chain over r ascending (fmaf from
//    0), then one rounded multiply and one rounded add (no contraction);
//  - lora_store_cuda: the working values rounded to bf16 (nearest even, the host's bit rule) or
//    copied as f32; an int8 layer then goes through int8_quantize_rows_cuda (group 0) on the
//    bf16 values, which is the host rule bit for bit.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cstdint>

#include "h3rt/dtype.h"

namespace h3rt::ops {

// y [rows, k] = x rotated per group of `group` columns (a power of 4 dividing k, up to 1024).
cudaError_t lora_rotate_rows_cuda(const float* x, float* y, int64_t rows, int64_t k, int group,
                                  cudaStream_t stream);

// dst [n] f32 = the values of src [n] (f32, bf16 or f16).
cudaError_t lora_to_f32_cuda(const void* src, DType dtype, float* dst, int64_t n,
                             cudaStream_t stream);

// w [out, in] f32 = the working values of a stored weight: `src` f32 or bf16 (row_scale null),
// or i8 with row_scale [out] (q * s[row]).
cudaError_t lora_working_values_cuda(const void* src, DType dtype, const float* row_scale, float* w,
                                     int64_t out, int64_t in, cudaStream_t stream);

// w [out, in] += scale * (up [out, rank] . down [rank, in]) in the order above.
cudaError_t lora_add_delta_cuda(float* w, int64_t out, int64_t in, const float* up,
                                const float* down, int64_t rank, float scale, cudaStream_t stream);

// dst [n] (bf16 or f32) = w [n] rounded to dst's dtype.
cudaError_t lora_store_cuda(const float* w, void* dst, DType dtype, int64_t n, cudaStream_t stream);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
