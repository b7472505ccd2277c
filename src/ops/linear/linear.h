// linear: y = x W^T + b for a [rows, in] activation and a [out, in] row-major weight.
//
// CPU reference: every dot product accumulates in double (more exact than the fp32 GEMM it
// stands for), adds the bias, then rounds once to float32 and, when `round_bf16` is set, once
// more to bf16, as a bf16 GEMM with fp32 accumulation and a bias epilogue writes its output.
// Rows of x and y may be strided (row_stride >= in / out), so column slices of a wider buffer
// can be read or written directly.
#pragma once

#include <cstdint>

namespace h3rt::ops {

struct LinearParams {
  const float* x = nullptr;     // [rows, in], row stride x_row_stride
  const float* w = nullptr;     // [out, in], contiguous row-major
  const float* bias = nullptr;  // [out] or null
  float* y = nullptr;           // [rows, out], row stride y_row_stride; must not alias x
  int64_t rows = 0, in = 0, out = 0;
  int64_t x_row_stride = 0;  // 0 means `in`
  int64_t y_row_stride = 0;  // 0 means `out`
  bool round_bf16 = false;
};

void linear_cpu(const LinearParams& p);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

namespace h3rt::ops {

// GPU versions (cuda.cu), cuBLASLt with float32 accumulation; plans are cached per shape.
// Device pointers; rows of x and y may be strided (leading dimensions).
//
// bf16: y = bf16(x W^T + b), x/W/b/y bf16.
struct LinearCudaParams {
  const __nv_bfloat16* x = nullptr;     // [rows, in], row stride x_row_stride (0: in)
  const __nv_bfloat16* w = nullptr;     // [out, in] contiguous
  const __nv_bfloat16* bias = nullptr;  // [out] or null
  __nv_bfloat16* y = nullptr;           // [rows, out], row stride y_row_stride (0: out)
  int64_t rows = 0, in = 0, out = 0, x_row_stride = 0, y_row_stride = 0;
};
cudaError_t linear_bf16_cuda(const LinearCudaParams& p, cudaStream_t stream);

// fp8 e4m3, per-tensor scales (fp8_scaled checkpoints): y = bf16((xq W^T) * x_scale * w_scale + b)
// with xq = e4m3_satfinite(x / x_scale) from quantize_e4m3_cuda and W stored as e4m3. The scales
// are device float32 scalars. in and the x row stride must be multiples of 16.
// cuBLASLt runs it. A CUTLASS 4.2 sm_90a kernel measured 0.75-0.85x of cuBLASLt's speed alone and
// 79.1 against 71.3 ms in the fp8 block (H100, bench/RESULTS.md session 18); it was retired.
struct LinearFp8CudaParams {
  const __nv_fp8_e4m3* x = nullptr;  // [rows, in] quantized activations
  const __nv_fp8_e4m3* w = nullptr;  // [out, in] contiguous
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
  const __nv_bfloat16* bias = nullptr;
  __nv_bfloat16* y = nullptr;
  int64_t rows = 0, in = 0, out = 0, x_row_stride = 0, y_row_stride = 0;
  bool fast_accum = false;  // Hopper fp8 fast accumulation (less exact); off by default
};
cudaError_t linear_fp8_cuda(const LinearFp8CudaParams& p, cudaStream_t stream);

// q = e4m3_satfinite(float(x) / *scale), RNE (bit-exact with h3rt::f32_to_e4m3_satfinite).
// cols and row strides multiples of 8.
struct QuantizeE4m3CudaParams {
  const __nv_bfloat16* x = nullptr;  // [rows, x_row_stride (0: cols)]
  __nv_fp8_e4m3* q = nullptr;        // [rows, q_row_stride (0: cols)]
  const float* scale = nullptr;      // device scalar
  int64_t rows = 0, cols = 0, x_row_stride = 0, q_row_stride = 0;
};
cudaError_t quantize_e4m3_cuda(const QuantizeE4m3CudaParams& p, cudaStream_t stream);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
