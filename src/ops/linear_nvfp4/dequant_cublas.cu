// kDequantCublas: NVFP4 GEMM on any sm_80+ GPU as "dequantize, then a bf16 GEMM".
//
// 1. nvfp4_dequant_bf16 writes W (and, for W4A4, A) as bf16 into the workspace, without the
//    global scales. Each value e2m1 * e4m3 has at most 6 significant bits: exact in bf16, so the
//    bf16 tensor-core products equal the products of the dequantized operands exactly. The
//    weight launch also writes alpha = g_a * g_w (W4A4) or g_w (W4A16).
// 2. cuBLASLt bf16 GEMM, fp32 accumulation, alpha from device memory, bias epilogue, bf16 out
//    with row strides (src/ops/linear/cublaslt_gemm.h).
// The only error against the fp64 product of the dequantized operands is thus the fp32
// accumulation inside cuBLAS (plus the epilogue's fp32 alpha multiply, bias add and the final
// bf16 rounding). Cost over a plain bf16 GEMM: one pass over W (and A) writing 2 bytes per
// element; the weights are dequantized on every call (nothing is cached between calls).
//
// Workspace: [alpha: out floats][W bf16: out x in][A bf16: rows x in, W4A4 only]
// [cuBLASLt scratch], each part 256-byte aligned.
#include <cuda_fp8.h>

#include <algorithm>

#include "cuda/device_math.cuh"
#include "cuda/runtime.h"
#include "formats/nvfp4_layout.h"
#include "ops/linear/cublaslt_gemm.h"
#include "ops/linear_nvfp4/linear_nvfp4_kernels.h"
#include "ops/linear_nvfp4/nvfp4_dequant.h"

namespace h3rt::ops {
namespace {

// bf16 bit patterns of the e2m1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 split into low and high
// bytes, as two 8-byte tables for prmt (byte i of the pair = entry i).
constexpr uint32_t kLo03 = 0xC0800000u, kLo47 = 0xC0804000u;  // 00 00 80 C0 | 00 40 80 C0
constexpr uint32_t kHi03 = 0x3F3F3F00u, kHi47 = 0x40404040u;  // 00 3F 3F 3F | 40 40 40 40

// Eight codes (4 bytes, element 2j in the high nibble of byte j) times the scale pair s2 (the
// bf16 scale in both halves) -> four words of two bf16 each, element order.
__device__ __forceinline__ void decode8(uint32_t w, uint32_t s2, uint32_t* o) {
  const uint32_t e = ((w >> 4) & 0x0f0f0f0fu) | ((w & 0x0f0f0f0fu) << 4);  // nibble k = elem k
  const uint32_t mag = e & 0x77777777u;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t sel = (mag >> (16 * h)) & 0xffffu;  // elements 4h .. 4h+3
    const uint32_t lo = __byte_perm(kLo03, kLo47, sel);
    const uint32_t hi = __byte_perm(kHi03, kHi47, sel);
    const uint32_t sg = e >> (16 * h);          // sign of element 4h+i at bit 4i+3
    uint32_t v0 = __byte_perm(lo, hi, 0x5140);  // elements 4h, 4h+1
    uint32_t v1 = __byte_perm(lo, hi, 0x7362);  // elements 4h+2, 4h+3
    v0 |= ((sg << 12) & 0x8000u) | ((sg << 24) & 0x80000000u);
    v1 |= ((sg << 4) & 0x8000u) | ((sg << 16) & 0x80000000u);
    o[2 * h] = cuda::bf2_mul(v0, s2);  // exact: <= 6 significant bits
    o[2 * h + 1] = cuda::bf2_mul(v1, s2);
  }
}

__device__ __forceinline__ uint32_t e4m3_to_bf16x2(uint8_t s) {
  const __half_raw hr = __nv_cvt_fp8_to_halfraw(s, __NV_E4M3);
  const float f = __half2float(__half(hr));
  const uint32_t b = __float_as_uint(f) >> 16;  // exact: e4m3 has 4 significant bits
  return b | (b << 16);
}

__global__ void __launch_bounds__(256)
    dequant_kernel(Nvfp4DequantParams p, uint32_t units, uint32_t kb) {
  const uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (p.alpha_out && idx < p.alpha_n) p.alpha_out[idx] = p.g_a ? __fmul_rn(*p.g_a, *p.g_w) : *p.g_w;
  if (idx >= units) return;
  const uint32_t r = idx / kb, b = idx - r * kb;
  const uint2 q = __ldcs(reinterpret_cast<const uint2*>(p.q) + idx);
  const uint32_t s2 = e4m3_to_bf16x2(p.scales[nvfp4::scale_offset(r, b, kb)]);
  uint4 o0, o1;
  decode8(q.x, s2, &o0.x);
  decode8(q.y, s2, &o1.x);
  uint4* dst = reinterpret_cast<uint4*>(p.out + int64_t(r) * p.out_row_stride + int64_t(b) * 16);
  dst[0] = o0;
  dst[1] = o1;
}

// Workspace layout of kDequantCublas.
struct Layout {
  size_t alpha, w, a, lt, total;
};
Layout layout_of(const LinearNvfp4CudaParams& p) {
  Layout l;
  l.alpha = 0;
  l.w = l.alpha + nvfp4_gemm::up256(size_t(p.out) * sizeof(float));
  l.a = l.w + nvfp4_gemm::up256(size_t(p.out) * p.in * 2);
  l.lt = l.a + (p.a_q ? nvfp4_gemm::up256(size_t(p.rows) * p.in * 2) : 0);
  l.total = l.lt + lt::kWorkspaceBytes;
  return l;
}

}  // namespace

