// linear_nvfp4: y = bf16(alpha * (A . W^T) + b) with NVFP4 weights W [out, in] and activations
// A [rows, in] either NVFP4 (W4A4) or bf16 (W4A16).
//
// Operands (include/h3rt/nvfp4.h): packed e2m1 codes, element 2j in the HIGH nibble of byte j
// (comfy-kitchen order), e4m3 block scales (one per 16 along K) in the 128x4 tiled layout, and a
// float32 global scale in device memory. The dequantized value of an element is
// e2m1(q) * float(s): at most 6 significant bits, exact in bf16, so the bf16 tensor-core products
// are exact and only fp32 accumulation order separates algorithms. The global scales enter once,
// in the epilogue: alpha = g_a * g_w (W4A4) or g_w (W4A16), one fp32 product; then + bias, then
// one bf16 rounding.
//
// CPU reference: linear_nvfp4_cpu (fp64 accumulation of the dequantized operands).
// Constraints: in % 64 == 0 (K blocks of 4 scales), out % 8 == 0, row strides multiples of 8.
#pragma once

#include <cstdint>

namespace h3rt::ops {

// Host reference. Operands as on the device (host memory); w4a16 when a_q is null (then `a`,
// bf16 bits, is read). Output float32 before bf16 rounding if `y_f32`, and bf16 bits if `y_bf16`.
struct LinearNvfp4CpuParams {
  const uint8_t* a_q = nullptr;       // [rows, in/2] or null for W4A16
  const uint8_t* a_scales = nullptr;  // tiled [roundup(rows,128), roundup(in/16,4)]
  float a_global = 0.0f;
  const uint16_t* a = nullptr;  // bf16 bits [rows, in] (W4A16)
  const uint8_t* w_q = nullptr;
  const uint8_t* w_scales = nullptr;
  float w_global = 0.0f;
  const uint16_t* bias = nullptr;  // bf16 bits [out] or null
  float* y_f32 = nullptr;          // [rows, out] or null
  uint16_t* y_bf16 = nullptr;      // [rows, out] or null
  int64_t rows = 0, in = 0, out = 0;
};
void linear_nvfp4_cpu(const LinearNvfp4CpuParams& p);

}  // namespace h3rt::ops

#ifdef H3RT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace h3rt::ops {

enum class Nvfp4GemmAlgo : uint8_t {
  kAuto,              // best compiled one for this device (block-scaled on Blackwell, else Hopper)
  kDequantCublas,     // any sm_80+: dequantize the operands to bf16 scratch, cuBLASLt bf16 GEMM
  kBlockScaledSm100,  // sm_100/sm_120/sm_121: native block-scaled NVFP4 (cuBLASLt VEC16_UE4M3)
};

struct LinearNvfp4CudaParams {
  // Activations: NVFP4 (a_q non-null) or bf16 (a).
  const uint8_t* a_q = nullptr;       // [rows, in/2]
  const uint8_t* a_scales = nullptr;  // tiled
  const float* a_global = nullptr;    // device scalar
  const __nv_bfloat16* a = nullptr;   // [rows, a_row_stride] (W4A16)
  int64_t a_row_stride = 0;           // elements; 0 means `in`
  // Weights.
  const uint8_t* w_q = nullptr;         // [out, in/2]
  const uint8_t* w_scales = nullptr;    // tiled
  const float* w_global = nullptr;      // device scalar
  const __nv_bfloat16* bias = nullptr;  // [out] or null
  __nv_bfloat16* y = nullptr;           // [rows, y_row_stride]
  int64_t y_row_stride = 0;             // 0 means `out`
  int64_t rows = 0, in = 0, out = 0;
  Nvfp4GemmAlgo algo = Nvfp4GemmAlgo::kAuto;
  void* workspace = nullptr;  // linear_nvfp4_workspace_bytes(...) bytes, device
  size_t workspace_bytes = 0;
};

// Scratch the chosen algorithm needs for these shapes (0 for some).
size_t linear_nvfp4_workspace_bytes(const LinearNvfp4CudaParams& p);
// The algorithm kAuto resolves to on the current device (never kAuto).
Nvfp4GemmAlgo linear_nvfp4_resolve(Nvfp4GemmAlgo algo);
// What the algorithm does, in words (reports).
inline const char* linear_nvfp4_algo_name(Nvfp4GemmAlgo a) {
  switch (a) {
    case Nvfp4GemmAlgo::kDequantCublas:
      return "dequantize to bf16 scratch + cuBLASLt bf16";
    case Nvfp4GemmAlgo::kBlockScaledSm100:
      return "cuBLASLt block-scaled NVFP4";
    default:
      return "auto";
  }
}
// cudaErrorNotSupported when the algorithm is not compiled in or not runnable on this device.
cudaError_t linear_nvfp4_cuda(const LinearNvfp4CudaParams& p, cudaStream_t stream);

}  // namespace h3rt::ops
#endif  // H3RT_HAVE_CUDA
