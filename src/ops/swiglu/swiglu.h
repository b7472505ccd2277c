// swiglu: out = silu(gate) * value, where each input row [2F] is [gate (F) | value (F)], the
// original MiniMax fc1 order (diffusers stores the halves swapped; the loader reads the
// original checkpoint, so no swap happens here). silu(g) = g / (1 + exp(-g)).
// bf16 mode rounds silu(gate) and the product to bf16, as two bf16 tensor ops do.
#pragma once

#include <cstdint>

namespace h3rt::ops {

struct SwigluParams {
  const float* in = nullptr;  // [rows, in_row_stride (0: 2*ffn)]
  float* out = nullptr;       // [rows, ffn] contiguous
  int64_t rows = 0, ffn = 0, in_row_stride = 0;
  bool bf16 = false;
};

void swiglu_cpu(const SwigluParams& p);

// silu in float32 (shared by the AdaLN input path).
float silu(float x);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace h3rt::ops {

// GPU version (cuda.cu): bf16 in/out, float32 math, bf16 rounding points of swiglu_cpu(bf16).
// exact_exp = true evaluates exp in double (bit-exact with the CPU reference, costs fp64 issue
// slots); false uses the device expf (one bf16 ulp apart in rare elements). ffn and row strides
// multiples of 8, pointers 16-byte aligned. Device pointers.
struct SwigluCudaParams {
  const __nv_bfloat16* in = nullptr;  // [rows, in_row_stride (0: 2*ffn)], [gate | value]
  __nv_bfloat16* out = nullptr;       // [rows, out_row_stride (0: ffn)]
  int64_t rows = 0, ffn = 0, in_row_stride = 0, out_row_stride = 0;
  bool exact_exp = true;
};

cudaError_t swiglu_cuda(const SwigluCudaParams& p, cudaStream_t stream);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