cudaError_t nvfp4_dequant_bf16(const Nvfp4DequantParams& in, cudaStream_t stream) {
  Nvfp4DequantParams p = in;
  if (!p.out_row_stride) p.out_row_stride = p.cols;
  H3RT_CHECK(p.q && p.scales && p.out && p.rows >= 0 && p.cols > 0,
             "nvfp4_dequant_bf16: q, scales and out are required and cols > 0, got rows ", p.rows,
             ", cols ", p.cols);
  H3RT_CHECK(p.cols % 16 == 0 && p.out_row_stride >= p.cols && p.out_row_stride % 8 == 0,
             "nvfp4_dequant_bf16: cols (", p.cols,
             ") must be a multiple of 16, the out row stride (", p.out_row_stride,
             ") a multiple of 8 that is >= cols");
  H3RT_CHECK(
      reinterpret_cast<uintptr_t>(p.q) % 8 == 0 && reinterpret_cast<uintptr_t>(p.out) % 16 == 0,
      "nvfp4_dequant_bf16: q must be 8-byte and out 16-byte aligned");
  const int64_t units = p.rows * (p.cols / 16);
  H3RT_CHECK(units < (int64_t(1) << 31) && p.alpha_n <= std::max<int64_t>(units, 0),
             "nvfp4_dequant_bf16: rows x cols / 16 (", units,
             ") must stay below 2^31 and cover alpha_n (", p.alpha_n, ")");
  H3RT_CHECK(!p.alpha_out || p.g_w, "nvfp4_dequant_bf16: alpha_out needs g_w");
  if (units == 0) return cudaSuccess;
  const uint32_t blocks = static_cast<uint32_t>((units + 255) / 256);
  dequant_kernel<<<blocks, 256, 0, stream>>>(p, static_cast<uint32_t>(units),
                                             static_cast<uint32_t>(p.cols / 16));
  return H3RT_LAUNCH_CHECK("nvfp4_dequant_bf16");
}

namespace nvfp4_gemm {

size_t dequant_cublas_workspace_bytes(const LinearNvfp4CudaParams& p) {
  return layout_of(p).total;
}

// Expects the dispatcher's checked and normalised params (row strides set).
cudaError_t dequant_cublas(const LinearNvfp4CudaParams& p, cudaStream_t stream) {
  const int cc = cuda::current_device_cc();
  if (cc < 80 || !cuda::compiled_arch_supports(cc / 10, cc % 10)) return cudaErrorNotSupported;
  const Layout l = layout_of(p);
  H3RT_CHECK(p.workspace && p.workspace_bytes >= l.total,
             "linear_nvfp4 (dequant_cublas): workspace of ", p.workspace_bytes, " bytes, need ",
             l.total);
  char* ws = static_cast<char*>(p.workspace);
  float* alpha = reinterpret_cast<float*>(ws + l.alpha);
  auto* w16 = reinterpret_cast<__nv_bfloat16*>(ws + l.w);
  auto* a16 = reinterpret_cast<__nv_bfloat16*>(ws + l.a);

  Nvfp4DequantParams dw;
  dw.q = p.w_q;
  dw.scales = p.w_scales;
  dw.out = w16;
  dw.rows = p.out;
  dw.cols = p.in;
  dw.g_a = p.a_q ? p.a_global : nullptr;
  dw.g_w = p.w_global;
  dw.alpha_out = alpha;
  dw.alpha_n = p.out;
  cudaError_t e = nvfp4_dequant_bf16(dw, stream);
  if (e != cudaSuccess) return e;
  if (p.a_q) {
    Nvfp4DequantParams da;
    da.q = p.a_q;
    da.scales = p.a_scales;
    da.out = a16;
    da.rows = p.rows;
    da.cols = p.in;
    e = nvfp4_dequant_bf16(da, stream);
    if (e != cudaSuccess) return e;
  }
  lt::Gemm m = lt_gemm_base(p, lt::Operands::kBf16, alpha, ws + l.lt);
  m.w = w16;
  m.x = p.a_q ? static_cast<const void*>(a16) : p.a;
  m.x_ld = p.a_q ? p.in : p.a_row_stride;
  return lt::gemm(m, stream);
}

}  // namespace nvfp4_gemm
}  // namespace h3rt::ops
