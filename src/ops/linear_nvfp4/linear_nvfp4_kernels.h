// The NVFP4 GEMM algorithms behind linear_nvfp4_cuda (one translation unit each), for the
// dispatcher in cuda.cu. Each returns cudaErrorNotSupported where it cannot run.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include "ops/linear/cublaslt_gemm.h"
#include "ops/linear_nvfp4/linear_nvfp4.h"

namespace h3rt::ops::nvfp4_gemm {

// Workspace parts start on 256-byte boundaries.
inline size_t up256(size_t v) {
  return (v + 255) / 256 * 256;
}

// The cuBLASLt fields shared by the algorithms that end in a cuBLASLt call: output, bias, shape,
// device alpha and scratch; the caller sets the operands.
inline lt::Gemm lt_gemm_base(const LinearNvfp4CudaParams& p, lt::Operands kind, const float* alpha,
                             void* workspace) {
  lt::Gemm m = lt::output_gemm(p, kind);
  m.alpha = alpha;
  m.workspace = workspace;
  return m;
}

cudaError_t dequant_cublas(const LinearNvfp4CudaParams& p, cudaStream_t stream);
size_t dequant_cublas_workspace_bytes(const LinearNvfp4CudaParams& p);

cudaError_t block_scaled_sm100(const LinearNvfp4CudaParams& p, cudaStream_t stream);
size_t block_scaled_sm100_workspace_bytes(const LinearNvfp4CudaParams& p);

}  // namespace h3rt::ops::nvfp4_gemm
#endif  // H3RT_HAVE_CUDA
