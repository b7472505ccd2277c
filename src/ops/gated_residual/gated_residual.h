// gated_residual: x[r] += gate[t] * y[r] with t = row_table_index[r] (the AdaLN gate row of the
// row's modality and timestep); with gate null it is the plain residual x += y.
// bf16 mode rounds the product and the sum to bf16 (two bf16 tensor ops in the reference).
#pragma once

#include <cstdint>

namespace h3rt::ops {

struct GatedResidualParams {
  float* x = nullptr;                        // [rows, dim] contiguous, updated in place
  const float* y = nullptr;                  // [rows, dim] contiguous
  const float* gate = nullptr;               // table [*, table_row_stride] or null
  const int64_t* row_table_index = nullptr;  // [rows]; null: table row 0
  int64_t rows = 0, dim = 0, table_row_stride = 0;
  bool bf16 = false;
};

void gated_residual_cpu(const GatedResidualParams& p);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace h3rt::ops {

// GPU version (cuda.cu): bf16 storage, bit-exact with gated_residual_cpu in bf16 mode. dim and
// row strides multiples of 8, pointers 16-byte aligned. Device pointers. (The same step fused
// with the following RMSNorm is rmsnorm_modulate_cuda with `residual` set.)
struct GatedResidualCudaParams {
  __nv_bfloat16* x = nullptr;           // [rows, dim], row stride x_row_stride, updated in place
  const __nv_bfloat16* y = nullptr;     // [rows, dim], row stride y_row_stride
  const __nv_bfloat16* gate = nullptr;  // table [*, table_row_stride] or null (x += y)
  const int64_t* row_table_index = nullptr;  // [rows]; null: table row 0
  int64_t rows = 0, dim = 0, x_row_stride = 0, y_row_stride = 0, table_row_stride = 0;
};

cudaError_t gated_residual_cuda(const GatedResidualCudaParams& p, cudaStream_t stream);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
