// The cuBLASLt call shared by the NVFP4 GEMM paths: y[rows, out] = bf16(alpha * (A . W^T) + b)
// with alpha read from device memory, so the global scales never travel to the host (no
// synchronisation, graph-capturable).
//
// Layout as in src/ops/linear/cuda.cu: cuBLASLt is column-major, so we compute y^T = W A^T with
// cuBLAS's A = W (in x out, op T), B = activations (in x rows, op N), C = D = y^T (out x rows,
// ld = y row stride): the "TN" form that the fp8 and block-scaled kernels require.
//
// Operands: kBf16 (bf16 W and A, fp32 accumulation) or kFp4BlockScaled (CUDA_R_4F_E2M1 W and A,
// element 2j in the LOW nibble as cuBLAS packs it, e4m3 block scales per 16 along K in the 128x4
// tiled layout: CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3; Blackwell only).
//
// alpha: device float[out], every entry the same value. The plan prefers pointer mode DEVICE
// (alpha[0], and a device zero as beta: C = D = y must then not contribute, which the GPU tests
// check by poisoning y with NaN) and falls back to ALPHA_DEVICE_VECTOR_BETA_ZERO (alpha[i]
// scales output row i of D, C never read) where the heuristic offers no algorithm for DEVICE.
// Plans (descriptors, layouts, the heuristic's algorithm) are cached per problem and device.
#pragma once

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace h3rt::ops::nvfp4_gemm {

// cuBLASLt's own scratch, carved from the caller's workspace.
inline constexpr size_t kLtWorkspaceBytes = size_t(32) << 20;

enum class LtOperands : uint8_t { kBf16, kFp4BlockScaled };

struct LtMatmul {
  LtOperands kind = LtOperands::kBf16;
  const void* w = nullptr;              // [out, in] row-major (bf16, or packed e2m1 bytes)
  const void* a = nullptr;              // [rows, a_ld] row-major
  int64_t a_ld = 0;                     // elements
  const void* w_scales = nullptr;       // kFp4BlockScaled: tiled e4m3, [roundup(out,128), in/16]
  const void* a_scales = nullptr;       // kFp4BlockScaled: tiled e4m3, [roundup(rows,128), in/16]
  const float* alpha = nullptr;         // device float[out], all equal
  const float* zero = nullptr;          // device float 0 (beta)
  const __nv_bfloat16* bias = nullptr;  // [out] or null
  __nv_bfloat16* y = nullptr;           // [rows, y_ld]
  int64_t y_ld = 0;
  int64_t rows = 0, in = 0, out = 0;
  void* lt_workspace = nullptr;  // kLtWorkspaceBytes, device
};

// cudaErrorNotSupported when cuBLASLt has no algorithm for the problem (e.g. block-scaled FP4 on
// a GPU without it); cuBLASLt failures otherwise throw h3rt::Error.
cudaError_t lt_matmul(const LtMatmul& m, cudaStream_t stream);

}  // namespace h3rt::ops::nvfp4_gemm
#endif  // H3RT_HAVE_CUDA
